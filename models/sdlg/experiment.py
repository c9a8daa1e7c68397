"""``edgekit eval sdlg``: the full study on every corpus question, its tables, roc.png and
report.json; and the calibrated MiniLM equivalence model the card and the study share."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.cache import atomic_write_text, cache_dir
from edgekit.models.sdlg.semantic import CosineEquivalence

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.sdlg.card import SDLGCard


def cosine_equivalence() -> CosineEquivalence:
    """MiniLM cosine equivalence at the threshold ``study.calibrate_threshold`` picks, cached
    under ``cache_dir("sdlg")`` by a hash of the corpus and study sources."""
    from edgekit.models.sdlg.study import calibrate_threshold

    digest = hashlib.sha256()
    for name in ("corpus.py", "study.py", "semantic.py"):
        digest.update(Path(__file__).with_name(name).read_bytes())
    path = cache_dir("sdlg") / f"threshold-{digest.hexdigest()[:16]}.json"
    if path.exists():
        calibration = json.loads(path.read_text())
        semantic = CosineEquivalence(calibration["threshold"])
    else:
        semantic = CosineEquivalence(1.0)
        calibration = calibrate_threshold(semantic)
        semantic.threshold = calibration["threshold"]
        atomic_write_text(path, json.dumps(calibration, indent=1))
    semantic.calibration = calibration  # type: ignore[attr-defined]
    return semantic


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


def print_tables(summary: dict[str, Any], calibration: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console
    from edgekit.models.sdlg.corpus import TIERS
    from edgekit.models.sdlg.study import METHODS, NORMALISED

    console = wide_console()
    table = Table(
        title=f"SDLG vs baselines on {summary['questions']} questions "
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
    for method, title in METHODS.items():
        table.add_row(title, f"{summary[f'{method}_auroc']:.3f}", rows[method])
    for method, title in NORMALISED.items():
        table.add_row(title, f"{summary[f'{method}_auroc']:.3f}", rows[method[:-3]])
    console.print(table)
    tiers = Table(title="Answer accuracy by how often the fact was seen in training")
    for tier in TIERS:
        tiers.add_column(tier, justify="right")
    tiers.add_row(*[f"{summary.get(f'accuracy_{t}', float('nan')):.3f}" for t in TIERS])
    console.print(tiers)
    console.print(
        f"MiniLM cosine threshold {calibration['threshold']:.3f} (balanced accuracy "
        f"{calibration['balanced_accuracy']:.3f} on {calibration['pairs']} template pairs); "
        f"SDLG alternatives per question {summary['sdlg_alternatives_mean']:.2f}"
    )


def run_experiment(card: SDLGCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """Train/load the LM, run the study on every corpus question through torch, print the
    tables, write roc.png and report.json under ``out``; returns the report."""
    import torch

    from edgekit.models.sdlg.card import report_json
    from edgekit.models.sdlg.causal_lm import CausalLM, torch_backend
    from edgekit.models.sdlg.corpus import build_facts
    from edgekit.models.sdlg.lm import train_cached
    from edgekit.models.sdlg.study import run_study
    from edgekit.progress import step_progress

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = card.lm_config()
        model, train_log = train_cached(config)
        semantic = card.semantic()
        facts = build_facts(config.people, config.seed)
        lm = CausalLM(torch_backend(model), config.max_len)
        start = time.perf_counter()
        with step_progress("sdlg study", len(facts), show_progress) as step:
            study = run_study(lm, semantic, facts, progress=step)
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    summary = study["summary"]
    print_tables(summary, semantic.calibration)
    out.mkdir(parents=True, exist_ok=True)
    plot_roc(study["records"], summary, out / "roc.png")
    report = {
        "model": card.name,
        "summary": summary,
        "sdlg_config": study["config"],
        "lm": {"config": train_log.get("config"), "train": train_log},
        "equivalence": {"model": "all-MiniLM-L6-v2 cosine", **semantic.calibration},
        "study_seconds": seconds,
        "records": study["records"],
        "plots": ["roc.png"],
    }
    atomic_write_text(out / "report.json", report_json(report))
    return report
