"""Trainability over 50 random-label digits tasks: none vs L2 vs L2-to-init vs spectral.

One MLP (64-128-128-10) trained by Adam through the whole stream; each task relabels the same
128 digits at random and gets 240 steps. A network that keeps its plasticity memorises every
new labelling; one that loses it fails on later tasks however long it saw earlier ones.

Each regulariser runs at three strengths (``STRENGTHS`` times ``SCALES``: a sensitivity sweep)
on the first seed; the sweep table gives, per run, the end-of-task training accuracy (first 10
tasks, last 10, worst task) and sigma_max of each layer at init and at the end; the best
strength of each regulariser (by last-10 accuracy, then mean accuracy) is starred and plotted:
accuracy per task, and sigma_max per layer over tasks. That strength then runs on every seed
(``SEEDS``: each seed draws its own labellings and initialisation, the same for every
regulariser), and the seed table gives last-10 and mean accuracy as mean ± SE over seeds with
the paired differences against no regulariser and against L2-to-init
(``edgekit.numeric.seed_summary``); chance is 0.10. Runs are cached
(``cache.continual_cached``); the 26 runs take about 15 minutes on one CPU thread the first time.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from edgekit.card import ModelCard
from edgekit.models.spectral_reg.cache import continual_cached
from edgekit.models.spectral_reg.continual import ContinualConfig
from edgekit.numeric import format_diff, format_mean_se, seed_summary
from edgekit.study import save_figure, write_study

# centre lambda per regulariser (loss = task + lambda * penalty), swept over SCALES
STRENGTHS: dict[str, float] = {"none": 0.0, "l2": 1e-4, "l2-init": 1e-3, "spectral": 1e-2}
SCALES = (0.1, 1.0, 10.0)
WINDOW = 10  # tasks averaged at the start and at the end of the stream
SEEDS = (0, 1, 2, 3, 4)  # the sweep runs on the first; each regulariser's best strength on all
CHANCE = 0.1  # accuracy of a guess on ten random labels
REFERENCES = {"none": "vs_none", "l2-init": "vs_l2_init"}  # paired differences in the summary


def _clean(values: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def _row(config: ContinualConfig, result: Any) -> dict[str, Any]:
    acc = result.train_accuracy
    window = min(WINDOW, len(acc))
    return {
        "regularizer": config.regularizer,
        "strength": config.strength,
        "first_tasks_accuracy": statistics.fmean(acc[:window]),
        "last_tasks_accuracy": statistics.fmean(acc[-window:]),
        "worst_task_accuracy": min(acc),
        "mean_accuracy": statistics.fmean(acc),
        "final_sigmas": result.sigmas[-1],
        "initial_sigmas": result.init_sigmas,
        "seconds": result.seconds,
        "train_accuracy": acc,
        "first_epoch_accuracy": result.first_epoch_accuracy,
        "test_accuracy": _clean(result.test_accuracy),
        "sigmas": result.sigmas,
    }


SEED_FIELDS = (
    "regularizer",
    "strength",
    "seed",
    "first_tasks_accuracy",
    "last_tasks_accuracy",
    "worst_task_accuracy",
    "mean_accuracy",
    "final_sigmas",
    "seconds",
)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per regulariser, from its runs on the seeds (the same seeds, in the same order, for every
    regulariser): last-10 and mean accuracy over seeds (``seed_summary``: mean, se, values) and
    the paired last-10 differences against "none" (``vs_none``) and "l2-init" (``vs_l2_init``),
    None for the reference itself or where it did not run."""
    summary = []
    for name, seeded in runs.items():
        last = [r["last_tasks_accuracy"] for r in seeded]
        entry = {
            "regularizer": name,
            "strength": seeded[0]["strength"],
            "seeds": [r["seed"] for r in seeded],
            "last_tasks_accuracy": seed_summary(last),
            "mean_accuracy": seed_summary([r["mean_accuracy"] for r in seeded]),
        }
        for ref, key in REFERENCES.items():
            against = [r["last_tasks_accuracy"] for r in runs.get(ref, [])]
            entry[key] = seed_summary(last, against) if ref != name and against else None
        summary.append(entry)
    return summary


def run_study(
    base: ContinualConfig | None = None,
    strengths: dict[str, float] | None = None,
    show_progress: bool = True,
    scales: tuple[float, ...] = SCALES,
    seeds: tuple[int, ...] = SEEDS,
) -> dict[str, Any]:
    """The sweep on ``seeds[0]``: one continual run (cached) per regulariser and lambda scale
    ("none" runs once), each regulariser's best run marked ("best"); then each best strength on
    the other seeds ("seed_runs", every seed) and the summary over seeds; returns the report."""
    from edgekit.progress import step_progress

    base = replace(base or ContinualConfig(), seed=seeds[0])
    strengths = strengths or STRENGTHS
    grid = [
        (name, strength * scale)
        for name, strength in strengths.items()
        for scale in (scales if name != "none" else (1.0,))
    ]
    total = len(grid) + len(strengths) * (len(seeds) - 1)
    rows = []
    with step_progress("spectral-reg study", total, show_progress) as step:
        for name, strength in grid:
            step(f"{name} (lambda {strength:g}), seed {base.seed}, {base.tasks} tasks")
            config = replace(base, regularizer=name, strength=strength)
            rows.append(_row(config, continual_cached(config)) | {"seed": base.seed})
        runs: dict[str, list[dict[str, Any]]] = {}
        for name in strengths:
            sweep = [r for r in rows if r["regularizer"] == name]
            best = max(sweep, key=lambda r: (r["last_tasks_accuracy"], r["mean_accuracy"]))
            for r in sweep:
                r["best"] = r is best
            runs[name] = [best]
            for seed in seeds[1:]:
                step(f"{name} (lambda {best['strength']:g}), seed {seed}, {base.tasks} tasks")
                config = replace(base, regularizer=name, strength=best["strength"], seed=seed)
                runs[name].append(_row(config, continual_cached(config)) | {"seed": seed})
    seed_runs = [
        {k: v for k, v in r.items() if k in SEED_FIELDS} for seeded in runs.values() for r in seeded
    ]
    report = {"config": asdict(base), "strengths": dict(strengths), "rows": rows}
    return report | {
        "scales": list(scales),
        "seeds": list(seeds),
        "chance": CHANCE,
        "seed_runs": seed_runs,
        "summary": summarise(runs),
    }


def print_table(report: dict[str, Any]) -> None:
    """Accuracy at the start / end of the stream and final sigma_max per layer."""
    from rich.table import Table

    from edgekit.console import wide_console

    rows = report["rows"]
    layers = list(rows[0]["final_sigmas"])
    n = report["config"]["tasks"]
    table = Table(
        title=f"{n} sequential {report['config']['task_kind']} tasks: end-of-task train accuracy"
    )
    for col in ("regularizer", "lambda", f"tasks 1-{WINDOW}", f"last {WINDOW}", "worst", "mean"):
        table.add_column(col, justify="left" if col == "regularizer" else "right")
    for layer in layers:
        table.add_column(f"sigma_max {layer} (init -> end)", justify="right")
    table.add_column("seconds", justify="right")
    for r in rows:
        table.add_row(
            r["regularizer"] + (" *" if r["best"] else ""),
            f"{r['strength']:g}",
            f"{r['first_tasks_accuracy']:.3f}",
            f"{r['last_tasks_accuracy']:.3f}",
            f"{r['worst_task_accuracy']:.3f}",
            f"{r['mean_accuracy']:.3f}",
            *(f"{r['initial_sigmas'][k]:.2f} -> {r['final_sigmas'][k]:.2f}" for k in layers),
            f"{r['seconds']:.0f}",
        )
    console = wide_console()
    console.print(table)
    console.print(
        f"* the best lambda of each regulariser (last-10 accuracy, then mean; seed "
        f"{report['seeds'][0]}); plotted, and run on every seed"
    )
    console.print(seed_table(report))
    console.print(
        "differences are paired over seeds (same labellings and initialisation): mean ± SE of "
        "(regulariser - reference) per seed, seeds where the regulariser is higher; * where "
        "|difference| > 2 SE"
    )


def seed_table(report: dict[str, Any]) -> Any:
    """The rich table over seeds: chance, then per regulariser (best lambda) last-10 and mean
    accuracy (mean ± SE) and the paired last-10 differences against none and L2-to-init."""
    from rich.table import Table

    n = len(report["seeds"])
    table = Table(
        title=f"{n} seeds (best lambda of each): end-of-task train accuracy, mean ± SE over seeds"
    )
    columns = ("regularizer", "lambda", f"last {WINDOW}", "mean", "- none", "- L2-init")
    for col in columns:
        table.add_column(col, justify="left" if col == "regularizer" else "right")
    chance = f"{report['chance']:.3f}"
    table.add_row("chance (random labels)", "", chance, chance, "", "")
    for entry in report["summary"]:
        last, mean = entry["last_tasks_accuracy"], entry["mean_accuracy"]
        table.add_row(
            entry["regularizer"],
            f"{entry['strength']:g}",
            format_mean_se(last["mean"], last["se"]),
            format_mean_se(mean["mean"], mean["se"]),
            format_diff(entry["vs_none"]),
            format_diff(entry["vs_l2_init"]),
        )
    return table


def plot(report: dict[str, Any], path: Path) -> Path:
    """Top: train accuracy per task per regulariser; bottom: sigma_max per layer over tasks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = [r for r in report["rows"] if r["best"]]
    fig = plt.figure(figsize=(4 * len(best), 7))
    grid = fig.add_gridspec(2, len(best))
    top = fig.add_subplot(grid[0, :])
    for r in best:
        tasks = range(1, len(r["train_accuracy"]) + 1)
        top.plot(tasks, r["train_accuracy"], label=f"{r['regularizer']} ({r['strength']:g})")
    top.set(xlabel="task", ylabel="end-of-task train accuracy", ylim=(0, 1.02))
    top.set_title("trainability over sequential random-label tasks (best lambda of each)")
    top.legend(fontsize=8)
    high = max(max(s.values()) for r in best for s in r["sigmas"])
    for i, r in enumerate(best):
        ax = fig.add_subplot(grid[1, i])
        for layer in r["sigmas"][0]:
            curve = [r["initial_sigmas"][layer]] + [s[layer] for s in r["sigmas"]]
            ax.plot(range(len(curve)), curve, label=layer)
        ax.axhline(1.0, color="k", ls=":", lw=0.8)
        ax.set(xlabel="task (0 = init)", ylabel="sigma_max", ylim=(0, high * 1.05))
        ax.set_title(f"{r['regularizer']} ({r['strength']:g}): sigma_max per layer")
        ax.legend(fontsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path,
    show_progress: bool = True,
    base: ContinualConfig | None = None,
    scales: tuple[float, ...] = SCALES,
    seeds: tuple[int, ...] = SEEDS,
) -> dict[str, Any]:
    """Run (or load) the study, print its tables, write ``report.json`` and
    ``spectral_reg.png`` under ``out``."""
    return write_study(
        run_study(base, show_progress=show_progress, scales=scales, seeds=seeds),
        out,
        print_table,
        plot,
        "spectral_reg.png",
    )


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval spectral-reg`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return experiment(Path(out), show_progress)
