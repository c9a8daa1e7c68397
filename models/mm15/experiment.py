"""MM1.5 study in miniature: each skill appears only with its data, and small text needs splitting.

1. Data-mixture ablation: the default recipe (pre-train on captions -> continual pre-train on
   OCR-rich images -> SFT on the mixture) against the same recipe with one category removed
   from every stage (``Recipe.without``). Every model is scored on every skill.
2. Image splitting: the full recipe with the overview alone (no sub-image grid) against the
   overview + grid model, on the same data.

Every variant is trained for ``SEEDS`` seeds (``MM15Config.seed`` = seed, seed + 1, ...: the
training stream and the initial weights) and scored on held-out examples drawn per seed. The
study reports per skill the mean ± SE over seeds, the best constant answer of each skill as the
chance baseline, and every variant's paired difference against the full recipe (mean ± SE,
seeds won; ``edgekit.numeric.seed_summary``). Stages are cached per prefix (train.py), so the
pre-training shared by several ablations of one seed is trained once. Scores are exact-match
accuracy ("ground": IoU >= 0.5). Cost, cold, one thread: 2-8 minutes per variant and seed
(the full recipe's pre-training is shared with its ablations), so the whole study (6 variants x 5
seeds) is two to three hours; ``run_study(variants=HEADLINE, seeds=...)`` runs the full recipe, no
splitting and the count / refer removals only.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mm15.coords import box_iou, denormalise_box, normalise_box
from edgekit.models.mm15.evaluate import score, skill_scores
from edgekit.models.mm15.graphs import mm15_graphs
from edgekit.models.mm15.mixture import DEFAULT_RECIPE, Recipe
from edgekit.models.mm15.tasks import CATEGORIES, MAX_COUNT, SHAPES, Example
from edgekit.models.mm15.train import MM15Config, train_recipe
from edgekit.numeric import format_mean_se, mean_se, seed_summary
from edgekit.runtimes.torch import eager_runners
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.mm15.card import MM15Card

ABLATIONS = ("ocr", "count", "refer", "ground")
COLUMNS = ("caption", "ocr", "ocr_char", "count", "refer", "ground")
TEST_EXAMPLES = 100
SEEDS = 5
FULL = "full recipe"
NO_SPLIT = "no splitting (overview only)"
CHANCE = "constant answer (chance)"
# the variants behind the headline claims (with the full recipe): the cheaper study
HEADLINE = (NO_SPLIT, "without count", "without refer")
DIFF_KEYS = ("diff", "diff_se", "wins", "shown")


def study_variants(config: MM15Config, recipe: Recipe) -> dict[str, tuple[MM15Config, Recipe]]:
    """Every variant of the study: name -> (config, recipe), the full recipe first."""
    out = {FULL: (config, recipe), NO_SPLIT: (replace(config, split=False), recipe)}
    for category in ABLATIONS:
        out[f"without {category}"] = (config, recipe.without(category))
    return out


def constant_answer_chance(examples: list[Example], size: int, bins: int) -> float:
    """Score of the best single answer given to every example (the best of the answers that
    occur; "ground": a constant box scored by IoU >= 0.5): a blind guesser's upper bound."""
    answers = sorted({e.answer for e in examples})
    if not answers:
        return float("nan")
    if examples[0].category != "ground":
        return max(sum(e.answer == a for e in examples) for a in answers) / len(examples)
    return max(float(score(examples, [a] * len(examples), size, bins).mean()) for a in answers)


def constant_char_chance(truths: list[str]) -> float:
    """Per-character reading accuracy of the best constant string: the most common character
    at each position (``evaluate.char_accuracy`` of that string against ``truths``)."""
    total = sum(len(t) for t in truths)
    hits = 0
    for i in range(max((len(t) for t in truths), default=0)):
        chars = [t[i] for t in truths if len(t) > i]
        hits += max(chars.count(c) for c in set(chars))
    return hits / max(1, total)


def chance_levels(test: dict[str, list[Example]], size: int, bins: int) -> dict[str, float]:
    """Constant-answer chance per skill (``COLUMNS``) and the grounding ceiling of the bins.

    count / refer: about 1 / MAX_COUNT and 1 / len(SHAPES) in expectation (``expected_*``);
    ground_ceiling: fraction of true boxes that still reach IoU >= 0.5 after rounding to
    ``bins`` bins (a perfect model's score).
    """
    out = {c: constant_answer_chance(test[c], size, bins) for c in CATEGORIES}
    out["ocr_char"] = constant_char_chance([e.answer for e in test["ocr"]])
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


def _test_set(config: MM15Config, test_seed: int, examples: int) -> dict[str, list[Example]]:
    return {c: config.examples(c, examples, test_seed) for c in CATEGORIES}


def _score(
    config: MM15Config, recipe: Recipe, test_seed: int, examples: int = TEST_EXAMPLES
) -> dict[str, Any]:
    trained = train_recipe(config, recipe)
    test = _test_set(config, test_seed, examples)
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


def summarise(
    per_seed: dict[str, list[dict[str, Any]]], chance: list[dict[str, float]]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Rows per variant over seeds: ``metrics`` / ``se`` per skill (mean ± SE over seeds),
    ``diff`` per skill (paired against the full recipe; None for the full recipe), summed
    training seconds; and the chance row (mean ± SE over the seeds' test sets)."""
    full = per_seed[FULL]
    rows: dict[str, dict[str, Any]] = {}
    for name, runs in per_seed.items():
        values = {c: [r["metrics"][c] for r in runs] for c in COLUMNS}
        summary = {
            c: seed_summary(
                values[c], against=None if name == FULL else [r["metrics"][c] for r in full]
            )
            for c in COLUMNS
        }
        rows[name] = {
            "metrics": {c: summary[c]["mean"] for c in COLUMNS},
            "se": {c: summary[c]["se"] for c in COLUMNS},
            "seed_metrics": values,
            "diff": None
            if name == FULL
            else {c: {k: summary[c][k] for k in DIFF_KEYS} for c in COLUMNS},
            "train_seconds": float(sum(r["train_seconds"] for r in runs)),
            "cached": all(r["cached"] for r in runs),
            "stages": runs[0]["stages"],
            "stage_loss": [r["stage_loss"] for r in runs],
            "examples": runs[0]["examples"],
        }
    keys = [*COLUMNS, "ground_ceiling"]
    spread = {k: mean_se([c[k] for c in chance]) for k in keys}
    chance_row = {k: spread[k][0] for k in keys} | {
        "se": {k: spread[k][1] for k in keys},
        "per_seed": chance,
        "expected_count": chance[0]["expected_count"],
        "expected_refer": chance[0]["expected_refer"],
    }
    return rows, chance_row


def run_study(
    config: MM15Config | None = None,
    recipe: Recipe | None = None,
    show_progress: bool = True,
    workers: int = 1,
    seeds: int = SEEDS,
    variants: tuple[str, ...] | None = None,
    test_examples: int = TEST_EXAMPLES,
) -> dict[str, Any]:
    """Train (or load) each of ``variants`` (names of ``study_variants``, default all; the full
    recipe always) for ``seeds`` seeds (``config.seed`` and the next ones), ``workers``
    processes at a time, then score each on ``test_examples`` held-out examples per skill
    drawn per seed, and summarise over seeds."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or MM15Config()
    recipe = recipe or DEFAULT_RECIPE
    every = study_variants(config, recipe)
    chosen = list(every) if variants is None else [FULL, *(v for v in variants if v != FULL)]
    unknown = sorted(set(chosen) - set(every))
    if unknown or seeds < 1:
        raise InputError(
            f"the mm15 study needs seeds >= 1 (got {seeds}) and variants among {list(every)}"
            + (f", got {unknown}" if unknown else "")
        )
    seed_values = [config.seed + i for i in range(seeds)]
    # seed-major: the full recipe of a seed trains first, so its ablations find the shared
    # stages cached (with one worker; parallel workers may train a shared stage twice)
    jobs_spec = [
        (name, seed, replace(every[name][0], seed=seed), every[name][1])
        for seed in seed_values
        for name in chosen
    ]
    per_seed: dict[str, list[dict[str, Any]]] = {name: [] for name in chosen}
    chance: list[dict[str, float]] = []
    started = time.perf_counter()
    with step_progress("mm15 study", 2 * len(jobs_spec), show_progress) as step:
        if workers <= 1:
            for name, seed, cfg, rec in jobs_spec:
                step(f"train: {name}, seed {seed}")
                _train_variant(asdict(cfg), rec.to_dict())
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                jobs = {
                    pool.submit(_train_variant, asdict(cfg), rec.to_dict()): (name, seed)
                    for name, seed, cfg, rec in jobs_spec
                }
                for job in as_completed(jobs):
                    job.result()
                    step(f"trained: {jobs[job][0]}, seed {jobs[job][1]}")
        for name, seed, cfg, rec in jobs_spec:
            step(f"score: {name}, seed {seed}")
            per_seed[name].append(_score(cfg, rec, seed, test_examples))
    for seed in seed_values:
        chance.append(
            chance_levels(_test_set(config, seed, test_examples), config.size, config.bins)
        )
    rows, chance_row = summarise(per_seed, chance)
    return {
        "config": asdict(config),
        "recipe": recipe.to_dict(),
        "seeds": seed_values,
        "test_examples_per_skill": test_examples,
        "chance": chance_row,
        "tiles": {"split": config.tiles(), "overview only": replace(config, split=False).tiles()},
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    chance = report["chance"]
    seeds = report["seeds"]
    n = len(seeds)
    console = wide_console()
    table = Table(
        title=(
            f"MM1.5 recipe, tiny VLM: accuracy per skill on {report['test_examples_per_skill']} "
            f"held-out examples each per seed, {n} seeds ({seeds[0]}..{seeds[-1]}), mean ± SE "
            f"over seeds (ground = IoU >= 0.5; ground ceiling after binning "
            f"{chance['ground_ceiling']:.2f})"
        )
    )
    table.add_column("model", justify="left")
    for col in COLUMNS:
        table.add_column(col.replace("_", " "), justify="right")
    table.add_column("train s, all seeds", justify="right")
    table.add_row(
        CHANCE, *(format_mean_se(chance[c], chance["se"][c], digits=2) for c in COLUMNS), ""
    )
    for name, row in report["rows"].items():
        dropped = name.removeprefix("without ") if name.startswith("without ") else None
        cells = []
        for c in COLUMNS:
            text = format_mean_se(row["metrics"][c], row["se"][c], digits=2)
            cells.append(f"[bold red]{text}[/]" if c.split("_")[0] == dropped else text)
        table.add_row(name, *cells, f"{row['train_seconds']:.0f}")
    console.print(table)
    diffs = Table(title=f"variant - full recipe per skill, paired over the {n} seeds (won)")
    diffs.add_column("model", justify="left")
    for col in COLUMNS:
        diffs.add_column(col.replace("_", " "), justify="right")
    for name, row in report["rows"].items():
        if row["diff"] is None:
            continue
        cells = []
        for c in COLUMNS:
            d = row["diff"][c]
            mark = " *" if d["shown"] else ""
            cells.append(
                f"{format_mean_se(d['diff'], d['diff_se'], '+', 2)} ({d['wins']}/{n}){mark}"
            )
        diffs.add_row(name, *cells)
    console.print(diffs)
    console.print(
        "chance: the best constant answer on each seed's test set; differences: mean ± SE of the "
        "per-seed difference, seeds where the variant is higher; * where |difference| > 2 SE"
    )


def plot(report: dict[str, Any], path: Path) -> Path:
    """Heat map of the ablation (model x skill, mean over seeds) and the splitting bars (± SE)."""
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
    ax_h.set_title(f"skill accuracy per training mixture ({len(report['seeds'])} seeds)")
    fig.colorbar(im, ax=ax_h, fraction=0.03)
    x = np.arange(len(COLUMNS))
    for offset, name, label in (
        (-0.2, FULL, "overview + sub-image grid"),
        (0.2, NO_SPLIT, "overview only"),
    ):
        if name in rows:
            row = rows[name]
            ax_b.bar(
                x + offset,
                [row["metrics"][c] for c in COLUMNS],
                0.4,
                yerr=[np.nan_to_num(row["se"][c]) for c in COLUMNS],
                label=label,
            )
    ax_b.plot(x, [report["chance"][c] for c in COLUMNS], "k_", ms=18, label="constant answer")
    ax_b.set_xticks(x, COLUMNS, fontsize=8)
    ax_b.set(ylim=(0, 1), title="image splitting (same recipe)")
    ax_b.legend(fontsize=8)
    return save_figure(fig, path)


def experiment(
    out: Path,
    show_progress: bool = True,
    config: MM15Config | None = None,
    recipe: Recipe | None = None,
    **study: Any,
) -> dict[str, Any]:
    """Run the study (``study``: further ``run_study`` arguments), print its tables, write
    ``report.json`` and ``mm15.png`` under ``out``."""
    report = run_study(config, recipe, show_progress=show_progress, **study)
    return write_study(report, out, print_table, plot, "mm15.png")


def study_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """``run_study`` arguments from the card's options ``seeds`` (>= 1, default ``SEEDS``) and
    ``variants`` (``all``, default, or ``headline``: the full recipe and ``HEADLINE``)."""
    from edgekit.errors import InputError

    choice = str(options.get("variants", "all"))
    if choice not in ("all", "headline"):
        raise InputError(f"mm15: option variants={choice!r}; expected 'all' or 'headline'")
    try:
        seeds = int(options.get("seeds", SEEDS))
    except (TypeError, ValueError):
        seeds = 0
    if seeds < 1:
        raise InputError(f"mm15: option seeds={options.get('seeds')!r}; expected an integer >= 1")
    return {"seeds": seeds, "variants": HEADLINE if choice == "headline" else None}


def run(card: MM15Card, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval mm15 [--option seeds=N] [--option variants=headline]``
    (``edgekit.study.Study``), with the card's config and recipe."""
    arguments = study_arguments(card.options)
    return experiment(Path(out), show_progress, card.config, card.recipe, **arguments)
