"""MTID ablation study on the synthetic Markov-chain procedures (tasks.py): SR / mAcc / mIoU of

- MTID: latent interpolation + action-aware mask + masked proximity loss;
- MTID without each component in turn, and with none of them (a PDPP-style x0-diffusion planner);
- the Bayes-optimal planner (oracle.py), which knows the world: the ceiling on that world.

Every learned variant plans with the same task classifier's prediction and DDIM from the same
noise. Also reported: accuracy per step position, the share of predicted steps whose action is
not in the true task's action set, and the learned interpolation weights. Models are cached
(``train.py``); the first run trains five planners for a few minutes on one thread.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.mtid.graphs import mtid_graphs
from edgekit.models.mtid.metrics import plan_metrics, step_accuracy
from edgekit.models.mtid.oracle import map_plans
from edgekit.models.mtid.sampling import plan
from edgekit.models.mtid.tasks import Plans, World
from edgekit.models.mtid.train import MTIDConfig, train_mtid
from edgekit.runtimes.torch import eager_runners
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.mtid.card import MTIDCard

VARIANTS: dict[str, dict[str, bool]] = {
    "MTID": {},
    "- interpolation": {"interpolation": False},
    "- action mask": {"action_mask": False},
    "- proximity loss": {"proximity_loss": False},
    "none (PDPP-style)": {"interpolation": False, "action_mask": False, "proximity_loss": False},
}
ORACLE = "Bayes-optimal"


def score(actions: np.ndarray, task: np.ndarray, test: Plans, world: World) -> dict[str, Any]:
    """Metrics of predicted ``actions`` (N, T) with predicted ``task`` (N,) on ``test``."""
    outside = ~world.members[test.task[:, None], actions]  # (N, T): action not in the true task
    sr = plan_metrics(actions, test.actions)
    n = len(test)
    return sr | {
        "success_rate_se": float(np.sqrt(sr["success_rate"] * (1 - sr["success_rate"]) / n)),
        "step_accuracy": step_accuracy(actions, test.actions).tolist(),
        "out_of_task": float(outside.mean()),
        "task_accuracy": float((task == test.task).mean()),
    }


def run_study(config: MTIDConfig | None = None, show_progress: bool = True) -> dict[str, Any]:
    """Train (or load) every variant and score it, and the Bayes-optimal planner, on the test plans."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or MTIDConfig()
    world, test = config.world(), config.data()["test"]
    rows: dict[str, dict[str, Any]] = {}
    alphas: list[float] = []
    with step_progress("mtid study", len(VARIANTS) + 1, show_progress) as step:
        for name, changes in VARIANTS.items():
            step(f"train + plan: {name}")
            variant = config.variant(**changes)
            trained = train_mtid(variant)
            graphs = mtid_graphs(
                trained.classifier, trained.denoiser, test.start[:2], test.goal[:2]
            )
            result = plan(
                eager_runners(graphs), test.start, test.goal, variant.horizon, variant.layout(),
                variant.schedule(), variant.ddim_steps, seed=0,
            )  # fmt: skip
            rows[name] = score(result.actions, result.task, test, world) | {
                "train_seconds": trained.seconds,
                "cached": trained.cached,
            }
            if trained.denoiser.interpolation is not None and not alphas:
                alphas = trained.denoiser.interpolation.alphas().detach().tolist()
        step("Bayes-optimal planner")
        task, actions = map_plans(world, test.start, test.goal, config.horizon)
        rows[ORACLE] = score(actions, task, test, world) | {"train_seconds": 0.0, "cached": True}
    return {
        "config": asdict(config),
        "test_plans": len(test),
        "rows": rows,
        "alphas": alphas,
        "alphas_init": [(j + 0.5) / config.horizon for j in range(config.horizon)],
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    c = report["config"]
    table = Table(
        title=f"MTID ablations: {report['test_plans']} test plans, T = {c['horizon']}, "
        f"{c['tasks']} tasks x {c['per_task']} of {c['actions']} actions, frame noise {c['noise']} "
        f"(SR +- one standard error)"
    )
    for col in (
        "planner",
        "SR",
        "mAcc",
        "mIoU",
        "acc per step",
        "out-of-task",
        "task acc",
        "train s",
    ):
        table.add_column(col, justify="left" if col == "planner" else "right")
    for name, r in report["rows"].items():
        table.add_row(
            name,
            f"{100 * r['success_rate']:.1f} +- {100 * r['success_rate_se']:.1f}",
            f"{100 * r['mean_accuracy']:.1f}",
            f"{100 * r['mean_iou']:.1f}",
            " / ".join(f"{100 * a:.0f}" for a in r["step_accuracy"]),
            f"{100 * r['out_of_task']:.1f}",
            f"{100 * r['task_accuracy']:.1f}",
            f"{r['train_seconds']:.0f}",
        )
    wide_console().print(table)
    if report["alphas"]:
        learned = ", ".join(f"{a:.3f}" for a in report["alphas"])
        init = ", ".join(f"{a:.3f}" for a in report["alphas_init"])
        wide_console().print(f"learned interpolation weights alpha_j: {learned} (init {init})")


def plot(report: dict[str, Any], path: Path) -> Path:
    """SR / mAcc / mIoU bars per planner; accuracy per step position; learned alphas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    names = list(rows)
    fig, (ax_bar, ax_step, ax_alpha) = plt.subplots(
        1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [2.2, 1.2, 1]}
    )
    x = np.arange(len(names))
    for i, (key, label) in enumerate(
        (("success_rate", "SR"), ("mean_accuracy", "mAcc"), ("mean_iou", "mIoU"))
    ):
        values = [100 * rows[n][key] for n in names]
        errors = [100 * rows[n]["success_rate_se"] if key == "success_rate" else 0 for n in names]
        ax_bar.bar(x + (i - 1) * 0.27, values, 0.27, yerr=errors, label=label)
    ax_bar.set_xticks(x, names, rotation=15, fontsize=8)
    ax_bar.set(ylabel="%", ylim=(0, 100), title="test plans: higher is better")
    ax_bar.legend(fontsize=8)
    steps = np.arange(1, report["config"]["horizon"] + 1)
    for name in names:
        style = {"color": "k", "ls": "--"} if name == ORACLE else {}
        ax_step.plot(
            steps, 100 * np.asarray(rows[name]["step_accuracy"]), marker="o", label=name, **style
        )
    ax_step.set(
        xlabel="step of the plan", ylabel="accuracy %", title="accuracy per step", xticks=steps
    )
    ax_step.legend(fontsize=7)
    if report["alphas"]:
        ax_alpha.plot(steps, report["alphas_init"], "o--", color="grey", label="init (j + 1/2) / T")
        ax_alpha.plot(steps, report["alphas"], "o-", color="tab:green", label="learned")
    ax_alpha.set(
        xlabel="step j",
        ylabel="alpha_j",
        ylim=(0, 1),
        title="latent interpolation weights",
        xticks=steps,
    )
    ax_alpha.legend(fontsize=8)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: MTIDConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its table, write ``report.json`` and ``mtid.png`` under ``out``."""
    return write_study(run_study(config, show_progress), out, print_table, plot, "mtid.png")


def run(card: MTIDCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval mtid`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
