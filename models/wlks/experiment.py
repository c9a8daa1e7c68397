"""WLKS study: each kernel alone (k = 0, k = D) vs combined, and a GIN baseline, on the four
SubGNN-style synthetic tasks; micro-F1 on the test split (48 subgraphs per seed) and training
time, mean and standard error over 5 seeds, beside the trivial baseline (the most common
training label, "majority").

WLKS times cover WL refinement, kernels and the whole validation grid (depth x cost x a_c);
the GIN time covers its full-batch training with per-epoch validation. About a minute on one
CPU thread with 3 seeds.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.card import ModelCard
from edgekit.models.wlks.gnn import train_gnn
from edgekit.models.wlks.method import KERNELS, fit_wlks
from edgekit.models.wlks.svm import DEPTHS
from edgekit.models.wlks.tasks import TASKS, make_task
from edgekit.study import save_figure, write_study

METHODS = (*KERNELS, "gin", "majority")
SEEDS = (0, 1, 2, 3, 4)


def _depth_curve(grid: list[dict[str, Any]]) -> list[float]:
    """Best validation micro-F1 at each WL depth (over cost and weights)."""
    return [max(g["val_f1"] for g in grid if g["depth"] == d) for d in DEPTHS]


def run_study(
    seeds: tuple[int, ...] = SEEDS,
    count: int = 240,
    n: int = 500,
    epochs: int = 100,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Every task x seed: WLKS k0 / kD / combined and the GIN; returns the report."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    runs = []
    with step_progress("wlks study", len(TASKS) * len(seeds), show_progress) as step:
        for name in TASKS:
            for seed in seeds:
                step(f"{name} seed {seed}")
                task = make_task(name, count, n, seed)
                for kernel in KERNELS:
                    r = fit_wlks(task, kernel)
                    runs.append(
                        {
                            "task": name,
                            "seed": seed,
                            "method": kernel,
                            "test_f1": r.choice.test_f1,
                            "val_f1": r.choice.val_f1,
                            "seconds": r.seconds,
                            "depth": r.choice.depth,
                            "weights": list(r.choice.weights),
                            "cost": r.choice.cost,
                            "depth_curve": _depth_curve(r.choice.grid),
                        }
                    )
                g = train_gnn(task, epochs, seed=seed)
                runs.append(
                    {
                        "task": name,
                        "seed": seed,
                        "method": "gin",
                        "test_f1": g.test_f1,
                        "val_f1": g.val_f1,
                        "seconds": g.seconds,
                        "best_epoch": g.best_epoch,
                    }
                )
                common = np.bincount(task.labels[task.train]).argmax()
                runs.append(
                    {
                        "task": name,
                        "seed": seed,
                        "method": "majority",
                        "test_f1": float((task.labels[task.test] == common).mean()),
                        "seconds": 0.0,
                    }
                )
    summary = {}
    for name in TASKS:
        for method in METHODS:
            rows = [r for r in runs if r["task"] == name and r["method"] == method]
            f1 = [r["test_f1"] for r in rows]
            summary[f"{name}/{method}"] = {
                "test_f1_mean": statistics.fmean(f1),
                "test_f1_std": statistics.pstdev(f1),
                "test_f1_se": statistics.stdev(f1) / math.sqrt(len(f1)) if len(f1) > 1 else 0.0,
                "seconds_mean": statistics.fmean(r["seconds"] for r in rows),
            }
    config = {
        "seeds": list(seeds),
        "count": count,
        "n": n,
        "epochs": epochs,
        "depths": list(DEPTHS),
    }
    return {"config": config, "runs": runs, "summary": summary}


def print_table(report: dict[str, Any]) -> None:
    """Test micro-F1 (mean +- standard error over seeds) and seconds per task and method."""
    from rich.table import Table

    from edgekit.console import wide_console

    cfg = report["config"]
    table = Table(
        title=f"WLKS vs GIN: test micro-F1, mean +- SE over seeds {cfg['seeds']} "
        "(seconds to train); majority = the most common training label"
    )
    table.add_column("task")
    for method in METHODS:
        table.add_column(method, justify="right")
    for name in TASKS:
        cells = []
        for method in METHODS:
            s = report["summary"][f"{name}/{method}"]
            cells.append(
                f"{s['test_f1_mean']:.3f} +- {s['test_f1_se']:.3f} ({s['seconds_mean']:.2f}s)"
            )
        table.add_row(name, *cells)
    wide_console().print(table)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Bars of test micro-F1 per task and method; validation F1 vs WL depth; training seconds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    fig, (bars, depth, time_ax) = plt.subplots(1, 3, figsize=(16, 4.5))
    x = np.arange(len(TASKS))
    width = 0.8 / len(METHODS)
    for i, method in enumerate(METHODS):
        mean = [summary[f"{t}/{method}"]["test_f1_mean"] for t in TASKS]
        se = [summary[f"{t}/{method}"]["test_f1_se"] for t in TASKS]
        bars.bar(x + i * width, mean, width, yerr=se, label=method)
        time_ax.bar(
            x + i * width,
            [summary[f"{t}/{method}"]["seconds_mean"] for t in TASKS],
            width,
            label=method,
        )
    for ax in (bars, time_ax):
        ax.set_xticks(x + 0.4 - width / 2, TASKS)
        ax.legend(fontsize=8)
    bars.set(ylabel="test micro-F1", ylim=(0, 1), title="each kernel alone vs combined vs GIN")
    time_ax.set(ylabel="seconds (WLKS: WL + validation grid)", title="training time")
    for name in TASKS:
        curves = [
            r["depth_curve"]
            for r in report["runs"]
            if r["task"] == name and r["method"] == "combined"
        ]
        depth.plot(report["config"]["depths"], np.mean(curves, axis=0), marker="o", label=name)
    depth.set(
        xlabel="WL iterations", ylabel="validation micro-F1 (combined)", title="choosing WL depth"
    )
    depth.legend(fontsize=8)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, seeds: tuple[int, ...] = SEEDS
) -> dict[str, Any]:
    """Run the study, print its table, write ``report.json`` and ``wlks.png`` under ``out``."""
    return write_study(
        run_study(seeds, show_progress=show_progress), out, print_table, plot, "wlks.png"
    )


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval wlks`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return experiment(Path(out), show_progress)
