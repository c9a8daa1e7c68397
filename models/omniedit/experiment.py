"""OmniEdit study on procedural scenes: does judge-curated data and EditNet make a better editor?

Specialists (one per task, failing at ``failure_rate``) edit ``train_count`` scenes; the judge
scores every pair (SC x PQ, with rating noise). Editors are trained on

- EditNet x curation: "none" (every pair), "filter" (O >= threshold), "importance" (p ~ exp(O));
- architecture x importance-sampled data: channel-concat, ControlNet-style, EditNet;

and scored on held-out true edits: per-task PSNR, overall MSE / PSNR and the judged success rate
(noise-free judge O >= 8), for five independent seeds. The trivial baseline is the identity edit
(the source returned unchanged). Every score is a mean ± SE over seeds; the comparisons the
study makes (curated - raw data, EditNet - concat, EditNet - ControlNet-style, ...) are paired
differences over seeds (``edgekit.numeric.seed_summary``), shown only where |difference| > 2 SE.
Editors are cached (``train.py``); the first run trains twenty-five.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.omniedit.datastats import curation_stats
from edgekit.models.omniedit.editors import parameter_count
from edgekit.models.omniedit.evaluate import evaluate_runner, score_edits
from edgekit.models.omniedit.graphs import editor_graph
from edgekit.models.omniedit.scenes import TASKS
from edgekit.models.omniedit.train import OmniEditConfig, train_editor, variant
from edgekit.numeric import format_mean_se, mean_se, seed_summary
from edgekit.runtimes.torch import eager_runners
from edgekit.study import save_figure

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.omniedit.card import OmniEditCard

RUNS = (
    ("editnet", "none"),
    ("editnet", "filter"),
    ("editnet", "importance"),
    ("concat", "importance"),
    ("controlnet", "importance"),
)
IDENTITY = "identity (no edit)"  # the trivial baseline: the source returned unchanged
GRID_PER_TASK = 2
SEEDS = (0, 1, 2, 3, 4)
# (name, row, baseline row): the paired differences over seeds the study reports
PAIRED = (
    ("curated (filter) - raw", "editnet / filter", "editnet / none"),
    ("curated (importance) - raw", "editnet / importance", "editnet / none"),
    ("filter - importance", "editnet / filter", "editnet / importance"),
    ("EditNet - concat", "editnet / importance", "concat / importance"),
    ("EditNet - ControlNet-style", "editnet / importance", "controlnet / importance"),
    ("raw - identity", "editnet / none", IDENTITY),
)


def _label(arch: str, curation: str) -> str:
    return f"{arch} / {curation}"


def _mean_rows(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """Average the metric dicts of several seeds, with the SE over seeds of every overall
    metric (``"psnr_se"``...); keeps each seed's PSNR, success and MSE."""
    first = per_seed[0]
    row: dict[str, Any] = {}
    for k in ("mse", "psnr", "success", "judge"):
        row[k], row[f"{k}_se"] = mean_se([r[k] for r in per_seed])
    row["per_task"] = {
        task: {
            k: float(np.mean([r["per_task"][task][k] for r in per_seed]))
            for k in first["per_task"][task]
        }
        for task in first["per_task"]
    }
    row["seeds"] = [
        {"seed": r["seed"], "psnr": r["psnr"], "success": r["success"], "mse": r["mse"]}
        for r in per_seed
    ]
    row["train_seconds"] = float(np.sum([r["train_seconds"] for r in per_seed]))
    for k in ("arch", "curation", "parameters"):
        row[k] = first[k]
    return row


def run_study(
    config: OmniEditConfig | None = None,
    show_progress: bool = True,
    seeds: tuple[int, ...] = SEEDS,
) -> dict[str, Any]:
    """Train (or load) the five editors per seed and score them, and the identity edit, on
    held-out edits; ``paired`` holds the differences of ``PAIRED`` over seeds.

    Each seed is an independent replicate: its own scenes, specialist failures, judge noise,
    initialisation, batches and held-out set (``config.seed`` is replaced by it)."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or OmniEditConfig()
    per_seed: dict[str, list[dict[str, Any]]] = {IDENTITY: []} | {_label(*r): [] for r in RUNS}
    data: list[dict[str, Any]] = []
    edits: dict[str, np.ndarray] = {}
    with step_progress("omniedit study", len(seeds) * (len(RUNS) + 1) + 1, show_progress) as step:
        for seed in seeds:
            seeded = replace(config, seed=seed)
            step(f"seed {seed}: specialists + judge")
            pairs, scores = seeded.training_pairs()
            data.append(
                curation_stats(
                    pairs,
                    scores,
                    ("none", "filter", "importance"),
                    config.threshold,
                    config.temperature,
                )
                | {"seed": seed}
            )
            test = seeded.test_edits()
            per_seed[IDENTITY].append(
                score_edits(test.source.copy(), test)
                | {
                    "seed": seed,
                    "arch": "identity",
                    "curation": "-",
                    "parameters": 0,
                    "train_seconds": 0.0,
                }
            )
            for arch, curation in RUNS:
                step(f"seed {seed}: train {arch} on {curation} data")
                trained = train_editor(variant(seeded, arch, curation))
                graph = editor_graph(trained.editor, test.source[:2], test.instruction[:2])
                metrics, edited = evaluate_runner(eager_runners([graph])[graph.name], test)
                label = _label(arch, curation)
                per_seed[label].append(
                    metrics
                    | {
                        "seed": seed,
                        "arch": arch,
                        "curation": curation,
                        "parameters": parameter_count(trained.editor),
                        "train_seconds": trained.seconds,
                    }
                )
                if seed == seeds[0]:
                    edits[label] = edited
            if seed == seeds[0]:
                grid_test = test
        step("edit grid")
    picks = [
        int(i)
        for t in range(len(TASKS))
        for i in np.flatnonzero(grid_test.task == t)[:GRID_PER_TASK]
    ]
    grid = {
        "seed": seeds[0],
        "instructions": [grid_test.instructions[i].text() for i in picks],
        "source": grid_test.source[picks].tolist(),
        "truth": grid_test.target[picks].tolist(),
        "edits": {label: e[picks].tolist() for label, e in edits.items()},
    }
    return {
        "config": asdict(config),
        "seeds": list(seeds),
        "test_edits": len(grid_test),
        "data": data,
        "rows": {label: _mean_rows(rows) for label, rows in per_seed.items()},
        "paired": {
            name: {
                metric: seed_summary(
                    [r[metric] for r in per_seed[row]], [r[metric] for r in per_seed[base]]
                )
                for metric in ("psnr", "success")
            }
            for name, row, base in PAIRED
        },
        "grid": grid,
    }


def print_tables(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    data = report["data"]
    console = wide_console()
    seeds = ", ".join(str(d["seed"]) for d in data)
    table = Table(
        title=f"training pairs per seed ({seeds}): {data[0]['pairs']} specialist edits, "
        f"{np.mean([d['failed_share'] for d in data]):.0%} failed; judge AUC good-vs-failed "
        + " / ".join(f"{d['judge_auc']:.3f}" for d in data)
    )
    for col in ("curation", "failed share of a batch", "effective pairs"):
        table.add_column(col, justify="left" if col == "curation" else "right")
    for name in data[0]["curations"]:
        failed = np.mean([d["curations"][name]["failed_share"] for d in data])
        pairs = np.mean([d["curations"][name]["effective_pairs"] for d in data])
        table.add_row(name, f"{failed:.3f}", f"{pairs:.0f}")
    console.print(table)
    table = Table(
        title=f"held-out edits ({report['test_edits']} per seed), seeds {seeds}: PSNR dB per task "
        "(mean over seeds, higher is better); overall PSNR and success (judged O >= 8) as "
        "mean ± SE over seeds"
    )
    cols = ("editor / data", *TASKS, "PSNR dB", "success", "params")
    for col in cols:
        table.add_column(col, justify="left" if col == cols[0] else "right")
    for label, r in report["rows"].items():
        table.add_row(
            label,
            *(f"{r['per_task'][t]['psnr']:.1f}" for t in TASKS),
            format_mean_se(r["psnr"], r["psnr_se"], digits=2),
            format_mean_se(r["success"], r["success_se"]),
            f"{r['parameters']:,}",
        )
    console.print(table)
    n = len(report["seeds"])
    table = Table(
        title=f"paired difference over the {n} seeds: mean ± SE (seeds where the first is "
        "higher); shown = |difference| > 2 SE"
    )
    for col in ("difference", "PSNR dB", "success", "shown"):
        table.add_column(col, justify="left" if col == "difference" else "right")
    for name, d in report["paired"].items():
        table.add_row(
            name,
            *(
                f"{format_mean_se(d[m]['diff'], d[m]['diff_se'], '+', digits)} ({d[m]['wins']}/{n})"
                for m, digits in (("psnr", 2), ("success", 3))
            ),
            ", ".join(m for m in ("PSNR", "success") if d[m.lower()]["shown"]) or "none",
        )
    console.print(table)


def plot_grid(report: dict[str, Any], path: Path) -> Path:
    """Rows: held-out edits (two per task); columns: source, true edit, every editor's edit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = report["grid"]
    columns = [("source", grid["source"]), ("true edit", grid["truth"])]
    columns += list(grid["edits"].items())
    rows = len(grid["instructions"])
    fig, axes = plt.subplots(rows, len(columns), figsize=(1.6 * len(columns), 1.7 * rows))
    for r in range(rows):
        for c, (name, images) in enumerate(columns):
            ax = axes[r, c]
            ax.imshow(
                np.clip(np.asarray(images[r]).transpose(1, 2, 0), 0, 1), interpolation="nearest"
            )
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(name.replace(" / ", "\n"), fontsize=7)
            if c == 0:
                ax.set_ylabel(
                    grid["instructions"][r], fontsize=6, rotation=0, ha="right", va="center"
                )
    return save_figure(fig, path)


def plot_metrics(report: dict[str, Any], path: Path) -> Path:
    """Per-task PSNR bars for every editor, and the success rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    labels = list(rows)
    fig, (ax_psnr, ax_ok) = plt.subplots(
        1, 2, figsize=(13, 4), gridspec_kw={"width_ratios": [3, 1]}
    )
    width = 0.8 / len(labels)
    x = np.arange(len(TASKS))
    for i, label in enumerate(labels):
        values = [rows[label]["per_task"][t]["psnr"] for t in TASKS]
        ax_psnr.bar(x + (i - (len(labels) - 1) / 2) * width, values, width, label=label)
    ax_psnr.set_xticks(x, TASKS)
    ax_psnr.set(ylabel="PSNR dB vs true edit", title="held-out PSNR per task (mean of seeds)")
    top = max(rows[label]["per_task"][t]["psnr"] for label in labels for t in TASKS)
    ax_psnr.set_ylim(0, 1.3 * top)
    ax_psnr.legend(fontsize=7, ncol=3, loc="upper left")
    ax_ok.barh(
        labels,
        [rows[label]["success"] for label in labels],
        xerr=[np.nan_to_num(rows[label]["success_se"]) for label in labels],
        color="tab:green",
    )
    for y, label in enumerate(labels):
        ax_ok.plot(
            [s["success"] for s in rows[label]["seeds"]], [y] * len(rows[label]["seeds"]), "k."
        )
    ax_ok.set(
        xlim=(0, 1),
        title="judged success (O >= 8)\nbars: mean ± SE, dots: seeds",
    )
    ax_ok.tick_params(labelsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: OmniEditConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json``, ``omniedit_grid.png`` and
    ``omniedit_metrics.png`` under ``out``."""
    from edgekit.cache import atomic_write_text

    report = run_study(config, show_progress)
    print_tables(report)
    out = Path(out)
    report["plots"] = [
        str(plot_grid(report, out / "omniedit_grid.png")),
        str(plot_metrics(report, out / "omniedit_metrics.png")),
    ]
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    return report


def run(card: OmniEditCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval omniedit`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
