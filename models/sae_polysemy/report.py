"""The PS-Eval table (variant x layer x site) and the MSE-L0 frontier vs polysemy separation.

``run_report`` trains (or loads) every SAE of the study and measures each one:

- the table: ReLU/TopK/JumpReLU at their default sparsity, on every layer (0-5), residual
  stream and attention output (36 SAEs);
- the frontier sweep: at ``FRONTIER_HOOKS`` each variant at two more sparsity settings, so
  each variant traces an MSE-L0 curve; every variant is read at the same L0 (``REFERENCE_L0``,
  log-log interpolation) and the ranking by MSE is compared with the ranking by F1 and
  specificity;
- an expansion sweep (TopK at 2x, 4x, 8x on one hook point) for the specificity trend;
- the positive control (``control.planted_control``): the card's SAE recipe on synthetic
  activations with planted senses, which PS-Eval must score well above chance, and its
  broken variants, which must not.

``eval_table`` is what ``edgekit eval sae-polysemy`` runs: it prints the tables and writes
``report.json`` (and a frontier plot) to ``out``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.models.sae_polysemy.activations import HookPoint, all_hook_points
from edgekit.models.sae_polysemy.control import planted_control
from edgekit.models.sae_polysemy.train import SAEConfig, load_activations, train_suite, with_hook
from edgekit.models.sae_polysemy.wic import load_wic
from edgekit.study import save_figure

VARIANTS = ("relu", "topk", "jumprelu")
FRONTIER_HOOKS = (HookPoint(3, "resid"), HookPoint(3, "attn"))
SWEEP: dict[str, tuple[dict[str, Any], ...]] = {
    "topk": ({"k": 16}, {"k": 64}),
    "relu": ({"l1_coeff": 3e-3}, {"l1_coeff": 1.2e-2}),
    "jumprelu": ({"l0_coeff": 1.5e-3}, {"l0_coeff": 6e-3}),
}
EXPANSION_HOOK = HookPoint(5, "attn")
EXPANSIONS = (2, 4, 8)
REFERENCE_L0 = 32.0
METRICS = ("mse", "l0", "accuracy", "precision", "recall", "specificity", "f1")


def table_configs(base: SAEConfig | None = None) -> list[SAEConfig]:
    """Every variant (default sparsity) at every hook point: 3 x 6 x 2 configs."""
    base = base or SAEConfig()
    return [
        with_hook(replace(base, variant=v), hook) for hook in all_hook_points() for v in VARIANTS
    ]


def frontier_configs(base: SAEConfig | None = None) -> list[SAEConfig]:
    """At each frontier hook, every variant at its default and its two sweep settings."""
    base = base or SAEConfig()
    configs = []
    for hook in FRONTIER_HOOKS:
        for variant in VARIANTS:
            default = with_hook(replace(base, variant=variant), hook)
            configs += [default] + [replace(default, **knob) for knob in SWEEP[variant]]
    return configs


def expansion_configs(base: SAEConfig | None = None) -> list[SAEConfig]:
    """TopK at each expansion ratio on ``EXPANSION_HOOK``."""
    base = with_hook(replace(base or SAEConfig(), variant="topk"), EXPANSION_HOOK)
    return [replace(base, expansion=e) for e in EXPANSIONS]


def _row(config: SAEConfig, metrics: dict[str, float], seconds: float) -> dict[str, Any]:
    return {
        "variant": config.variant,
        "layer": config.layer,
        "site": config.site,
        "expansion": config.expansion,
        "sparsity": config.sparsity_knob,
        "train_seconds": round(seconds, 2),
        **{k: float(v) for k, v in metrics.items()},
    }


def measure(configs: list[SAEConfig], show_progress: bool = True, workers: int = 2) -> list[dict]:
    """Train (or load) and evaluate ``configs``: one row of metrics per config."""
    from edgekit.models.sae_polysemy.pseval import evaluate_sae, prompt_activations

    results = train_suite(configs, show_progress, workers)
    hooks = sorted({c.hook for c in configs})
    _, heldout = load_activations(hooks, configs[0].corpus_templated)
    prompt_activations(hooks)  # every hook's PS-Eval activations in one MiniLM pass (cached)
    rows = []
    for config, result in zip(configs, results, strict=True):
        metrics = evaluate_sae(result.build(), config.hook, heldout[config.hook])
        rows.append(_row(config, metrics, result.seconds))
    return rows


def _at_l0(points: list[tuple[float, float]], l0: float) -> tuple[float, bool]:
    """Value at ``l0`` from (l0, value) points, linear in log L0 (and log value when all are
    positive); the bool says whether it had to extrapolate."""
    pts = sorted((p for p in points if p[0] > 0), key=lambda p: p[0])
    xs = np.log([p[0] for p in pts])
    positive = all(p[1] > 0 for p in pts)
    ys = np.log([p[1] for p in pts]) if positive else np.array([p[1] for p in pts])
    x = math.log(l0)
    outside = x < xs[0] or x > xs[-1]
    i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2))
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] != xs[i] else 0.0
    y = ys[i] + slope * (x - xs[i])
    return (float(math.exp(y)) if positive else float(y)), outside


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def frontier_analysis(
    rows: list[dict], table_rows: list[dict], reference_l0: float = REFERENCE_L0
) -> dict[str, Any]:
    """Per frontier hook (sweep ``rows``): each variant's MSE, F1 and specificity read at
    ``reference_l0``; whether the best frontier (lowest MSE) is also the best F1 /
    specificity. Over ``table_rows``: Spearman of reconstruction quality (-FVU) vs F1 and vs
    specificity, over all SAEs and within each hook point (the variants there)."""
    per_hook: dict[str, Any] = {}
    for hook in FRONTIER_HOOKS:
        variants = {}
        for variant in VARIANTS:
            points = [
                r for r in rows if (r["layer"], r["site"], r["variant"]) ==
                (hook.layer, hook.site, variant) and r["expansion"] == SAEConfig().expansion
            ]  # fmt: skip
            if len(points) < 2:
                continue
            entry = {}
            for metric in ("mse", "f1", "specificity"):
                value, extrapolated = _at_l0([(p["l0"], p[metric]) for p in points], reference_l0)
                entry[metric] = value
                entry["extrapolated"] = entry.get("extrapolated", False) or extrapolated
            entry["l0_range"] = [min(p["l0"] for p in points), max(p["l0"] for p in points)]
            variants[variant] = entry
        if len(variants) < 2:
            continue
        best_frontier = min(variants, key=lambda v: variants[v]["mse"])
        per_hook[hook.name] = {
            "variants": variants,
            "best_frontier": best_frontier,
            "best_f1": max(variants, key=lambda v: variants[v]["f1"]),
            "best_specificity": max(variants, key=lambda v: variants[v]["specificity"]),
        }
    within: dict[str, list[float]] = {"f1": [], "specificity": []}
    for hook in all_hook_points():
        group = [r for r in table_rows if (r["layer"], r["site"]) == (hook.layer, hook.site)]
        for metric in within:
            rho = _spearman([-r["fvu"] for r in group], [r[metric] for r in group])
            if not math.isnan(rho):
                within[metric].append(rho)
    return {
        "reference_l0": reference_l0,
        "hooks": per_hook,
        "agreement": {
            "best_frontier_is_best_f1": sum(
                h["best_frontier"] == h["best_f1"] for h in per_hook.values()
            ),
            "best_frontier_is_best_specificity": sum(
                h["best_frontier"] == h["best_specificity"] for h in per_hook.values()
            ),
            "hooks": len(per_hook),
        },  # fmt: skip
        "spearman_quality_vs_metric": {
            "all_rows_f1": _spearman(
                [-r["fvu"] for r in table_rows], [r["f1"] for r in table_rows]
            ),
            "all_rows_specificity": _spearman(
                [-r["fvu"] for r in table_rows], [r["specificity"] for r in table_rows]
            ),
            "mean_within_hook_f1": float(np.mean(within["f1"])) if within["f1"] else math.nan,
            "mean_within_hook_specificity": (
                float(np.mean(within["specificity"])) if within["specificity"] else math.nan
            ),
        },
    }


def trends(rows: list[dict]) -> dict[str, Any]:
    """Mean F1 / specificity by layer and by site over the table rows, and TopK specificity by
    expansion ratio."""
    table = [r for r in rows if r.get("part") == "table"]
    out: dict[str, Any] = {"by_layer": {}, "by_site": {}, "by_variant": {}, "by_expansion": {}}
    for key, field in (("by_layer", "layer"), ("by_site", "site"), ("by_variant", "variant")):
        for value in sorted({r[field] for r in table}, key=str):
            group = [r for r in table if r[field] == value]
            out[key][str(value)] = {
                m: float(np.mean([r[m] for r in group])) for m in ("f1", "specificity", "fvu")
            }
    for r in rows:
        if r.get("part") == "expansion":
            out["by_expansion"][str(r["expansion"])] = {
                m: r[m] for m in ("specificity", "f1", "mse", "l0")
            }
    return out


def run_report(show_progress: bool = True, workers: int = 2) -> dict[str, Any]:
    """Train/load and measure the whole study; returns {"rows", "frontier", "trends", ...}."""
    parts = {
        "table": table_configs(),
        "frontier": frontier_configs(),
        "expansion": expansion_configs(),
    }
    unique = list(dict.fromkeys(c for configs in parts.values() for c in configs))
    measured = dict(zip(unique, measure(unique, show_progress, workers), strict=True))
    rows = []
    for part, configs in parts.items():
        rows += [{**measured[c], "part": part} for c in configs]
    return {
        "rows": rows,
        "frontier": frontier_analysis(
            [r for r in rows if r["part"] == "frontier"], [r for r in rows if r["part"] == "table"]
        ),
        "trends": trends(rows),
        "train_seconds_total": round(sum(measured[c]["train_seconds"] for c in unique), 1),
        "sae_count": len(unique),
        "pairs": len(load_wic()),
        "config": asdict(SAEConfig()),
        "planted_control": planted_control(SAEConfig()),
    }


def print_report(report: dict[str, Any], console: Any) -> None:
    """Rich tables: the main table, the frontier reading and the trends."""
    from rich.table import Table

    table = Table(title="PS-Eval on MiniLM (WiC set, 320 pairs); MSE/L0 on held-out corpus")
    for col in ("variant", "layer", "site", "sparsity", *METRICS):
        table.add_column(col, justify="right" if col in METRICS or col == "layer" else "left")
    for r in sorted((r for r in report["rows"] if r["part"] == "table"),
                    key=lambda r: (r["variant"], r["site"], r["layer"])):  # fmt: skip
        table.add_row(
            r["variant"], str(r["layer"]), r["site"], r["sparsity"],
            *(f"{r[m]:.3f}" if m != "l0" else f"{r[m]:.1f}" for m in METRICS),
        )  # fmt: skip
    console.print(table)
    frontier = report["frontier"]
    ft = Table(title=f"Frontier sweep read at L0 = {frontier['reference_l0']:g}")
    for col in ("hook", "variant", "L0 range", "MSE", "F1", "specificity", "extrapolated"):
        ft.add_column(col)
    for hook, data in frontier["hooks"].items():
        for variant, e in data["variants"].items():
            ft.add_row(
                hook, variant, f"{e['l0_range'][0]:.1f}-{e['l0_range'][1]:.1f}",
                f"{e['mse']:.4f}", f"{e['f1']:.3f}", f"{e['specificity']:.3f}",
                "yes" if e["extrapolated"] else "no",
            )  # fmt: skip
    console.print(ft)
    agree = frontier["agreement"]
    rho = frontier["spearman_quality_vs_metric"]
    console.print(
        f"best frontier = best F1 at {agree['best_frontier_is_best_f1']}/{agree['hooks']} "
        f"hooks, = best specificity at {agree['best_frontier_is_best_specificity']}/"
        f"{agree['hooks']}; Spearman(reconstruction quality, F1) over all SAEs "
        f"{rho['all_rows_f1']:.2f}, within a hook point {rho['mean_within_hook_f1']:.2f}; "
        f"vs specificity {rho['all_rows_specificity']:.2f} / "
        f"{rho['mean_within_hook_specificity']:.2f}"
    )
    pairs = report.get("pairs", 320)
    half_width = 1.96 * math.sqrt(0.25 / pairs)
    console.print(
        f"accuracy on {pairs} pairs: 95 % interval about +-{half_width:.3f} around 0.5 "
        "(always answering 'same' scores accuracy 0.5, specificity 0 and F1 0.667)"
    )
    control = report.get("planted_control")
    if control:
        console.print(
            f"positive control ({control['ps_eval_planted_pairs']:.0f} synthetic pairs, senses "
            f"planted on known directions, the card's TopK recipe): accuracy "
            f"{control['ps_eval_planted']:.3f}; broken (both senses on one direction) "
            f"{control['ps_eval_planted_broken']:.3f}, untrained SAE "
            f"{control['ps_eval_planted_untrained']:.3f}, raw activations "
            f"{control['ps_eval_planted_raw']:.3f}"
        )
    tr = report["trends"]
    for key in ("by_layer", "by_site", "by_variant"):
        console.print(
            f"{key}: "
            + "; ".join(
                f"{k} F1 {v['f1']:.3f} spec {v['specificity']:.3f}" for k, v in tr[key].items()
            )  # fmt: skip
        )
    console.print(
        "TopK expansion: "
        + "; ".join(
            f"{k}x spec {v['specificity']:.3f} F1 {v['f1']:.3f} MSE {v['mse']:.4f}"
            for k, v in tr["by_expansion"].items()
        )  # fmt: skip
    )
    console.print(
        f"{report['sae_count']} SAEs, {report['train_seconds_total']:.0f} s of training "
        "(sum over SAEs; 0 extra when loaded from the cache)"
    )


def plot_frontier(report: dict[str, Any], path: Path) -> Path:
    """MSE vs L0 per variant at each frontier hook, each point labelled with its PS-Eval
    accuracy and specificity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(FRONTIER_HOOKS), figsize=(5 * len(FRONTIER_HOOKS), 4))
    for ax, hook in zip(np.atleast_1d(axes), FRONTIER_HOOKS, strict=True):
        for variant in VARIANTS:
            pts = sorted(
                (r for r in report["rows"] if r["part"] == "frontier" and r["variant"] == variant
                 and (r["layer"], r["site"]) == (hook.layer, hook.site)),
                key=lambda r: r["l0"],
            )  # fmt: skip
            ax.plot([p["l0"] for p in pts], [p["mse"] for p in pts], marker="o", label=variant)
            for p in pts:
                label = f"acc {p['accuracy']:.2f} spec {p['specificity']:.2f}"
                ax.annotate(label, (p["l0"], p["mse"]), fontsize=7)
        ax.set(xscale="log", yscale="log", xlabel="L0", ylabel="MSE", title=hook.name)
        ax.legend()
    return save_figure(fig, path)


def eval_table(
    out: Path = Path("out/sae-polysemy"), show_progress: bool = True, workers: int = 2
) -> dict[str, Any]:
    """``edgekit eval sae-polysemy``: run the study, print it, write report.json and
    frontier.png under ``out``; returns the report."""
    from edgekit.cache import atomic_write_text
    from edgekit.console import wide_console

    report = run_report(show_progress, workers)
    print_report(report, wide_console())
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=float))
    plot_frontier(report, out / "frontier.png")
    wide_console().print(f"wrote {out / 'report.json'} and {out / 'frontier.png'}")
    return report
