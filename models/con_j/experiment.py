"""``edgekit eval con-j``: verdict accuracy on held-out preference pairs of

- SFT judge: the QA-pretrained tiny LM fine-tuned on gold judgments of the seed pairs;
- Con-J: the SFT judge trained by DPO (+ SFT term) on its own contrastive judgments of every
  training pair (repeated + hint-driven sampling), against the frozen SFT judge;
- positives only: the SFT judge fine-tuned on the same chosen judgments without the rejected
  ones (ablation of the contrast);
- Bradley-Terry: a scalar reward head on MiniLM embeddings, trained on the same pairs.

Held-out sets: new pairs (unused wrong values) of the training facts, and pairs of facts no
judgment or label was trained on (their knowledge only comes from the LM's QA pre-training).
Prints the tables and two judgments, writes report.json and con-j.png under ``out``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.con_j.train import ConJConfig
from edgekit.study import save_figure

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.con_j.card import ConJCard

METHODS = {
    "sft": "SFT judge (seed gold judgments)",
    "conj": "Con-J (DPO on self-generated contrastive judgments)",
    "positives": "positives only (SFT on chosen judgments)",
    "bt": "Bradley-Terry reward model (MiniLM)",
}
SETS = {"seen": "new pairs, training facts", "unseen": "held-out facts"}


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def run_study(config: ConJConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Train (or load) every model and score them on both held-out sets."""
    import torch

    from edgekit.models.con_j.evaluate import judge_records, summarise, verdict_records
    from edgekit.models.con_j.fast_decode import cached_decoder
    from edgekit.models.con_j.reward_model import bt_verdicts, pair_embeddings
    from edgekit.models.con_j.train import train_all
    from edgekit.progress import step_progress

    config = config or ConJConfig()
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    data = config.prefs()
    sets = {"seen": data.heldout_seen(), "unseen": data.heldout_unseen()}
    results: dict[str, dict[str, Any]] = {}
    correct: dict[str, dict[str, np.ndarray]] = {}  # method -> set -> per-pair right verdicts
    examples: list[dict[str, Any]] = []
    try:
        with step_progress("con-j study", 6, show_progress) as step:
            step("train / load SFT judge, Con-J, ablation, reward model")
            trained = train_all(config, _progress_printer() if show_progress else None)
            judges = {"sft": trained.sft, "conj": trained.conj, "positives": trained.positives_only}
            for key, model in judges.items():
                step(f"judge held-out pairs: {key}")
                fn = cached_decoder(model)
                results[key], correct[key] = {}, {}
                for name, pairs in sets.items():
                    records = judge_records(fn, pairs)
                    results[key][name] = summarise(records)
                    correct[key][name] = np.array([bool(r["correct"]) for r in records])
                    if key == "conj" and name == "unseen":
                        examples = [r for r in records if r["correct"]][:1]
                        examples += [r for r in records if not r["correct"]][:1]
            step("reward model held-out pairs")
            results["bt"], correct["bt"] = {}, {}
            for name, pairs in sets.items():
                emb_a, emb_b = pair_embeddings(pairs)
                with torch.inference_mode():
                    ra = trained.reward_head(torch.from_numpy(emb_a)).numpy()
                    rb = trained.reward_head(torch.from_numpy(emb_b)).numpy()
                records = verdict_records(pairs, bt_verdicts(ra, rb))
                results["bt"][name] = summarise(records)
                correct["bt"][name] = np.array([bool(r["correct"]) for r in records])
            step("contrastive pair examples")
            contrast = _contrast_examples(trained, data.training())
    finally:
        torch.set_num_threads(threads)
    return {
        "config": asdict(config),
        "pairs": {
            "training": len(data.training()),
            "seed_with_gold_judgments": len(data.select("seed", False)),
            "heldout_seen": len(sets["seen"]),
            "heldout_unseen": len(sets["unseen"]),
        },
        "results": results,
        "paired": paired_differences(correct),
        "training": trained.log,
        "judgment_examples": examples,
        "contrastive_examples": contrast,
    }


PAIRED = (("conj", "sft"), ("positives", "conj"), ("conj", "bt"))


def paired_differences(correct: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """Accuracy of one method minus another on the same held-out pairs, with a 95 % paired
    bootstrap interval over pairs: {"conj - sft": {"seen": [diff, low, high], ...}, ...}."""
    from edgekit.numeric import bootstrap_interval

    out: dict[str, Any] = {}
    for first, second in PAIRED:
        if first not in correct or second not in correct:
            continue
        cells = {}
        for name, right in correct[first].items():
            d = right.astype(float) - correct[second][name]
            low, high = bootstrap_interval(lambda i, d=d: float(d[i].mean()), len(d))
            cells[name] = [float(d.mean()), low, high]
        out[f"{first} - {second}"] = cells
    return out


def _progress_printer():  # noqa: ANN202
    """Training messages to stderr (the first run trains for several minutes)."""
    import sys

    def progress(fraction: float, message: str) -> None:
        print(f"  [con-j train] {message}", file=sys.stderr, flush=True)

    return progress


def _contrast_examples(trained: Any, pairs: list) -> list[dict[str, str]]:
    from edgekit.models.con_j.judge_format import judgment_text

    out = []
    for source in ("sampled", "hint"):
        for c in trained.contrastive:
            if c.chosen_source == source or c.rejected_source == source:
                p = pairs[c.index]
                out.append(
                    {
                        "question": p.question,
                        "answer_a": p.answer_a,
                        "answer_b": p.answer_b,
                        "better": p.better,
                        "chosen": judgment_text(c.chosen),
                        "chosen_source": c.chosen_source,
                        "rejected": judgment_text(c.rejected),
                        "rejected_source": c.rejected_source,
                    }
                )
                break
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def print_tables(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    console = wide_console()
    n = report["pairs"]
    table = Table(
        title=f"Verdict accuracy (%) on held-out preference pairs: {n['heldout_seen']} new pairs "
        f"of training facts, {n['heldout_unseen']} pairs of held-out facts "
        f"(trained on {n['training']} pairs)"
    )
    columns = (
        "method",
        "seen facts",
        "held-out facts",
        "held-out, LM knows fact",
        "held-out, worse answer long",
        "verdict 'a'",
        "invalid",
        "rationale true",
        "verdict follows rationale",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "method" else "right")
    for key, title in METHODS.items():
        seen, unseen = report["results"][key]["seen"], report["results"][key]["unseen"]
        table.add_row(
            title,
            _pct(seen["accuracy"]),
            _pct(unseen["accuracy"]),
            _pct(unseen["accuracy_known"]),
            _pct(unseen["accuracy_anti_bias"]),
            _pct(unseen["share_a"]),
            _pct(unseen.get("invalid_rate")),
            _pct(unseen.get("rationale_true_rate")),
            _pct(unseen.get("consistent_rate")),
        )
    console.print(table)
    for pair, cells in report.get("paired", {}).items():
        first, second = pair.split(" - ")
        console.print(
            f"{METHODS[first]} - {METHODS[second]} (points, 95 % paired bootstrap over pairs): "
            + "; ".join(
                f"{name} {100 * d:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
                for name, (d, lo, hi) in cells.items()
            )
        )
    stats = report["training"]["conj"]["stats"]
    console.print(
        f"Contrastive judgments: {stats['samples_per_pair']:.0f} samples per pair, "
        f"{100 * stats['sampled_accuracy']:.1f}% right verdicts; positives from sampling "
        f"{stats['positive_sampled']:.0f}, from a hint {stats['positive_hint']:.0f}; negatives "
        f"from sampling {stats['negative_sampled']:.0f}, from a hint {stats['negative_hint']:.0f}; "
        f"{stats['contrastive_pairs']:.0f} pairs kept, {stats['dropped']:.0f} dropped. "
        f"Final DPO loss {report['training']['conj']['dpo_final_loss']:.3f} "
        f"(log 2 = 0.693 at the reference)."
    )
    for ex in report["judgment_examples"]:
        verdict = "right" if ex["correct"] else "wrong"
        console.print(
            f"[bold]Con-J judgment ({verdict})[/bold]: {ex['question']} | a: {ex['answer_a']} "
            f"| b: {ex['answer_b']} -> [italic]{ex['judgment']}[/italic] (better: {ex['better']})"
        )
    for ex in report["contrastive_examples"]:
        console.print(
            f"[bold]contrastive pair[/bold] {ex['question']} | a: {ex['answer_a']} | b: "
            f"{ex['answer_b']} (better {ex['better']}): chosen ({ex['chosen_source']}) "
            f"'{ex['chosen']}' vs rejected ({ex['rejected_source']}) '{ex['rejected']}'"
        )


def plot(report: dict[str, Any], path: Path) -> Path:
    """Accuracy bars per method and held-out set; the DPO loss curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_loss) = plt.subplots(1, 2, figsize=(13, 5.2), width_ratios=(2, 1))
    groups = [
        ("seen", "accuracy", "seen facts"),
        ("unseen", "accuracy", "held-out facts"),
        ("unseen", "accuracy_known", "held-out, LM knows"),
        ("unseen", "accuracy_anti_bias", "held-out, worse long"),
    ]
    x = np.arange(len(groups))
    width = 0.8 / len(METHODS)
    for i, (key, title) in enumerate(METHODS.items()):
        res = report["results"][key]
        vals = [res[s][m] for s, m, _ in groups]
        ax.bar(x + (i - 1.5) * width, vals, width, label=title)
    ax.axhline(0.5, color="k", lw=0.8, ls=":")
    ax.set_xticks(x, [g[2] for g in groups])
    ax.set(ylim=(0, 1), ylabel="verdict accuracy", title="held-out preference pairs")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    curve = report["training"]["conj"]["dpo_loss_curve"]
    ax_loss.plot(curve, lw=0.8, color="tab:orange")
    ax_loss.axhline(np.log(2), color="k", lw=0.8, ls=":")
    ax_loss.set(xlabel="DPO step", ylabel="DPO loss", title=f"beta {report['config']['beta']}")
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: ConJConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json`` and ``con-j.png`` under ``out``."""
    from edgekit.cache import atomic_write_text

    report = run_study(config, show_progress)
    print_tables(report)
    out = Path(out)
    report["plot"] = str(plot(report, out / "con-j.png"))
    atomic_write_text(out / "report.json", json.dumps(_clean(report), indent=1))
    return report


def run(card: ConJCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval con-j`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
