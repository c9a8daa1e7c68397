"""HiSSD study on the spread task: train on 2, 3, 4 agents from mixed-quality offline data
(20 % expert, 40 % nearest-landmark, 40 % random episodes), act zero-shot with 5 and 6.

Methods, all with the same entity-attention encoder and data:

- BC: behaviour cloning (action cross-entropy on every transition);
- common skills only: HiSSD without the task-specific skill and its contrastive term;
- HiSSD: common skills + task-specific skills.

Five seeds (data and initialisation). Scored by greedy rollouts (200 episodes per agent count
and seed): final landmark coverage and the team distance averaged over the episode; the
behaviour policies are reference rows, the random one the trivial baseline. Every score is a
mean ± SE over seeds, and HiSSD is compared with each other row by the paired difference over
seeds (``edgekit.numeric.seed_summary``): a difference counts as shown only where it exceeds
twice its SE. Also reported: the mean advantage weight the learned value gives each behaviour's
transitions. Models are cached (``train.py``): the first run trains fifteen policies, a cached
run only rolls out.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.hissd.data import BEHAVIOURS, episode_returns
from edgekit.models.hissd.evaluate import rollout
from edgekit.models.hissd.train import HiSSDConfig, train_policy
from edgekit.numeric import format_mean_se, mean_se, seed_summary
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.hissd.card import HiSSDCard

METHODS = {"bc": "BC", "common": "common skills only", "hissd": "HiSSD"}
SEEDS = (0, 1, 2, 3, 4)
# HiSSD minus each of these rows, paired over seeds
AGAINST = (METHODS["bc"], METHODS["common"], "random (data)")
SUMMARIES = ("seen_coverage", "unseen_coverage", "unseen_distance")


def _mean(dicts: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([d[k] for d in dicts])) for k in dicts[0]}


def run_study(
    config: HiSSDConfig | None = None,
    seeds: tuple[int, ...] = SEEDS,
    episodes: int = 200,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Per seed (data + init): train (or load) the three policies; roll every method out on
    every agent count. Scores are means over seeds (each seed's are kept too); the seen and
    unseen summaries carry their SE over seeds, and ``paired`` holds HiSSD minus each row of
    ``AGAINST`` per summary (``seed_summary`` plus ``better``: seeds where HiSSD is better,
    i.e. higher coverage or lower distance)."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    base = config or HiSSDConfig()
    counts = sorted({*base.train_agents, *base.test_agents})
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in METHODS.values()}
    data_rewards = {}
    with step_progress("hissd study", len(seeds) * (1 + len(METHODS)) + 1, show_progress) as step:
        for seed in seeds:
            config = replace(base, seed=seed)
            step(f"seed {seed}: collect offline data")
            sets = config.data()
            data_rewards[str(seed)] = {str(n): episode_returns(t) for n, t in sets.items()}
            for mode, label in METHODS.items():
                step(f"seed {seed}: train {label}")
                trained = train_policy(config, mode, sets=sets)
                policy = trained.policy

                def act(x: np.ndarray, policy=policy) -> np.ndarray:  # noqa: ANN001
                    with torch.inference_mode():
                        return policy(torch.from_numpy(x)).numpy()

                runs[label].append(
                    {
                        "seed": seed,
                        "scores": {
                            str(n): rollout(act, n, episodes, config.horizon, seed=100 + seed)
                            for n in counts
                        },
                        "train_seconds": trained.seconds,
                        "cached": trained.cached,
                        "weights": trained.weights,
                        "history": trained.history,
                    }
                )
        step("behaviour policies")
        for kind in BEHAVIOURS:
            runs[f"{kind} (data)"] = [
                {
                    "seed": seed,
                    "scores": {
                        str(n): rollout(kind, n, episodes, base.horizon, seed=100 + seed)
                        for n in counts
                    },
                }
                for seed in seeds
            ]
    rows: dict[str, Any] = {}
    for label, per_seed in runs.items():
        row: dict[str, Any] = {
            "scores": {str(n): _mean([r["scores"][str(n)] for r in per_seed]) for n in counts},
            "per_seed": per_seed,
        }
        if "train_seconds" in per_seed[0]:
            row["train_seconds"] = float(np.mean([r["train_seconds"] for r in per_seed]))
        if per_seed[0].get("weights"):
            row["weights"] = _mean([r["weights"] for r in per_seed])
        for split, ns in (("seen", base.train_agents), ("unseen", base.test_agents)):
            for metric in ("coverage", "distance"):
                key = f"{split}_{metric}"
                row[f"{key}_seeds"] = [
                    float(np.mean([r["scores"][str(n)][metric] for n in ns])) for r in per_seed
                ]
                row[key], row[f"{key}_se"] = mean_se(row[f"{key}_seeds"])
        rows[label] = row
    hissd = rows[METHODS["hissd"]]
    paired = {
        f"HiSSD - {other}": {
            key: _paired(hissd[f"{key}_seeds"], rows[other][f"{key}_seeds"], key)
            for key in SUMMARIES
        }
        for other in AGAINST
    }
    return {
        "config": asdict(base),
        "seeds": list(seeds),
        "episodes": episodes,
        "counts": counts,
        "data_mean_reward": data_rewards,
        "rows": rows,
        "paired": paired,
    }


def _paired(values: list[float], against: list[float], key: str) -> dict[str, Any]:
    """``seed_summary`` of ``values`` against ``against`` plus ``better``: the seeds where
    ``values`` is better (higher coverage, lower distance)."""
    out = seed_summary(values, against)
    d = np.asarray(values) - np.asarray(against)
    out["better"] = int((d < 0).sum() if key.endswith("distance") else (d > 0).sum())
    return out


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    c = report["config"]
    seeds = report["seeds"]
    unseen = set(c["test_agents"])
    table = Table(
        title=f"HiSSD on spread, trained on {c['train_agents']} agents, mixed data "
        f"(expert/nearest/random {c['mix']}); seeds {seeds}, {report['episodes']} episodes per "
        "count and seed. Cells: mean over seeds of final coverage (higher better) / mean team "
        "distance (lower better); * unseen; summaries mean ± SE over seeds"
    )
    table.add_column("method")
    for n in report["counts"]:
        table.add_column(f"n={n}{'*' if n in unseen else ''}", justify="right")
    for col in ("seen cov", "unseen cov", "unseen dist", "train s"):
        table.add_column(col, justify="right")
    for name, row in report["rows"].items():
        cells = [
            f"{row['scores'][str(n)]['coverage']:.3f} / {row['scores'][str(n)]['distance']:.3f}"
            for n in report["counts"]
        ]
        secs = row.get("train_seconds")
        table.add_row(
            name,
            *cells,
            *(format_mean_se(row[key], row[f"{key}_se"]) for key in SUMMARIES),
            "-" if secs is None else f"{secs:.0f}",
        )
    console = wide_console()
    console.print(table)
    paired = Table(
        title=f"paired difference over the {len(seeds)} seeds: mean ± SE (seeds where HiSSD is "
        "better); shown = |difference| > 2 SE"
    )
    paired.add_column("difference")
    for col in ("seen cov", "unseen cov", "unseen dist", "shown"):
        paired.add_column(col, justify="right")
    for name, diffs in report["paired"].items():
        cells = [
            f"{format_mean_se(d['diff'], d['diff_se'], '+')} ({d['better']}/{len(seeds)})"
            for d in (diffs[key] for key in SUMMARIES)
        ]
        shown = [
            col
            for col, key in zip(("seen cov", "unseen cov", "unseen dist"), SUMMARIES, strict=True)
            if diffs[key]["shown"]
        ]
        paired.add_row(name, *cells, ", ".join(shown) or "none")
    console.print(paired)
    weights = Table(title="mean advantage weight min(exp(10 TD), 100) of each behaviour's data")
    weights.add_column("method")
    for kind in BEHAVIOURS:
        weights.add_column(kind, justify="right")
    for name, row in report["rows"].items():
        if row.get("weights"):
            weights.add_row(name, *(f"{row['weights'][k]:.2f}" for k in BEHAVIOURS))
    console.print(weights)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Coverage and team distance against agent count (unseen counts shaded); the advantage
    weight of each behaviour's data; HiSSD's training losses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = report["counts"]
    unseen = report["config"]["test_agents"]
    rows = report["rows"]
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for ax, metric in zip(axes[:2], ("coverage", "distance"), strict=True):
        for name, row in rows.items():
            style = "--" if "(data)" in name else "-"
            stats = [
                mean_se([r["scores"][str(n)][metric] for r in row["per_seed"]]) for n in counts
            ]
            ax.errorbar(
                counts,
                [m for m, _ in stats],
                yerr=[0.0 if not np.isfinite(se) else se for _, se in stats],
                fmt=style,
                marker="o",
                capsize=3,
                label=name,
            )
        ax.axvspan(min(unseen) - 0.5, max(unseen) + 0.5, color="grey", alpha=0.15, label="unseen")
        ax.set(
            xlabel="agents",
            title=f"{metric} ({'higher' if metric == 'coverage' else 'lower'} is better), "
            "mean ± SE over seeds",
        )
    axes[0].legend(fontsize=7, loc="center left")
    learned = [(name, row["weights"]) for name, row in rows.items() if row.get("weights")]
    x = np.arange(len(BEHAVIOURS))
    for i, (name, w) in enumerate(learned):
        axes[2].bar(
            x + 0.8 * (i / len(learned) - 0.4),
            [w[k] for k in BEHAVIOURS],
            0.8 / len(learned),
            label=name,
        )
    axes[2].set_xticks(x, BEHAVIOURS)
    axes[2].set(title="mean advantage weight of the data", yscale="log")
    axes[2].legend(fontsize=7)
    history = rows[METHODS["hissd"]]["per_seed"][0]["history"]
    for key in ("ce", "plan", "recon", "value", "contrast"):
        if history.get(key):
            axes[3].plot(np.arange(len(history[key])) * 20, history[key], label=key)
    axes[3].set(title="HiSSD training losses (first seed)", xlabel="step", yscale="log")
    axes[3].legend(fontsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: HiSSDConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json`` and ``hissd.png`` under ``out``."""
    return write_study(
        run_study(config, show_progress=show_progress), out, print_table, plot, "hissd.png"
    )


def run(card: HiSSDCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval hissd`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
