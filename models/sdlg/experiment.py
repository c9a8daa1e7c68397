"""``edgekit eval sdlg``: SDLG's knobs chosen on the tuning facts (tuning.py, cached), then the
full study on every evaluated fact (disjoint from the tuning ones, ``corpus.split_facts``), its
tables, roc.png and report.json; on the in-repo LM or on option lm's (local_lm.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.cache import atomic_write_text, cache_dir
from edgekit.models.sdlg.sdlg import SDLGConfig

BEAMS = (1, 2, 5)  # completion beam widths tried on the tuning facts (5: the paper's)

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.sdlg.card import SDLGCard


def plot_roc(records: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """ROC curves of the three scores for predicting incorrect answers (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from edgekit.models.sdlg.entropy import roc_curve
    from edgekit.models.sdlg.study import METHODS

    labels = [r["incorrect"] for r in records]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for method, title in METHODS.items():
        fpr, tpr = roc_curve([r[method] for r in records], labels)
        ax.plot(fpr, tpr, label=f"{title}: AUROC {summary[f'{method}_auroc']:.3f}")
    ax.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("false positive rate (correct answers flagged)")
    ax.set_ylabel("true positive rate (incorrect answers flagged)")
    ax.set_title(f"Predicting incorrect answers ({len(records)} questions)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def tuned(
    lm: Any,
    semantic: Any,
    facts: list,
    lm_key: str,
    show_progress: bool = True,
    vocab: Any = None,
) -> dict:
    """``tuning.tune_sdlg`` on the tuning ``facts``, cached under ``cache_dir("sdlg")`` by
    ``tuning.tuning_key`` (the LM's key, the grid, the facts, the threshold's key and the
    tuning recipe's version); ``vocab`` is the LM's (default: the in-repo LM's)."""
    from edgekit.models.sdlg.tuning import tune_sdlg, tuning_key
    from edgekit.progress import step_progress

    key = tuning_key(lm_key, SDLGConfig(), BEAMS, 10, facts)
    path = cache_dir("sdlg") / f"tuning-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    with step_progress("sdlg calibration", len(facts) * len(BEAMS), show_progress) as step:
        tuning = tune_sdlg(lm, semantic, facts, SDLGConfig(), BEAMS, 10, step, vocab)
    atomic_write_text(path, json.dumps(tuning, indent=1))
    return tuning


def print_tables(
    summary: dict[str, Any], calibration: dict[str, Any] | None, tuning: dict, equivalence: str
) -> None:
    """The study's tables; ``calibration`` is the cosine threshold's (None for an NLI model,
    ``equivalence`` naming it)."""
    from rich.table import Table

    from edgekit.console import wide_console
    from edgekit.models.sdlg.corpus import TIERS
    from edgekit.models.sdlg.study import METHODS, VARIANTS

    console = wide_console()
    chosen = tuning["chosen"]
    console.print(
        f"Chosen on the tuning facts ({tuning['questions']} questions, "
        f"{tuning['split']}): SDLG {chosen['alternatives']} alternatives, "
        f"{chosen['completion_beams']} completion beam(s), {chosen['length']} of token "
        f"log-probs (calibration AUROC {chosen['auroc']:.3f}, {chosen['rows_mean']:.1f} rows vs "
        f"sampling {tuning['sampling_rows_mean']:.1f}); baselines "
        + ", ".join(f"{m} {v}" for m, v in tuning["baseline_lengths"].items())
    )
    table = Table(
        title=f"SDLG vs baselines on {summary['questions']} evaluated questions "
        f"(answer accuracy {summary['accuracy']:.3f})"
    )
    for col in ("method", "AUROC (incorrect)", "LM forward passes / question"):
        table.add_column(col, justify="left" if col == "method" else "right")
    rows = {
        "sdlg": f"{summary['sdlg_rows_mean']:.1f} (+{summary['initial_rows_mean']:.1f} for the "
        "answer, shared)",
        "sampling_se": f"{summary['sampling_rows_mean']:.1f}",
        "predictive_entropy": f"{summary['sampling_rows_mean']:.1f} (the same samples)",
    }

    def interval(key: str) -> str:  # the 95 % bootstrap interval over questions, when measured
        low, high = summary.get(f"{key}_ci_low"), summary.get(f"{key}_ci_high")
        return "" if low is None else f" [{low:.3f}, {high:.3f}]"

    for method, title in METHODS.items():
        cell = f"{summary[f'{method}_auroc']:.3f}{interval(f'{method}_auroc')}"
        table.add_row(title, cell, rows[method])
    for variant, title in VARIANTS.items():
        table.add_row(
            f"  ablation: {title}",
            f"{summary[f'{variant}_auroc']:.3f}",
            rows[variant.rsplit("_", 1)[0]],
        )
    console.print(table)
    for base in ("sampling_se", "predictive_entropy"):
        key = f"sdlg_minus_{base}_auroc"
        if f"{key}_ci_low" in summary:
            gain = summary["sdlg_auroc"] - summary[f"{base}_auroc"]
            console.print(
                f"SDLG - {METHODS[base]}: {gain:+.3f}, 95 % paired bootstrap interval over "
                f"questions [{summary[f'{key}_ci_low']:+.3f}, {summary[f'{key}_ci_high']:+.3f}]"
            )
    tiers = Table(title="By how often the fact was seen in training (16 / 4 / 1 / 0 times)")
    for col in ("", *TIERS):
        tiers.add_column(col, justify="right")
    present = [t for t in TIERS if f"tier_{t}" in summary]
    tiers.add_row("accuracy", *[f"{summary[f'accuracy_{t}']:.3f}" for t in present])
    tiers.add_row("incorrect answers", *[str(summary[f"tier_{t}"]["incorrect"]) for t in present])
    for method in METHODS:
        tiers.add_row(method, *[f"{summary[f'tier_{t}'][f'{method}_mean']:.2f}" for t in present])
    for method in METHODS:
        tiers.add_row(
            f"AUROC within tier: {method}",
            *[f"{summary[f'tier_{t}'][f'{method}_auroc']:.3f}" for t in present],
        )
    tiers.add_row(
        "SDLG alternative weight",
        *[f"{summary[f'tier_{t}']['sdlg_alternative_weight_mean']:.3f}" for t in present],
    )
    kinds = {
        "value": "value word",
        "question": "question word (name)",
        "template": "template word",
        "truncation": "EOS (truncation)",
    }
    for kind, title in kinds.items():
        tiers.add_row(
            f"substituted: {title}",
            *[f"{summary[f'tier_{t}']['substitutions'][kind]:.2f}" for t in present],
        )
    console.print(tiers)
    judged = (
        f"{equivalence}, no threshold"
        if calibration is None
        else f"MiniLM cosine threshold {calibration['threshold']:.3f} (balanced accuracy "
        f"{calibration['balanced_accuracy']:.3f} on {calibration['pairs']} template pairs)"
    )
    console.print(
        f"{judged}; SDLG alternatives per question {summary['sdlg_alternatives_mean']:.2f}"
    )


def run_experiment(card: SDLGCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """Train/load the LM (or load option lm's), choose SDLG's knobs on the tuning facts
    (tuning.py), run the study on every evaluated fact (the rest of the corpus) through torch,
    print the tables, write roc.png and report.json under ``out``; returns the report."""
    import torch

    from edgekit.models.sdlg.card import report_json
    from edgekit.models.sdlg.corpus import build_facts, split_facts
    from edgekit.models.sdlg.lm import train_cached
    from edgekit.models.sdlg.study import run_study
    from edgekit.models.sdlg.tuning import EVALUATION_PARAPHRASE, config_from_tuning
    from edgekit.models.tinylm.causal import CausalLM, torch_backend
    from edgekit.progress import step_progress

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config, local = card.lm_config(), card.local_lm()
        if local is None:
            model, train_log = train_cached(config)
            lm_facts = {"config": train_log.get("config"), "train": train_log}
        else:
            model = local.module
            lm_facts = {
                "folder": str(local.folder),
                "fingerprint": local.fingerprint,
                "prompt": local.vocab.prompt,
                "stop": local.vocab.stop,
                "max_len": local.max_len,
                "vocab_size": local.vocab_size,
            }
        semantic, vocab = card.semantic(), card.vocabulary()
        tuning_facts, facts = split_facts(build_facts(config.people, config.seed))
        lm = CausalLM(torch_backend(model), card.max_len())
        start = time.perf_counter()
        tuning = tuned(lm, semantic, tuning_facts, card.lm_key(), show_progress, vocab)
        with step_progress("sdlg study", len(facts), show_progress) as step:
            study = run_study(
                lm,
                semantic,
                facts,
                config_from_tuning(tuning),
                progress=step,
                baseline_lengths=tuning["baseline_lengths"],
                paraphrase=EVALUATION_PARAPHRASE,
                vocab=vocab,
            )
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    summary = study["summary"]
    calibration = getattr(semantic, "calibration", None)
    nli = card.model_options().nli
    equivalence = f"NLI model {nli}" if nli else "all-MiniLM-L6-v2 cosine"
    print_tables(summary, calibration, tuning, equivalence)
    out.mkdir(parents=True, exist_ok=True)
    plot_roc(study["records"], summary, out / "roc.png")
    report = {
        "model": card.name,
        "summary": summary,
        "sdlg_config": study["config"],
        "score_lengths": study["lengths"],
        "tuning": tuning,
        "split": {
            "tuning_facts": len(tuning_facts),
            "evaluated_facts": len(facts),
            "disjoint": not set(tuning_facts) & set(facts),
        },
        "lm": lm_facts,
        "equivalence": {"model": equivalence, **(calibration or {})},
        "study_seconds": seconds,
        "records": study["records"],
        "plots": ["roc.png"],
    }
    atomic_write_text(out / "report.json", report_json(report))
    return report


def run(card: SDLGCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval sdlg`` (``edgekit.study.Study``), with the card's config."""
    return run_experiment(card, Path(out), show_progress)
