"""MTID ablation study on the synthetic Markov-chain procedures (tasks.py): SR / mAcc / mIoU of

- MTID: latent interpolation + action-aware mask + masked proximity loss;
- MTID without each component in turn, and with none of them (a PDPP-style x0-diffusion planner);
- a trivial planner: the most common training plan of the predicted task (no diffusion);
- the Bayes-optimal planner (oracle.py), which knows the world: the ceiling on that world.

Every learned variant plans with the same task classifier's prediction and DDIM from the same
noise. The study repeats all of it for ``SEEDS`` seeds (``MTIDConfig.seed`` = seed, seed + 1, ...:
each seed draws its own world, training and test plans and initial weights) and reports per
planner the mean ± SE over seeds and the paired difference (mean ± SE, seeds won;
``edgekit.numeric.seed_summary``) of MTID against the PDPP-style planner and of every other planner
against MTID. Also reported: accuracy per step position, the share of predicted steps whose
action is not in the true task's action set, and the learned interpolation weights. Models are
cached (``train.py``); a cold run trains 25 planners, about a minute each on one thread.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mtid.graphs import mtid_graphs
from edgekit.models.mtid.metrics import plan_metrics, step_accuracy
from edgekit.models.mtid.oracle import map_plans
from edgekit.models.mtid.sampling import plan
from edgekit.models.mtid.tasks import Plans, World
from edgekit.models.mtid.train import MTIDConfig, train_mtid
from edgekit.numeric import format_mean_se, mean_se, seed_summary
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
FULL = "MTID"
BASELINE = "none (PDPP-style)"
TRIVIAL = "most common plan"
ORACLE = "Bayes-optimal"
SEEDS = 5
# the reference of each planner's paired difference: MTID against the PDPP-style planner, every
# other planner against MTID (the PDPP-style planner is the reference itself)
AGAINST: dict[str, str | None] = {
    name: (BASELINE if name == FULL else None if name == BASELINE else FULL)
    for name in (*VARIANTS, TRIVIAL, ORACLE)
}
MEANS = ("mean_accuracy", "mean_iou", "out_of_task", "task_accuracy")
DIFF_KEYS = ("diff", "diff_se", "wins", "shown")


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


def most_common_plans(train: Plans, tasks: int) -> np.ndarray:
    """(K, T) int64: per task the most frequent action sequence of its training plans (ties: the
    smallest sequence); a task without training plans gets the most frequent plan overall."""

    def mode(plans: np.ndarray) -> np.ndarray:
        rows, counts = np.unique(plans, axis=0, return_counts=True)
        return rows[int(np.argmax(counts))]

    fallback = mode(train.actions)
    return np.stack(
        [
            mode(train.actions[train.task == k]) if np.any(train.task == k) else fallback
            for k in range(tasks)
        ]
    ).astype(np.int64)


def run_seed(config: MTIDConfig, step: Any = None) -> tuple[dict[str, dict[str, Any]], list[float]]:
    """Rows of every planner on the test plans of ``config`` (one seed) and the learned
    interpolation weights of MTID; ``step(message)`` is called before each planner."""
    data = config.data()
    world, test = config.world(), data["test"]
    rows: dict[str, dict[str, Any]] = {}
    alphas: list[float] = []
    for name, changes in VARIANTS.items():
        if step:
            step(f"seed {config.seed}, train + plan: {name}")
        variant = config.variant(**changes)
        trained = train_mtid(variant)
        graphs = mtid_graphs(trained.classifier, trained.denoiser, test.start[:2], test.goal[:2])
        result = plan(
            eager_runners(graphs), test.start, test.goal, variant.horizon, variant.layout(),
            variant.schedule(), variant.ddim_steps, seed=0,
        )  # fmt: skip
        rows[name] = score(result.actions, result.task, test, world) | {
            "train_seconds": trained.seconds,
            "cached": trained.cached,
        }
        if name == FULL:
            # the trivial planner reads the same classifier's task (shared by every variant)
            common = most_common_plans(data["train"], config.tasks)[result.task]
            trivial = score(common, result.task, test, world)
            if trained.denoiser.interpolation is not None:
                alphas = trained.denoiser.interpolation.alphas().detach().tolist()
    rows[TRIVIAL] = trivial | {"train_seconds": 0.0, "cached": True}
    if step:
        step(f"seed {config.seed}: Bayes-optimal planner")
    task, actions = map_plans(world, test.start, test.goal, config.horizon)
    rows[ORACLE] = score(actions, task, test, world) | {"train_seconds": 0.0, "cached": True}
    return rows, alphas


def summarise(per_seed: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per planner over seeds: ``success_rate`` / ``success_rate_se`` (mean ± SE over seeds),
    ``vs`` (the reference planner or None) and ``diff`` (``seed_summary`` of the paired SR
    difference), the mean of the other metrics and of accuracy per step, and the summed
    training seconds."""
    out: dict[str, dict[str, Any]] = {}
    for name, against in AGAINST.items():
        sr = [rows[name]["success_rate"] for rows in per_seed]
        ref = None if against is None else [rows[against]["success_rate"] for rows in per_seed]
        summary = seed_summary(sr, against=ref)
        out[name] = {
            "success_rate": summary["mean"],
            "success_rate_se": summary["se"],
            "success_rate_seeds": summary["values"],
            "vs": against,
            "diff": None if against is None else {k: summary[k] for k in DIFF_KEYS},
            **{k: float(np.mean([rows[name][k] for rows in per_seed])) for k in MEANS},
            "mean_accuracy_se": mean_se([rows[name]["mean_accuracy"] for rows in per_seed])[1],
            "step_accuracy": np.mean(
                [rows[name]["step_accuracy"] for rows in per_seed], axis=0
            ).tolist(),
            "train_seconds": float(sum(rows[name]["train_seconds"] for rows in per_seed)),
            "cached": all(rows[name]["cached"] for rows in per_seed),
        }
    return out


def run_study(
    config: MTIDConfig | None = None, show_progress: bool = True, seeds: int = SEEDS
) -> dict[str, Any]:
    """Train (or load) every variant and score it, the most-common-plan planner and the
    Bayes-optimal planner on the test plans, for ``seeds`` seeds (``config.seed`` and the next
    ones), and summarise over seeds."""
    import torch

    from edgekit.progress import step_progress

    if seeds < 1:
        raise InputError(f"the mtid study needs seeds >= 1, got {seeds}")
    torch.set_num_threads(1)
    config = config or MTIDConfig()
    seed_values = [config.seed + i for i in range(seeds)]
    per_seed: list[dict[str, dict[str, Any]]] = []
    alphas: list[list[float]] = []
    with step_progress("mtid study", seeds * (len(VARIANTS) + 1), show_progress) as step:
        for seed in seed_values:
            rows, learned = run_seed(config.variant(seed=seed), step)
            per_seed.append(rows)
            if learned:
                alphas.append(learned)
    return {
        "config": asdict(config),
        "seeds": seed_values,
        "test_plans": config.test_plans,
        "rows": summarise(per_seed),
        "per_seed": per_seed,
        "alphas": np.mean(alphas, axis=0).tolist() if alphas else [],
        "alphas_per_seed": alphas,
        "alphas_init": [(j + 0.5) / config.horizon for j in range(config.horizon)],
    }


def _pm(mean: float, se: float, sign: str = "") -> str:
    """``mean ± se`` of a rate, in percent points."""
    return format_mean_se(100 * mean, 100 * se, sign, digits=1)


def _diff(row: dict[str, Any], seeds: int) -> str:
    d = row["diff"]
    if d is None:
        return "(reference)"
    mark = " *" if d["shown"] else ""
    return f"{_pm(d['diff'], d['diff_se'], '+')} ({d['wins']}/{seeds}){mark}"


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    c = report["config"]
    seeds = len(report["seeds"])
    table = Table(
        title=f"MTID ablations: {report['test_plans']} test plans per seed, T = {c['horizon']}, "
        f"{c['tasks']} tasks x {c['per_task']} of {c['actions']} actions, frame noise "
        f"{c['noise']}; {seeds} seeds ({report['seeds'][0]}..{report['seeds'][-1]}), "
        "mean ± SE over seeds, in %"
    )
    for col in (
        "planner",
        "SR",
        "SR - reference (won)",
        "reference",
        "mAcc",
        "mIoU",
        "acc per step",
        "out-of-task",
        "task acc",
        "train s, all seeds",
    ):
        table.add_column(col, justify="left" if col in ("planner", "reference") else "right")
    for name, r in report["rows"].items():
        table.add_row(
            name,
            _pm(r["success_rate"], r["success_rate_se"]),
            _diff(r, seeds),
            r["vs"] or "",
            f"{100 * r['mean_accuracy']:.1f}",
            f"{100 * r['mean_iou']:.1f}",
            " / ".join(f"{100 * a:.0f}" for a in r["step_accuracy"]),
            f"{100 * r['out_of_task']:.1f}",
            f"{100 * r['task_accuracy']:.1f}",
            f"{r['train_seconds']:.0f}",
        )
    console = wide_console()
    console.print(table)
    console.print(
        "SR - reference: paired over seeds, mean ± SE of the per-seed difference, seeds where the "
        "planner is higher; * where |difference| > 2 SE"
    )
    if report["alphas"]:
        learned = ", ".join(f"{a:.3f}" for a in report["alphas"])
        init = ", ".join(f"{a:.3f}" for a in report["alphas_init"])
        console.print(
            f"learned interpolation weights alpha_j, mean over seeds: {learned} (init {init})"
        )


def plot(report: dict[str, Any], path: Path) -> Path:
    """SR / mAcc / mIoU bars per planner (mean over seeds, SR and mAcc with ± SE); accuracy per
    step position; learned alphas (mean over seeds)."""
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
        errors = [100 * np.nan_to_num(rows[n].get(f"{key}_se", 0.0)) for n in names]
        ax_bar.bar(x + (i - 1) * 0.27, values, 0.27, yerr=errors, label=label)
    ax_bar.set_xticks(x, names, rotation=15, fontsize=8)
    ax_bar.set(ylabel="%", ylim=(0, 100), title="test plans, mean ± SE over seeds")
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
