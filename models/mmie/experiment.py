"""MMIE-Score study: how well do judges agree with held-out rubric labels?

Judges, all reading the same inputs (query, reference, interleaved answer) and all writing
"### Feedback ... ### Score: N", read back with the "### Score" parser:

- untuned rules: the rubric applied zero-shot to raw MiniLM cosines and an untrained image
  encoder's cosines, thresholds fixed a priori (``zeroshot.py``);
- calibrated rules: the same rules with two thresholds picked on training labels;
- fine-tuned MMIE-Score judge: image encoder + scoring head trained on the labelled items.

Reported on held-out items (unseen handwriting): exact and within-1 agreement, MAE, Pearson,
Spearman, per category; MMIE-Score per category from labels and from each judge; the paper's
regex vs the robust parser on tricky verdict texts. Beside them the trivial baseline (always the
most common training label, ``most_common``) and 95 % bootstrap intervals over the held-out
items of each judge's exact / within-1 agreement and of the fine-tuned judge minus each other
judge on the same items (``intervals``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.mmie.aggregate import aggregate
from edgekit.models.mmie.metrics import agreement_by_category
from edgekit.models.mmie.parser import paper_parse, parse_many, try_parse_score
from edgekit.models.mmie.rubrics import CATEGORIES
from edgekit.models.mmie.train import MMIEConfig, train_judge
from edgekit.numeric import bootstrap_interval
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.mmie.card import MMIEScoreCard

JUDGES = ("untuned rules", "calibrated rules", "fine-tuned judge")
SHORT = {"situational": "sit.", "project": "proj.", "reasoning": "reas."}
CALIBRATION_ITEMS = 900  # training items the rule thresholds are picked on

# Verdicts a free-form judge writes, with the score a reader should take from each.
TRICKY_VERDICTS: tuple[tuple[str, float | None], ...] = (
    ("### Feedback\nGood.\n### Score: 5", 5),
    ("### Feedback\nMostly right.\n### Score (0-6): 4", 4),
    ("End with '### Score: N'.\n### Feedback\nWeak.\n### Score: 2", 2),
    ("### Feedback\nFine.\n### Score\n**3**/6", 3),
    ("### Feedback\nStep 2 of 4 is wrong.\n### Score: 3", 3),
    ("### Feedback\nGood.\n### SCORE: six", 6),
    ("### Feedback\nOK.\n### Score: 4.5 out of 6", 4.5),
    ("### Feedback\nNo image matches.\nScore: 1", 1),
    ("### Feedback\nGreat.\n### Score: 9", None),
    ("### Feedback\nI cannot judge this.", None),
)


def _image_embeddings(batch_side: Any, seed: int = 1234) -> np.ndarray:
    """(B, S, 64) features of an untrained, seeded image encoder."""
    import torch

    from edgekit.models.mmie.scorer import ImageEncoder

    torch.manual_seed(seed)
    encoder = ImageEncoder().eval()
    b, s, h, w = batch_side.images.shape
    with torch.no_grad():
        out = encoder(torch.from_numpy(batch_side.images.reshape(b * s, 1, h, w)))
    return out.numpy().reshape(b, s, -1)


def parser_check() -> dict[str, Any]:
    """How many TRICKY_VERDICTS the paper's regex and the robust parser read correctly."""

    def right(value: float | None, expected: float | None) -> bool:
        return value == expected

    paper = [right(paper_parse(t), e) for t, e in TRICKY_VERDICTS]
    robust = [right(try_parse_score(t), e) for t, e in TRICKY_VERDICTS]
    return {
        "cases": len(TRICKY_VERDICTS),
        "paper_regex_correct": int(sum(paper)),
        "robust_parser_correct": int(sum(robust)),
        "paper_regex_reads": [paper_parse(t) for t, _ in TRICKY_VERDICTS],
    }


def agreement_intervals(
    scores_by_judge: dict[str, list[float | None]], labels: list[int], reference: str
) -> dict[str, Any]:
    """95 % bootstrap intervals over items of each judge's exact and within-1 agreement, and
    of ``reference`` minus each other judge on the same resampled items (an unparsed score
    counts as a miss, as in ``agreement_metrics``)."""
    gold = np.asarray(labels, np.float64)
    hits = {}
    for judge, scores in scores_by_judge.items():
        pred = np.array([np.nan if p is None else p for p in scores], np.float64)
        diff = np.abs(pred - gold)
        hits[judge] = {"exact": diff < 0.5, "within1": diff <= 1.0}  # NaN compares False
    n = len(gold)

    def interval(values: np.ndarray) -> list[float]:
        return list(bootstrap_interval(lambda i: float(values[i].mean()), n))

    out: dict[str, Any] = {j: {k: interval(v) for k, v in h.items()} for j, h in hits.items()}
    for judge in hits:
        if judge != reference:
            out[f"{reference} - {judge}"] = {
                k: interval(hits[reference][k].astype(float) - hits[judge][k])
                for k in ("exact", "within1")
            }
    return out


def run_study(config: MMIEConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Embed, train (or load) the judge, score the held-out items with every judge."""
    import torch

    from edgekit.models.mmie.graphs import judge_graphs
    from edgekit.models.mmie.judge import judge_texts, score_batch
    from edgekit.models.mmie.zeroshot import RuleThresholds, calibrate, rule_texts
    from edgekit.progress import step_progress
    from edgekit.runtimes.torch import eager_runners

    torch.set_num_threads(1)
    config = config or MMIEConfig()
    with step_progress("mmie-score study", 5, show_progress) as step:
        step("make labelled items, embed texts with MiniLM")
        batches, _ = config.batches()
        train, test = batches["train"], batches["test"]
        step("fine-tune the judge")
        trained = train_judge(config, batches=batches)
        step("rule judges (untuned, calibrated on training labels)")
        calib = train.take(np.arange(min(CALIBRATION_ITEMS, len(train))))
        thresholds = calibrate(
            calib, _image_embeddings(calib.reference), _image_embeddings(calib.answer)
        )
        ref_img, ans_img = _image_embeddings(test.reference), _image_embeddings(test.answer)
        texts = {
            "untuned rules": rule_texts(test, ref_img, ans_img, RuleThresholds()),
            "calibrated rules": rule_texts(test, ref_img, ans_img, thresholds),
        }
        step("fine-tuned judge on held-out items")
        runners = eager_runners(
            judge_graphs(trained.image_encoder, trained.head, test.take(np.arange(2)))
        )
        logits, coverage = score_batch(runners, test)
        texts["fine-tuned judge"] = judge_texts(logits, coverage)
        step("agreement and MMIE-Score aggregation")
        labels = test.label.tolist()
        categories = [CATEGORIES[c] for c in test.category]
        rows, scores_by_judge = {}, {}
        for judge in JUDGES:
            scores = parse_many(texts[judge])
            scores_by_judge[judge] = scores
            rows[judge] = agreement_by_category(scores, labels, categories)
            rows[judge]["mmie_score"] = aggregate(categories, scores)
        common = int(np.bincount(train.label).argmax())
        constant = [float(common)] * len(labels)
        most_common = agreement_by_category(constant, labels, categories)["overall"]
        intervals = agreement_intervals(
            {**scores_by_judge, "most common score": constant}, labels, "fine-tuned judge"
        )
        confusion = np.zeros((7, 7), np.int64)
        for gold, pred in zip(labels, scores_by_judge["fine-tuned judge"], strict=True):
            if pred is not None:
                confusion[gold, int(pred)] += 1
    return {
        "config": asdict(config),
        "test_items": len(test),
        "label_histogram": np.bincount(test.label, minlength=7).tolist(),
        "label_mmie_score": aggregate(categories, labels),
        "rows": rows,
        "most_common": {"score": common, **most_common},
        "intervals": intervals,
        "calibrated_thresholds": asdict(thresholds),
        "train_seconds": trained.seconds,
        "train_cached": trained.cached,
        "val_exact_curve": trained.val_exact,
        "best_epoch": trained.best_epoch,
        "confusion_fine_tuned": confusion.tolist(),
        "example_verdicts": {j: texts[j][:2] for j in JUDGES},
        "parser_check": parser_check(),
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    console = wide_console()
    table = Table(
        title=f"MMIE-Score judges vs rubric labels on {report['test_items']} held-out "
        "interleaved answers (scores 1-6, parsed from '### Score: N')"
    )
    cols = ["judge", "exact", "within 1", "MAE", "Pearson", "Spearman"]
    cols += [f"exact {SHORT[c]}" for c in CATEGORIES] + [f"rho {SHORT[c]}" for c in CATEGORIES]
    for col in cols:
        table.add_column(col, justify="left" if col == "judge" else "right")
    for judge in JUDGES:
        row = report["rows"][judge]
        o, per = row["overall"], row["per_category"]
        table.add_row(
            judge,
            f"{o['exact']:.3f}",
            f"{o['within1']:.3f}",
            f"{o['mae']:.3f}",
            f"{o['pearson']:.3f}",
            f"{o['spearman']:.3f}",
            *[f"{per[c]['exact']:.3f}" for c in CATEGORIES],
            *[f"{per[c]['spearman']:.3f}" for c in CATEGORIES],
        )
    console.print(table)
    if "most_common" in report:
        base, ci = report["most_common"], report["intervals"]
        console.print(
            f"trivial baseline, always score {base['score']} (the most common training label): "
            f"exact {base['exact']:.3f}, within 1 {base['within1']:.3f}"
        )
        for name, cells in ci.items():
            sign = "+" if " - " in name else ""  # a difference between two judges
            console.print(
                f"  95 % bootstrap over items, {name}: "
                + ", ".join(
                    f"{k} [{lo:{sign}.3f}, {hi:{sign}.3f}]" for k, (lo, hi) in cells.items()
                )
            )
    agg = Table(title="MMIE-Score (mean score as % of 6) per category: labels vs each judge")
    for col in ("scored by", *CATEGORIES, "overall"):
        agg.add_column(col, justify="left" if col == "scored by" else "right")
    sources = {"labels": report["label_mmie_score"]} | {
        j: report["rows"][j]["mmie_score"] for j in JUDGES
    }
    for name, result in sources.items():
        agg.add_row(
            name,
            *[f"{result['per_category'][c]['percent']:.1f}" for c in CATEGORIES],
            f"{result['overall']['percent']:.1f}",
        )
    console.print(agg)
    p = report["parser_check"]
    console.print(
        f"parser on {p['cases']} tricky verdicts: paper regex right on "
        f"{p['paper_regex_correct']}, robust parser right on {p['robust_parser_correct']}"
    )


def plot(report: dict[str, Any], path: Path) -> Path:
    """Per-category exact / within-1 bars per judge, the fine-tuned confusion matrix, and the
    validation curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_bar, ax_conf, ax_curve) = plt.subplots(1, 3, figsize=(17, 4.8))
    x = np.arange(len(CATEGORIES) + 1)
    width = 0.8 / len(JUDGES)
    for k, judge in enumerate(JUDGES):
        row = report["rows"][judge]
        exact = [row["per_category"][c]["exact"] for c in CATEGORIES] + [row["overall"]["exact"]]
        within = [row["per_category"][c]["within1"] for c in CATEGORIES]
        within.append(row["overall"]["within1"])
        bars = ax_bar.bar(x + (k - 1) * width, exact, width, label=f"{judge} exact")
        ax_bar.scatter(
            x + (k - 1) * width, within, marker="_", s=200, color=bars[0].get_facecolor()
        )
    ax_bar.set_xticks(x, [*CATEGORIES, "overall"])
    ax_bar.set(ylim=(0, 1.05), title="agreement with labels (bar: exact, tick: within 1)")
    ax_bar.legend(fontsize=7, loc="lower left")
    conf = np.asarray(report["confusion_fine_tuned"])[1:, 1:]
    ax_conf.imshow(conf, cmap="Blues")
    for i in range(conf.shape[0]):
        for j in range(conf.shape[1]):
            ax_conf.text(j, i, str(conf[i, j]), ha="center", va="center", fontsize=8)
    ticks = np.arange(conf.shape[0])
    ax_conf.set_xticks(ticks, ticks + 1)
    ax_conf.set_yticks(ticks, ticks + 1)
    ax_conf.set(xlabel="judge score", ylabel="label", title="fine-tuned judge: label vs score")
    curve = report["val_exact_curve"]
    ax_curve.plot(np.arange(1, len(curve) + 1), curve, marker="o")
    ax_curve.axhline(
        report["rows"]["untuned rules"]["overall"]["exact"],
        ls=":",
        color="gray",
        label="untuned rules (test)",
    )
    ax_curve.set(xlabel="epoch", ylabel="validation exact agreement", title="fine-tuning")
    ax_curve.legend(fontsize=8)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: MMIEConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json`` and ``mmie.png`` under ``out``."""
    return write_study(run_study(config, show_progress), out, print_table, plot, "mmie.png")


def run(card: MMIEScoreCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval mmie-score`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
