"""Lens benchmark reports: mean ± std over seeds, the paper-style table, the checks, the PNG.

``summarise(report)`` turns the per-seed runs of ``run_lens_bench`` into
{model: {method: {"accuracy": (mean, std), "by_env": [(mean, std)], "captures", "latency_ms",
"visit_ms"}}}; ``lens_checks`` judges the qualitative claims on paired per-seed differences
("beyond noise" = the mean paired difference exceeds its std over seeds). One report per scene
set ("es-diverse", "wide-range"; lens.captures.SCENE_SETS); ``eval_lens`` runs and prints both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

METHOD_ORDER = ("clean", "ae", "naive", "best-fixed", "lens K=27")


def _ordered(methods: list[str]) -> list[str]:
    lens = [m for m in methods if m.startswith("lens K=") and m != "lens K=27"]  # as benchmarked
    ordered = [m for m in METHOD_ORDER if m in methods]
    other_ae = [m for m in methods if m.startswith("ae ")]  # AE with other metering modes
    if other_ae:
        ordered[ordered.index("ae") + 1 : ordered.index("ae") + 1] = other_ae
    return [*ordered, *lens, "oracle"]


def _ms(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), float(np.std(values))


def summarise(report: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per model and method: accuracy/latency/etc. as (mean, std) over the seeds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for model, entry in report["models"].items():
        runs = entry["runs"]
        methods = _ordered(list(runs[0]["methods"]))
        out[model] = {}
        for m in methods:
            rows = [r["methods"][m] for r in runs]
            row: dict[str, Any] = {"accuracy": _ms([r["accuracy"] for r in rows])}
            if rows[0].get("by_env"):
                row["by_env"] = [
                    _ms(list(v)) for v in zip(*(r["by_env"] for r in rows), strict=True)
                ]
            for key, scale in (("captures", 1.0), ("latency_s", 1e3), ("visit_s", 1e3)):
                if rows[0].get(key) is not None:
                    name = key.replace("_s", "_ms") if scale != 1.0 else key
                    row[name] = _ms([float(r[key]) * scale for r in rows])
            out[model][m] = row
    return out


def _paired(runs: list[dict[str, Any]], a: str, b: str) -> tuple[float, float]:
    diff = [r["methods"][a]["accuracy"] - r["methods"][b]["accuracy"] for r in runs]
    return float(np.mean(diff)), float(np.std(diff))


def small_k_method(report: dict[str, Any], k: int = 6) -> str | None:
    """The headline small-K Lens row of ``report``: "lens K=k selected" (strategy selected on
    the calibration scenes) when present, else the default strategy's; None if K=k was not run."""
    from edgekit.lens.controller import DEFAULT_STRATEGY

    methods = next(iter(report["models"].values()))["runs"][0]["methods"]
    for name in (f"lens K={k} selected", f"lens K={k} {DEFAULT_STRATEGY}", f"lens K={k}"):
        if name in methods:
            return name
    return None


def lens_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The qualitative claims per model, each {"model", "claim", "passed", "detail"}.

    "Beyond noise": the mean paired (same seed) difference is positive and larger than its std
    over seeds. Best-fixed and the small-K Lens row are also compared with the auto-exposure
    shots of every other metering mode ("ae center-weighted"). "Gain over X" of a Lens row: its
    accuracy minus X's ("ae": the camera's auto-exposure with its first metering mode, the
    primary baseline; "naive": a random grid setting); a small-K row "keeps
    >= 90 % of the K=27 gain" when its gain is >= 0.9 x the K=27 gain and that gain is > 0.
    The "fused" rows (decision="fuse") are compared with best-fixed and with their select rows.
    """
    checks = []
    for model, entry in report["models"].items():
        runs = entry["runs"]
        ks = sorted({int(m.split()[1][2:]) for m in runs[0]["methods"] if m.startswith("lens K=")})
        small = max([k for k in ks if k <= 6], default=None)
        headline = small_k_method(report, small) if small is not None else None
        pairs = [("lens K=27", "best-fixed"), ("best-fixed", "ae"), ("oracle", "lens K=27")]
        if headline is not None:
            pairs += [(headline, "best-fixed"), (headline, "ae"), ("oracle", headline)]
        # the auto-exposure shots of the camera's other metering modes ("ae center-weighted")
        for other in [m for m in runs[0]["methods"] if m.startswith("ae ")]:
            pairs += [("best-fixed", other)] + ([(headline, other)] if headline else [])
        # decision="fuse" (not the paper's Lens): the same candidates, a VisiT-weighted vote
        for fused in (f"{m} fused" for m in ("lens K=27", headline) if m is not None):
            if fused in runs[0]["methods"]:
                pairs += [(fused, "best-fixed"), (fused, fused[: -len(" fused")])]
        # the calibrated setting prior (lens.prior; not the paper's): VisiT + prior
        for m in ("lens K=27", headline):
            if m is not None and f"{m} prior" in runs[0]["methods"]:
                pairs += [(f"{m} prior", "best-fixed"), (f"{m} prior", m), ("oracle", f"{m} prior")]
                pairs += [(f"{m} prior", "ae")] if m == headline else []
        for a, b in pairs:
            mean, std = _paired(runs, a, b)
            checks.append(
                {
                    "model": model,
                    "claim": f"{a} > {b} beyond noise",
                    "passed": bool(mean > 0 and mean > std),
                    "detail": f"paired diff {100 * mean:+.1f} ± {100 * std:.1f} pts",
                }
            )
        if headline is None:
            continue
        kept = [("lens K=27", headline)]
        if f"{headline} prior" in runs[0]["methods"]:
            kept.append(("lens K=27 prior", f"{headline} prior"))
        for (k27, small), base in ((pair, b) for pair in kept for b in ("ae", "naive")):
            ref = np.mean([r["methods"][base]["accuracy"] for r in runs])
            full = np.mean([r["methods"][k27]["accuracy"] for r in runs]) - ref
            part = np.mean([r["methods"][small]["accuracy"] for r in runs]) - ref
            ratio = float(part / full) if full > 0 else float("nan")
            checks.append(
                {
                    "model": model,
                    "claim": f"{small} keeps >= 90% of the {k27.removeprefix('lens ')} gain over {base}",
                    "passed": bool(full > 0 and ratio >= 0.9),
                    "detail": f"gain {100 * part:+.1f} vs K=27 {100 * full:+.1f} pts "
                    f"({100 * ratio:.0f}%)",
                }
            )
    return checks


def _fmt(pair: tuple[float, float] | None, scale: float = 1.0, digits: int = 1) -> str:
    if pair is None:
        return "-"
    return f"{scale * pair[0]:.{digits}f} ± {scale * pair[1]:.{digits}f}"


def lens_table(report: dict[str, Any]) -> Any:
    """A rich Table: per model and method, top-1 accuracy (%), captures per decision,
    capture-to-decision latency (ms: shutter + readout + measured VisiT) and VisiT time (ms)."""
    from rich.markup import escape
    from rich.table import Table

    summary = summarise(report)
    seeds = len(report["config"]["seeds"])
    config = report["config"]
    scene_set = config.get("scene_set", "wide-range")
    calib = (
        f", {config['calibration_scenes']} calibration" if "calibration_scenes" in config else ""
    )
    table = Table(
        title=f"Lens on the simulated '{scene_set}' set (mean ± std over {seeds} seeds; "
        f"{config['test_scenes']} test scenes{calib} x {len(config['environments'])} "
        f"lighting environments; VisiT {config.get('variant', 'top1')})"
    )
    for col in ("Model", "Method", "Top-1 (%)", "Captures", "Capture→decision (ms)", "VisiT (ms)"):
        table.add_column(col, justify="left" if col in ("Model", "Method") else "right")
    for model, methods in summary.items():
        for i, (method, row) in enumerate(methods.items()):
            table.add_row(
                model if i == 0 else "",
                escape(method),  # "[margin]" would otherwise be read as rich markup
                _fmt(row["accuracy"], 100),
                _fmt(row.get("captures")),
                _fmt(row.get("latency_ms")),
                _fmt(row.get("visit_ms"), digits=2),
            )
        table.add_section()
    return table


def environment_table(report: dict[str, Any]) -> Any:
    """A rich Table: top-1 (%) per lighting environment (rows, with lux) for each model's
    auto-exposure, best-fixed, Lens K=6 (``small_k_method``), the same with the calibrated
    prior (when benchmarked) and oracle — where Lens wins and where it loses."""
    from rich.table import Table

    from edgekit.devices.lighting import get_lighting

    summary = summarise(report)
    envs = report["config"]["environments"]
    lens = small_k_method(report) or "lens K=27"
    with_prior = [f"{lens} prior"] if f"{lens} prior" in next(iter(summary.values()), {}) else []
    methods = ("ae", "best-fixed", lens, *with_prior, "oracle")
    table = Table(title="Top-1 (%) by lighting environment (mean over seeds)")
    table.add_column("Environment")
    table.add_column("lux", justify="right")
    for model in summary:
        for m in methods:
            table.add_column(f"{model}\n{m}", justify="right")
    for e, env in enumerate(envs):
        cells = [env, f"{get_lighting(env).lux:g}"]
        for rows in summary.values():
            for m in methods:
                by_env = (rows.get(m) or {}).get("by_env")
                cells.append(f"{100 * by_env[e][0]:.1f}" if by_env else "-")
        table.add_row(*cells)
    return table


def calibration_table(report: dict[str, Any]) -> Any:
    """A rich Table: each strategy's Lens accuracy (%) on the *calibration* scenes (mean ± std
    over seeds), per model and K: the data the default strategy is chosen on."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Candidate selection on the calibration scenes (top-1 %, not test)")
    for col in ("Model", "Method", "Top-1 (%)"):
        table.add_column(col, justify="right" if col == "Top-1 (%)" else "left")
    for model, entry in report["models"].items():
        calib = [r.get("calibration") or {} for r in entry["runs"]]
        for i, name in enumerate(calib[0]):
            values = [c[name] for c in calib]
            table.add_row(model if i == 0 else "", escape(name), _fmt(_ms(values), 100))
        table.add_section()
    return table


def variant_choice(report: dict[str, Any], k: int = 6) -> dict[str, dict[str, Any]]:
    """Which VisiT variant to deploy, read from the *calibration* scenes only: per model, the
    mean over seeds of Lens K=``k`` (default strategy) accuracy with each of
    lens.bench.REPORTED_VARIANTS, and the best ({model: {"variant", "accuracy": {v: acc}}};
    ties: the report's configured variant, then REPORTED_VARIANTS order). Empty without
    calibration rows at K=``k``."""
    from edgekit.lens.bench import REPORTED_VARIANTS, lens_method
    from edgekit.lens.controller import DEFAULT_STRATEGY

    configured = report["config"].get("variant", "top1")
    order = [configured, *(v for v in REPORTED_VARIANTS if v != configured)]
    out = {}
    for model, entry in report["models"].items():
        calib = [r.get("calibration") or {} for r in entry["runs"]]
        keys = {v: lens_method(k, DEFAULT_STRATEGY, None if v == configured else v) for v in order}
        if not calib or any(key not in c for c in calib for key in keys.values()):
            continue
        accuracy = {v: float(np.mean([c[key] for c in calib])) for v, key in keys.items()}
        out[model] = {"variant": max(order, key=lambda v: accuracy[v]), "accuracy": accuracy}
    return out


def visit_table(report: dict[str, Any]) -> Any:
    """A rich Table: is VisiT (the report's variant) a good judge of captures on this set? Per
    model (mean ± std over seeds): AUROC of the score for right vs wrong captures (all, within a
    scene, and within a scene over the environment's good exposures), mean
    score of right / wrong / near-black captures, accuracy on near-black captures, and what
    Lens K=27's wrong picks are (near-black, blown-out, the most frequent wrong class)."""
    from rich.table import Table

    from edgekit.devices.scenes import PHOTOS

    variant = report["config"].get("variant", "top1")
    table = Table(
        title=f"VisiT ({variant}) diagnostics on the test captures (why Lens K=27 wins or loses)"
    )
    cols = (
        ("AUROC", "auroc", 1.0, 3),
        ("AUROC in scene", "auroc_within_scene", 1.0, 3),
        ("AUROC good exp.", "auroc_good_exposures", 1.0, 3),
        ("top-1 right", "score_right", 1.0, 2),
        ("top-1 wrong", "score_wrong", 1.0, 2),
        ("top-1 near-black", "score_dark", 1.0, 2),
        ("acc near-black (%)", "dark_accuracy", 100.0, 1),
        ("K=27 wrong: black (%)", "k27_wrong_dark_share", 100.0, 0),
        ("K=27 wrong: blown (%)", "k27_wrong_blown_share", 100.0, 0),
    )
    table.add_column("Model")
    for title, *_ in cols:
        table.add_column(title, justify="right")
    table.add_column("K=27 wrong: top class", justify="right")
    for model, entry in report["models"].items():
        diags = [r.get("visit") or {} for r in entry["runs"]]
        if not all(diags):
            continue
        cells = [model]
        for _, key, scale, digits in cols:  # reports written before a column lack its key
            values = [d.get(key, float("nan")) for d in diags]
            cells.append(_fmt(_ms(values), scale, digits))
        top, share = diags[0]["top_wrong_class"], diags[0]["top_wrong_class_share"]
        name = PHOTOS[top] if top < len(PHOTOS) else str(top)
        cells.append(f"{name} ({100 * share:.0f}%, seed 0)")
        table.add_row(*cells)
    return table


def overhead_table(report: dict[str, Any]) -> Any:
    """A rich Table of measured VisiT batch time (ms) per bundle and batch size (fp32 vs int8)."""
    from rich.table import Table

    sizes = sorted({int(n) for e in report["models"].values() for n in e["timing_s"]})
    table = Table(title="VisiT overhead per decision (median ms of one batch, this CPU)")
    table.add_column("Bundle")
    for n in sizes:
        table.add_column(f"batch {n}", justify="right")
    for model, entry in report["models"].items():
        timing = {int(k): v for k, v in entry["timing_s"].items()}
        table.add_row(model, *[f"{1e3 * timing[n]:.2f}" for n in sizes])
    return table


def lens_plot(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """PNG: accuracy by lighting environment per method (one panel per model, error bars = std)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = summarise(report)
    envs = report["config"]["environments"]
    # the headline methods only (every strategy and variant is in the table and JSON)
    small = small_k_method(report)
    headline = {"ae", "naive", "best-fixed", "lens K=27", small, f"{small} prior", "oracle"}
    fig, axes = plt.subplots(len(summary), 1, figsize=(12, 3.6 * len(summary)), squeeze=False)
    for ax, (model, methods) in zip(axes[:, 0], summary.items(), strict=True):
        shown = [m for m, row in methods.items() if row.get("by_env") and m in headline]
        width = 0.8 / len(shown)
        x = np.arange(len(envs))
        for j, m in enumerate(shown):
            mean = [100 * v[0] for v in methods[m]["by_env"]]
            std = [100 * v[1] for v in methods[m]["by_env"]]
            ax.bar(
                x + j * width - 0.4 + width / 2,
                mean,
                width,
                yerr=std,
                label=m,
                capsize=2,
                color=plt.cm.tab10(j),
            )
        ax.set_xticks(x, envs)
        ax.set_ylim(0, 105)
        ax.set_ylabel("top-1 (%)")
        ax.set_title(f"{model} ({report['config'].get('scene_set', 'wide-range')} set)")
        ax.legend(ncol=len(shown), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=110)
    plt.close(fig)
    return dest


def add_summaries(report: dict[str, Any]) -> dict[str, Any]:
    """Add "summary" (summarise), "checks" (lens_checks) and "variant_choice" to a finished
    benchmark ``report`` (in place); returns it."""
    report["summary"] = summarise(report)
    report["checks"] = lens_checks(report)
    report["variant_choice"] = variant_choice(report)
    return report


def print_report(report: dict[str, Any], console: Any) -> None:
    """The tables, checks and notes of one scene set's report on ``console``."""
    from edgekit.lens.prior import SettingPrior

    for table in (lens_table, environment_table, calibration_table, visit_table, overhead_table):
        console.print(table(report))
    for c in report["checks"]:
        mark = "[green]PASS[/]" if c["passed"] else "[red]FAIL[/]"
        console.print(f"{mark} {c['model']}: {c['claim']} ({c['detail']})")
    for model, entry in report["models"].items():
        chosen = [SettingPrior.load_json(r["prior"]) for r in entry["runs"] if r.get("prior")]
        if chosen:
            console.print(
                f"prior chosen on the calibration scenes, {model}: per seed "
                f"{'; '.join(p.describe() for p in chosen)}; deployable prior (all seeds' "
                f"calibration scenes): {SettingPrior.load_json(entry['prior']).describe()}"
            )
    for model, choice in variant_choice(report).items():
        others = ", ".join(
            f"{v} {100 * a:.1f}" for v, a in choice["accuracy"].items() if v != choice["variant"]
        )
        console.print(
            f"VisiT variant best on the calibration scenes (Lens K=6, all seeds), {model}: "
            f"{choice['variant']} {100 * choice['accuracy'][choice['variant']]:.1f} % "
            f"({others}); run lens --variant {choice['variant']}"
        )
    for note in report["notes"]:
        console.print(f"note: {note}")


def write_priors(report: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Save each bundle's deployable prior of ``report`` (``prior_path``); returns the paths."""
    from edgekit.lens.prior import SettingPrior

    scene_set = report["config"].get("scene_set", "wide-range")
    return [
        SettingPrior.load_json(entry["prior"]).save(prior_path(out_dir, scene_set, model))
        for model, entry in report["models"].items()
    ]


def prior_path(out_dir: str | os.PathLike[str], scene_set: str, model: str) -> Path:
    """Where ``eval lens`` writes a classifier's deployable prior: <out>/lens-<set>-prior-
    <model, with ':' and spaces as '-'>.json (``run lens --prior`` reads it)."""
    safe = model.replace(":", "-").replace(" ", "-")
    return Path(out_dir) / f"lens-{scene_set}-prior-{safe}.json"


def eval_lens(
    out_dir: str | os.PathLike[str] = "lens-eval",
    seeds: int = 3,
    environments: list[str] | None = None,
    test_per_class: int = 4,
    progress: bool = True,
    scene_sets: tuple[str, ...] | None = None,
    models: list[str] | None = None,
    variant: str = "top1",
    calib_per_class: int = 2,
    first_seed: int = 0,
) -> dict[str, Any]:
    """``edgekit eval lens``: run the benchmark on each scene set (default: both,
    "es-diverse" then "wide-range"; with ``environments``, the set holding them), print the
    tables and checks, write ``<out_dir>/lens-<set>.json`` and ``<out_dir>/lens-<set>.png``;
    returns {set: report (with summary and checks)}. ``models``: classifier specs to bench
    ("photo-cnn:sensor-aware": its fp32 and int8 bundles; default: lens.bench.BENCH_TARGETS).
    ``variant``: the VisiT variant of the headline rows and checks (visit.VARIANTS);
    ``calib_per_class``: calibration scenes per class and seed (they choose best-fixed, the
    candidate strategy, the VisiT variant and the prior)."""
    from edgekit.bench.tables import write_report
    from edgekit.console import wide_console
    from edgekit.lens.bench import LensBenchConfig, lens_targets, run_lens_bench
    from edgekit.lens.captures import SCENE_SETS, resolve_scene_set

    targets = lens_targets(models or [])

    if scene_sets is None:
        envs = tuple(environments) if environments else None
        scene_sets = (resolve_scene_set(None, envs),) if envs else SCENE_SETS
    out = Path(out_dir)
    console = wide_console()
    reports = {}
    for scene_set in scene_sets:
        config = LensBenchConfig(
            seeds=tuple(range(first_seed, first_seed + seeds)),
            environments=tuple(environments) if environments else None,
            scene_set=scene_set,
            test_per_class=test_per_class,
            calib_per_class=calib_per_class,
            targets=targets,
            variant=variant,
        )
        report = run_lens_bench(config, progress=progress)
        add_summaries(report)
        write_report(report, out / f"lens-{scene_set}.json")
        write_priors(report, out)
        lens_plot(report, out / f"lens-{scene_set}.png")
        print_report(report, console)
        console.print(
            f"wrote {out / f'lens-{scene_set}.json'} and {out / f'lens-{scene_set}.png'} "
            f"({report['elapsed_s']:.0f} s)"
        )
        reports[scene_set] = report
    return reports
