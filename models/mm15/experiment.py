"""MM1.5 study in miniature: each skill appears only with its data, and small text needs splitting.

1. Data-mixture ablation: the default recipe (pre-train on captions -> continual pre-train on
   OCR-rich images -> SFT on the mixture) against the same recipe with one category removed
   from every stage (``Recipe.without``). Every model is scored on every skill.
2. Image splitting: the full recipe with the overview alone (no sub-image grid) against the
   overview + grid model, on the same data.

Stages are cached per prefix (train.py), so the pre-training shared by several ablations is
trained once. Scores are exact-match accuracy ("ground": IoU >= 0.5).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.mm15.coords import box_iou, denormalise_box, normalise_box
from edgekit.models.mm15.evaluate import skill_scores
from edgekit.models.mm15.graphs import mm15_graphs
from edgekit.models.mm15.mixture import DEFAULT_RECIPE, Recipe
from edgekit.models.mm15.tasks import CATEGORIES, MAX_COUNT, SHAPES, Example
from edgekit.models.mm15.train import MM15Config, train_recipe
from edgekit.runtimes.torch import eager_runners
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.mm15.card import MM15Card

ABLATIONS = ("ocr", "count", "refer", "ground")
COLUMNS = ("caption", "ocr", "ocr_char", "count", "refer", "ground")
TEST_EXAMPLES = 100


def chance_levels(test: dict[str, list[Example]], size: int, bins: int) -> dict[str, float]:
    """Accuracy of a blind guesser per skill and the grounding ceiling of the coordinate bins.

    count / refer: the best constant answer's accuracy (1 / MAX_COUNT, 1 / len(SHAPES) in
    expectation); ground_ceiling: fraction of true boxes that still reach IoU >= 0.5 after
    rounding to ``bins`` bins (a perfect model's score).
    """
    out = {}
    for category in ("count", "refer"):
        answers = [e.answer for e in test[category]]
        out[category] = max(answers.count(a) for a in set(answers)) / len(answers)
    ceiling = [
        box_iou(
            denormalise_box(normalise_box(e.target["box"], (size, size), bins), (size, size), bins),
            np.asarray(e.target["box"], np.float64),
        )
        >= 0.5
        for e in test["ground"]
    ]
    out["ground_ceiling"] = float(np.mean(ceiling))
    out["expected_count"] = 1 / MAX_COUNT
    out["expected_refer"] = 1 / len(SHAPES)
    return out


def _score(config: MM15Config, recipe: Recipe, test_seed: int) -> dict[str, Any]:
    trained = train_recipe(config, recipe)
    test = {c: config.examples(c, TEST_EXAMPLES, test_seed) for c in CATEGORIES}
    ex = test["ocr"][:2]
    runners = eager_runners(
        mm15_graphs(trained.model, config.encode([e.image for e in ex]), "read")
    )
    metrics, decoded = skill_scores(runners, test, config.encode, config.size, config.bins)
    return {
        "metrics": metrics,
        "train_seconds": float(sum(trained.stage_seconds.values())),
        "stages": [s.name for s in recipe.stages],
        "stage_loss": trained.stage_loss,
        "cached": all(trained.stage_cached.values()),
        "examples": {
            c: list(zip([e.answer for e in test[c][:3]], decoded[c][:3], strict=True))
            for c in CATEGORIES
        },
    }


def _train_variant(config: dict[str, Any], recipe: dict[str, Any]) -> float:
    """Worker: train (or load) one variant into the cache; returns its training seconds."""
    import torch

    torch.set_num_threads(1)
    trained = train_recipe(MM15Config(**config), Recipe.from_dict(recipe))
    return float(sum(trained.stage_seconds.values()))


def run_study(
    config: MM15Config | None = None,
    recipe: Recipe | None = None,
    show_progress: bool = True,
    workers: int = 2,
) -> dict[str, Any]:
    """Train (or load) every variant, ``workers`` processes at a time, then score each one."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or MM15Config()
    recipe = recipe or DEFAULT_RECIPE
    variants = {"full recipe": (config, recipe)}
    variants["no splitting (overview only)"] = (replace(config, split=False), recipe)
    for category in ABLATIONS:
        variants[f"without {category}"] = (config, recipe.without(category))
    rows: dict[str, Any] = {}
    started = time.perf_counter()
    with step_progress("mm15 study", 2 * len(variants), show_progress) as step:
        # variants run in this order, so ablations find the full recipe's shared stages cached
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max(1, workers), mp_context=context) as pool:
            jobs = {
                pool.submit(_train_variant, asdict(c), r.to_dict()): name
                for name, (c, r) in variants.items()
            }
            for job in as_completed(jobs):
                job.result()
                step(f"trained: {jobs[job]}")
        for name, (cfg, rec) in variants.items():
            step(f"score: {name}")
            rows[name] = _score(cfg, rec, test_seed=0)
    test = {c: config.examples(c, TEST_EXAMPLES, 0) for c in CATEGORIES}
    return {
        "config": asdict(config),
        "recipe": recipe.to_dict(),
        "test_examples_per_skill": TEST_EXAMPLES,
        "chance": chance_levels(test, config.size, config.bins),
        "tiles": {"split": config.tiles(), "overview only": replace(config, split=False).tiles()},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    chance = report["chance"]
    table = Table(
        title=(
            f"MM1.5 recipe, tiny VLM: accuracy per skill on {report['test_examples_per_skill']} "
            f"held-out examples each (ground = IoU >= 0.5; chance count {chance['count']:.2f}, "
            f"refer {chance['refer']:.2f}, ocr char 0.10; ground ceiling after binning "
            f"{chance['ground_ceiling']:.2f})"
        )
    )
    table.add_column("model", justify="left")
    for col in COLUMNS:
        table.add_column(col.replace("_", " "), justify="right")
    table.add_column("train s", justify="right")
    for name, row in report["rows"].items():
        dropped = name.removeprefix("without ") if name.startswith("without ") else None
        cells = []
        for c in COLUMNS:
            text = f"{row['metrics'][c]:.2f}"
            cells.append(f"[bold red]{text}[/]" if c.split("_")[0] == dropped else text)
        table.add_row(name, *cells, f"{row['train_seconds']:.0f}")
    wide_console().print(table)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Heat map of the ablation (model x skill) and the splitting bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    names = list(rows)
    grid = np.array([[rows[n]["metrics"][c] for c in COLUMNS] for n in names])
    fig, (ax_h, ax_b) = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    im = ax_h.imshow(grid, vmin=0, vmax=1, cmap="viridis")
    ax_h.set_xticks(range(len(COLUMNS)), COLUMNS)
    ax_h.set_yticks(range(len(names)), names)
    for i in range(len(names)):
        for j in range(len(COLUMNS)):
            ax_h.text(
                j,
                i,
                f"{grid[i, j]:.2f}",
                ha="center",
                va="center",
                color="w" if grid[i, j] < 0.5 else "k",
                fontsize=8,
            )
    ax_h.set_title("skill accuracy per training mixture")
    fig.colorbar(im, ax=ax_h, fraction=0.03)
    split, whole = rows["full recipe"]["metrics"], rows["no splitting (overview only)"]["metrics"]
    x = np.arange(len(COLUMNS))
    ax_b.bar(x - 0.2, [split[c] for c in COLUMNS], 0.4, label="overview + sub-image grid")
    ax_b.bar(x + 0.2, [whole[c] for c in COLUMNS], 0.4, label="overview only")
    ax_b.set_xticks(x, COLUMNS, fontsize=8)
    ax_b.set(ylim=(0, 1), title="image splitting (same recipe)")
    ax_b.legend(fontsize=8)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: MM15Config | None = None
) -> dict[str, Any]:
    """Run the study, print its table, write ``report.json`` and ``mm15.png`` under ``out``."""
    return write_study(
        run_study(config, show_progress=show_progress), out, print_table, plot, "mm15.png"
    )


def run(card: MM15Card, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval mm15`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
