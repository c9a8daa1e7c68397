"""The poisoning-unlearning study (``edgekit eval poison-audit``): does each unlearning method
remove Gaussian poisoning from a small MLP on digits? One thread, under a minute a seed.

Per seed: poison ``poison_count`` training digits with N(0, eps^2) noise (features in [0, 1]),
train the MLP, unlearn the poisoned rows with every method of ``methods.default_methods`` and
score each model; retraining on the retain set is the reference.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.card import ModelCard
from edgekit.models.poison_audit import audit, data, methods


@dataclass(frozen=True)
class StudyConfig:
    """Sizes of the study."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    poison_count: int = 200
    eps: float = 0.3
    train_epochs: int = 60


def run_study(config: StudyConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Audit every method on every seed; returns the report (per-seed rows and the summary)."""
    import torch

    from edgekit.progress import step_progress

    config = config or StudyConfig()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        with step_progress("poison audit", len(config.seeds), show_progress) as step:
            for seed in config.seeds:
                step(f"seed {seed}")
                train_data, test_data = data.digits(seed)
                train_config = methods.TrainConfig(epochs=config.train_epochs, seed=seed)
                report = audit.run_audit(
                    lambda d, c=train_config: methods.train_new(d, c),
                    methods.default_methods(config.train_epochs),
                    train_data, test_data, config.poison_count, config.eps, seed,
                )  # fmt: skip
                for result in [report.poisoned, *report.methods]:
                    rows.append({"seed": seed, **result.to_json()})
    finally:
        torch.set_num_threads(threads)
    return {
        "config": asdict(config),
        "null_band": audit.Z_REMOVED / math.sqrt(config.poison_count),
        "rows": rows,
        "summary": summarise(rows),
        "seconds": time.perf_counter() - started,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method (in first-seen order): mean score with its SE and spread over seeds, the
    paired difference from retraining on the same seeds (``vs_retrain``:
    ``edgekit.numeric.seed_summary``), mean z, mean test accuracy, mean seconds, and on how
    many seeds the poison counted as removed."""
    from edgekit.numeric import seed_summary

    names = list(dict.fromkeys(r["method"] for r in rows))
    reference = {r["seed"]: r["score"] for r in rows if r["method"] == "retrain"}
    out = []
    for name in names:
        mine = [r for r in rows if r["method"] == name]
        scores = [r["score"] for r in mine]
        paired = None
        if reference and name != "retrain":
            paired = seed_summary(scores, against=[reference[r["seed"]] for r in mine])
        out.append(
            {
                "method": name,
                "score": float(np.mean(scores)),
                "score_se": seed_summary(scores)["se"],
                "score_std": float(np.std(scores)),
                "vs_retrain": paired,
                "z": float(np.mean([r["z"] for r in mine])),
                "test_accuracy": float(np.mean([r["test_accuracy"] for r in mine])),
                "seconds": float(np.mean([r["seconds"] for r in mine])),
                "removed": f"{sum(r['removed'] for r in mine)}/{len(mine)}",
            }
        )
    return out


def print_report(report: dict[str, Any], console: Any) -> None:
    """The summary as a rich table."""
    from rich.table import Table

    from edgekit.numeric import format_diff, format_mean_se

    cfg = report["config"]
    table = Table(
        title=f"Gaussian unlearning score (mean z over {cfg['poison_count']} poisoned digits, "
        f"eps = {cfg['eps']}; null: 0 +- {report['null_band']:.3f}) over seeds {cfg['seeds']}"
    )
    columns = ("method", "score (mean ± SE)", "- retrain (paired)", "z", "test acc", "seconds",
               "poison removed")  # fmt: skip
    for col in columns:
        table.add_column(col, justify="right")
    for r in report["summary"]:
        table.add_row(
            r["method"], format_mean_se(r["score"], r["score_se"], "+"),
            format_diff(r["vs_retrain"]) if r["vs_retrain"] else "-", f"{r['z']:+.2f}",
            f"{r['test_accuracy']:.4f}", f"{r['seconds']:.2f}", r["removed"],
        )  # fmt: skip
    console.print(table)
    console.print(
        f"mean ± SE over the {len(cfg['seeds'])} seeds; paired: the method's score minus "
        "retraining's on the same seed, seeds where it is higher; * where |difference| > 2 SE"
    )


def plot_report(report: dict[str, Any], path: Path) -> None:
    """audit.png: score per method (bars, null band shaded) and test accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    names = [r["method"] for r in summary]
    pos = np.arange(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    colors = ["tab:red" if r["method"] == "poisoned" else "tab:blue" for r in summary]
    colors = ["tab:green" if n == "retrain" else c for n, c in zip(names, colors, strict=True)]
    ax1.bar(pos, [r["score"] for r in summary], yerr=[r["score_std"] for r in summary],
            color=colors)  # fmt: skip
    band = report["null_band"]
    ax1.axhspan(-band, band, color="grey", alpha=0.3, label="null (never saw the poison), 99 %")
    ax1.set_xticks(pos, names, rotation=35, ha="right", fontsize=8)
    ax1.set_ylabel("Gaussian unlearning score (mean z)")
    ax1.set_title("poison left after unlearning")
    ax1.legend(fontsize=8)
    ax2.bar(pos, [r["test_accuracy"] for r in summary], color=colors)
    low = min(r["test_accuracy"] for r in summary)
    ax2.set_ylim(max(0.0, low - 0.05), 1.0)
    ax2.set_xticks(pos, names, rotation=35, ha="right", fontsize=8)
    ax2.set_ylabel("test accuracy")
    ax2.set_title("utility")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_study(
    out: Path, show_progress: bool = True, config: StudyConfig | None = None
) -> dict[str, Any]:
    """Run, print, write report.json and audit.png under ``out``; returns the report."""
    from edgekit.cache import atomic_write_text
    from edgekit.console import wide_console

    report = run_study(config, show_progress)
    console = wide_console()
    print_report(report, console)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=float))
    plot_report(report, out / "audit.png")
    console.print(f"wrote {out / 'report.json'} and {out / 'audit.png'}")
    return report


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval poison-audit`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return write_study(Path(out), show_progress)
