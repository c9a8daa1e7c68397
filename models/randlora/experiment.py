"""LoRA vs RandLoRA vs full fine-tuning at matched trainable parameters, on permuted digits.

The source MLP (digits 0-9) is adapted to the same digits seen through a fixed pixel
permutation. For each RandLoRA basis rank r the LoRA rank q is the smallest whose trainable
parameter count is at least RandLoRA's, so LoRA never has fewer parameters. Two settings:

- "all": adapters on every Linear layer (the usual PEFT setting);
- "first": adapters on the input layer only, the rest frozen: the task then needs a full-rank
  change of that one pretrained layer (W1 P^T).

Each arm picks its learning rate on the validation split (seed 0), then runs every seed (0-4)
at that rate; the table gives test accuracy as mean ± SE over seeds, the paired difference
against the model before adaptation and, for RandLoRA, against the matched LoRA on the same
seeds (mean ± SE of the per-seed differences, seeds won; ``edgekit.numeric.seed_summary``),
and the numerical / effective rank of the learned input-layer update. ``experiment`` prints the
tables, writes ``report.json`` and ``randlora.png`` under ``out``; 140 runs of 1-5 s each:
5-15 minutes on one CPU thread.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from edgekit.card import ModelCard
from edgekit.models.randlora import data
from edgekit.models.randlora.layers import trainable_parameters
from edgekit.models.randlora.rank import effective_rank, numerical_rank
from edgekit.models.randlora.train import (
    FIRST_LAYER,
    AdaptConfig,
    accuracy,
    adapt,
    prepare,
    pretrained_mlp,
)
from edgekit.numeric import format_diff, format_mean_se, seed_summary
from edgekit.study import save_figure


@dataclass(frozen=True)
class StudyConfig:
    """The grid: RandLoRA ranks per setting, learning rates, seeds, steps per run."""

    ranks: dict[str, tuple[int, ...]] | None = None  # setting -> RandLoRA basis ranks
    kinds: tuple[str, ...] = ("dense", "sparse")
    lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    steps: int = 300

    def setting_ranks(self) -> dict[str, tuple[int, ...]]:
        return self.ranks or {"all": (32, 16, 8, 4), "first": (32, 8)}


def first_layer_update(model: torch.nn.Module, pretrained: torch.nn.Module) -> torch.Tensor:
    """The learned change of the input layer's weight (out, in) = (128, 64)."""
    layer = model.get_submodule(FIRST_LAYER)
    if hasattr(layer, "delta_weight"):
        return layer.delta_weight().detach()
    return (layer.weight - pretrained.get_submodule(FIRST_LAYER).weight).detach()


def _trainable(config: AdaptConfig) -> int:
    return trainable_parameters(prepare(config))


def matched_lora_rank(randlora: AdaptConfig) -> int:
    """The smallest LoRA rank whose trainable count is >= that of ``randlora``."""
    target = _trainable(randlora)
    per_rank = _trainable(AdaptConfig("lora", rank=1, target=randlora.target))
    return max(1, math.ceil(target / per_rank))


def run_arm(config: AdaptConfig, study: StudyConfig, step: Any = None) -> dict[str, Any]:
    """Learning rate chosen on validation (seed 0), then every seed at that rate."""
    pretrained = pretrained_mlp(config.pretrain)
    name = {"randlora": f"randlora {config.kind} r={config.rank}", "lora": f"lora q={config.rank}"}
    label = f"{name.get(config.method, config.method)} ({config.target})"
    trials = {}
    for lr in study.lrs:
        trials[lr] = adapt(replace(config, lr=lr, seed=study.seeds[0]))
        if step:
            step(f"{label} lr={lr:g}")
    best_lr = max(study.lrs, key=lambda lr: trials[lr].val_accuracy)
    runs = [trials[best_lr]]
    for seed in study.seeds[1:]:
        runs.append(adapt(replace(config, lr=best_lr, seed=seed)))
        if step:
            step(f"{label} seed={seed}")
    tests = [r.test_accuracy for r in runs]
    updates = [first_layer_update(r.model, pretrained) for r in runs]
    return {
        "method": config.method,
        "kind": config.kind if config.method == "randlora" else "",
        "rank": config.rank if config.method in ("randlora", "lora") else None,
        "target": config.target,
        "trainable": runs[0].trainable,
        "lr": best_lr,
        "val_accuracy": trials[best_lr].val_accuracy,
        "test_accuracy": statistics.fmean(tests),
        "test_accuracies": tests,
        "update_rank": min(numerical_rank(u) for u in updates),
        "update_effective_rank": statistics.fmean(effective_rank(u) for u in updates),
        "seconds_per_run": statistics.fmean(r.seconds for r in runs),
    }


def _arms(study: StudyConfig) -> list[tuple[AdaptConfig, AdaptConfig | None]]:
    """Every arm, each with the LoRA arm it is compared with (RandLoRA arms) or None."""
    arms: list[tuple[AdaptConfig, AdaptConfig | None]] = []
    for target, ranks in study.setting_ranks().items():
        base = AdaptConfig(steps=study.steps, target=target)
        arms.append((replace(base, method="full"), None))
        for r in ranks:
            rand = replace(base, method="randlora", rank=r)
            lora = replace(base, method="lora", rank=matched_lora_rank(rand))
            arms += [(replace(rand, kind=k), lora) for k in study.kinds]
            arms.append((lora, None))
    return arms


def summarise(
    tests: Sequence[float], before: float, against: Sequence[float] | None = None
) -> dict[str, Any]:
    """Test accuracy over seeds (n,): ``mean``/``se``, the paired difference against the model
    before adaptation (``vs_before``, the same ``before`` on every seed) and, given the matched
    LoRA's accuracies on the same seeds (n,), against it (``vs_lora``; else None)."""
    summary = seed_summary(tests)
    return {
        "mean": summary["mean"],
        "se": summary["se"],
        "vs_before": seed_summary(tests, against=[before] * len(tests)),
        "vs_lora": None if against is None else seed_summary(tests, against=against),
    }


def run_study(study: StudyConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Every arm of the grid; returns the report (rows, baselines, config)."""
    from edgekit.progress import step_progress

    study = study or StudyConfig()
    task = data.permuted_task()
    pretrained = pretrained_mlp()
    baselines = {
        "source_accuracy": accuracy(pretrained, data.source_task().test),
        "unadapted_accuracy": accuracy(pretrained, task.test),
    }
    arms = _arms(study)
    total = sum(len(study.lrs) + len(study.seeds) - 1 for _ in arms)
    with step_progress("randlora study", total, show_progress) as step:
        rows = [run_arm(arm, study, step) for arm, _ in arms]
    by_config = {arm: row for (arm, _), row in zip(arms, rows, strict=True)}
    for (_, lora), row in zip(arms, rows, strict=True):
        against = None if lora is None else by_config[lora]["test_accuracies"]
        row["lora_rank"] = None if lora is None else lora.rank
        row["summary"] = summarise(row["test_accuracies"], baselines["unadapted_accuracy"], against)
    study_json = asdict(study) | {"ranks": {k: list(v) for k, v in study.setting_ranks().items()}}
    return {"task": task.name, "baselines": baselines, "rows": rows, "study": study_json}


def print_tables(report: dict[str, Any]) -> None:
    """One rich table per setting: the baseline row, then per method test accuracy (mean ± SE
    over seeds), paired differences against the baseline and the matched LoRA, update rank."""
    from rich.table import Table

    from edgekit.console import wide_console

    console = wide_console()
    b = report["baselines"]
    seeds = report["study"]["seeds"]
    console.print(
        f"task {report['task']}: pretrained model {b['source_accuracy']:.3f} on the source "
        f"digits, {b['unadapted_accuracy']:.3f} on the permuted digits before adaptation "
        f"(chance 0.100); {len(seeds)} seeds, mean ± SE over seeds"
    )
    for target in report["study"]["ranks"]:
        rows = [r for r in report["rows"] if r["target"] == target]
        table = Table(title=f"permuted digits, adapters on {target} layer(s): test accuracy")
        columns = (
            "method",
            "basis",
            "rank",
            "trainable",
            "lr",
            "test acc",
            "- before (wins)",
            "- LoRA (wins)",
            "rank(dW1)",
            "eff rank",
        )
        for col in columns:
            table.add_column(col, justify="left" if col in ("method", "basis") else "right")
        table.add_row(
            "before adaptation", "", "", "0", "", f"{b['unadapted_accuracy']:.3f}", *[""] * 4
        )
        for r in rows:
            summary = r["summary"]
            lora = "" if r["lora_rank"] is None else f"q={r['lora_rank']}: "
            table.add_row(
                r["method"],
                r["kind"],
                "" if r["rank"] is None else str(r["rank"]),
                str(r["trainable"]),
                f"{r['lr']:g}",
                format_mean_se(summary["mean"], summary["se"]),
                format_diff(summary["vs_before"]),
                lora + format_diff(summary["vs_lora"]),
                str(r["update_rank"]),
                f"{r['update_effective_rank']:.1f}",
            )
        console.print(table)
    console.print(
        "differences are paired over seeds: mean ± SE of (method - reference) per seed, seeds "
        "where the method is higher; * where |difference| > 2 SE"
    )


def plot(report: dict[str, Any], path: Path) -> Path:
    """Accuracy vs trainable parameters per setting, and rank(dW1) vs parameters (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    targets = list(report["study"]["ranks"])
    fig, axes = plt.subplots(1, len(targets) + 1, figsize=(5 * (len(targets) + 1), 4))
    styles = {("lora", ""): "o-", ("randlora", "dense"): "s-", ("randlora", "sparse"): "^--"}
    for ax, target in zip(axes, targets, strict=False):
        rows = [r for r in report["rows"] if r["target"] == target]
        for (method, kind), style in styles.items():
            pts = sorted(
                (r["trainable"], r["test_accuracy"], r["update_rank"])
                for r in rows
                if (r["method"], r["kind"]) == (method, kind)
            )
            if not pts:
                continue
            label = f"{method} {kind}".strip()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
            axes[-1].plot(
                [p[0] for p in pts], [p[2] for p in pts], style, label=f"{label} ({target})"
            )
        for r in rows:
            if r["method"] == "full":
                ax.axhline(
                    r["test_accuracy"], color="k", ls=":", label=f"full FT ({r['trainable']})"
                )
        low = min(r["test_accuracy"] for r in rows)
        ax.set(xscale="log", xlabel="trainable parameters", ylabel="test accuracy")
        ax.set(ylim=(max(0.0, low - 0.05), 1.0))
        ticks = sorted({r["trainable"] for r in rows if r["method"] != "full"})
        ax.set_xticks(ticks, [str(t) for t in ticks], rotation=45, fontsize=7)
        unadapted = report["baselines"]["unadapted_accuracy"]
        ax.set_title(f"adapters on {target} layer(s) (unadapted: {unadapted:.2f})")
        ax.legend(fontsize=7)
    axes[-1].set(xscale="log", xlabel="trainable parameters", ylabel="numerical rank of dW1")
    for ax in axes:
        ax.xaxis.set_minor_formatter(NullFormatter())
    axes[-1].set_title("rank of the input-layer update (max 64; 61 pixels vary)")
    axes[-1].legend(fontsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, study: StudyConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json`` and ``randlora.png`` to ``out``."""
    from edgekit.cache import atomic_write_text

    report = run_study(study, show_progress)
    print_tables(report)
    out = Path(out)
    report["plot"] = str(plot(report, out / "randlora.png"))
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    return report


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval randlora`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return experiment(Path(out), show_progress)
