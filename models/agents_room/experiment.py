"""``edgekit eval agents-room``: Agents' Room vs end-to-end generation from the same LM.

On held-out premises (hero x trade x town x threat combinations never seen in training) the
story LM writes each story three times: as a room of nine agents on a scratchpad (fixed
order), as a room with the planning agents shuffled (the pluggable-orchestrator ablation) and
end to end in one generation. Both decode with the same settings (sampling at temperature 1, and greedy). The
criteria judge compares every (agents, end-to-end) pair in both orders; the table shows the
mean criteria per system, the template reference stories as the ceiling, win rates and the
generation cost.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.models.agents_room import world
from edgekit.models.agents_room.backend import StoryLMBackend
from edgekit.models.agents_room.judge import (
    CRITERIA,
    CriteriaJudge,
    judge_pair,
    mentions,
    plan_adherence,
    story_scores,
    win_rate,
    words,
)
from edgekit.models.agents_room.orchestrator import (
    FixedOrder,
    ShuffledPlanning,
    end_to_end,
    run_agents_room,
)
from edgekit.models.agents_room.scratchpad import PREMISE
from edgekit.models.agents_room.train import StoryLMConfig, train_cached
from edgekit.models.agents_room.world import LEXICON
from edgekit.study import save_figure, write_study

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.models.agents_room.card import AgentsRoomCard

DECODINGS = {"sampled T=1": 1.0, "greedy": 0.0}


def _mean_scores(
    stories: list[str], premises: list[world.Premise], target: int
) -> dict[str, float]:
    rows = [story_scores(s, p, target) for s, p in zip(stories, premises, strict=True)]
    means = {c: float(np.mean([r[c] for r in rows])) for c in CRITERIA}
    means["overall"] = float(np.mean([means[c] for c in CRITERIA]))
    means["words"] = float(np.mean([sum(t.isalpha() for t in words(s)) for s in stories]))
    return means


def _generate(
    backend: StoryLMBackend, texts: list[str], system: str, seed: int
) -> tuple[list[str], dict[str, Any]]:
    """Stories of ``system`` for ``texts`` and their cost; for rooms also the plan adherence
    and, per entity category, the off-plan mentions of the sections."""
    backend.reseed(seed)
    backend.generated = backend.truncated = backend.calls = 0
    started, adherence, off_plan = time.perf_counter(), None, None
    if system == "e2e":
        stories = end_to_end(texts, backend)
    else:
        orchestrator = FixedOrder() if system == "agents" else ShuffledPlanning(seed)
        rooms = run_agents_room(texts, backend, orchestrator=orchestrator)
        stories = [r.story for r in rooms]
        plans = [r.pad.render((PREMISE, *world.PLANNING)) for r in rooms]
        adherence = float(
            np.mean([plan_adherence(p, s) for p, s in zip(plans, stories, strict=True)])
        )
        off_plan = dict.fromkeys(LEXICON, 0)
        for plan, story in zip(plans, stories, strict=True):
            planned = mentions(words(plan))
            for category, found in mentions(words(story)).items():
                off_plan[category] += sum(e not in planned[category] for e in found)
    cost = {
        "seconds": time.perf_counter() - started,
        "tokens_per_story": backend.generated / len(texts),
        "truncated": backend.truncated,
        "backend_calls": backend.calls,
        "plan_adherence": adherence,
        "off_plan_mentions": off_plan,
    }
    return stories, cost


def run_study(
    config: StoryLMConfig | None = None, premises: int = 40, show_progress: bool = True
) -> dict[str, Any]:
    """Train (or load) the story LM and compare the systems on ``premises`` test premises."""
    import torch

    from edgekit.progress import step_progress

    torch.set_num_threads(1)
    config = config or StoryLMConfig()
    test = world.split_premises(config.test_premises, config.seed)[1][:premises]
    texts = [p.text() for p in test]
    rng = random.Random(config.seed + 1)
    references = [world.reference_story(p, world.sample_plan(p, rng)) for p in test]
    target = round(float(np.mean([sum(t.isalpha() for t in words(s)) for s in references])))
    judge = CriteriaJudge(target_words=target)
    systems = ("agents", "agents (shuffled planning)", "e2e")
    with step_progress(
        "agents-room study", 1 + len(DECODINGS) * len(systems), show_progress
    ) as step:
        step("train story LM (cached)")
        trained = train_cached(config)
        backend = StoryLMBackend.from_module(trained.model)
        decodings: dict[str, Any] = {}
        for decoding, temperature in DECODINGS.items():
            backend.temperature = temperature
            stories, rows = {}, {}
            for system in systems:
                step(f"{decoding}: {system}")
                stories[system], cost = _generate(backend, texts, system, config.seed)
                rows[system] = _mean_scores(stories[system], test, target) | cost
            pairs = [
                judge_pair(judge, p, a, b)
                for p, a, b in zip(test, stories["agents"], stories["e2e"], strict=True)
            ]
            criteria_wins = {
                c: float(
                    np.mean([(r.forward.votes[c] > 0) - (r.forward.votes[c] < 0) for r in pairs])
                )
                for c in CRITERIA
            }
            shuffled = [
                judge_pair(judge, p, a, b)
                for p, a, b in zip(
                    test, stories["agents (shuffled planning)"], stories["e2e"], strict=True
                )
            ]
            decodings[decoding] = {
                "rows": rows,
                "agents_vs_e2e": win_rate(pairs),
                "shuffled_vs_e2e": win_rate(shuffled),
                "criterion_margin": criteria_wins,
                "examples": {s: stories[s][0] for s in systems},
            }
    return {
        "config": asdict(config),
        "lm": {
            "final_loss": trained.final_loss,
            "train_pairs": trained.train_pairs,
            "train_seconds": trained.seconds,
            "cached": trained.cached,
        },
        "premises": len(test),
        "target_words": target,
        "reference": _mean_scores(references, test, target),
        "reference_example": references[0],
        "premise_example": texts[0],
        "decodings": decodings,
    }


def print_table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    console = wide_console()
    table = Table(
        title=f"Agents' Room vs end-to-end, same story LM, {report['premises']} held-out premises "
        "(criteria in [0, 1], higher is better)"
    )
    short = {
        "premise_coverage": "premise cov.",
        "character_consistency": "char. cons.",
        "setting_consistency": "setting cons.",
        "plot_consistency": "plot cons.",
        "structure": "structure",
        "non_repetition": "non-rep.",
        "length": "length",
    }
    for col in (
        "decoding",
        "system",
        *short.values(),
        "overall",
        "plan adh.",
        "words",
        "LM tokens",
        "trunc.",
        "s",
    ):
        table.add_column(col, justify="left" if col in ("decoding", "system") else "right")
    ref = report["reference"]
    table.add_row(
        "-",
        "reference (template)",
        *(f"{ref[c]:.3f}" for c in CRITERIA),
        f"{ref['overall']:.3f}",
        "-",
        f"{ref['words']:.0f}",
        "-",
        "-",
        "-",
    )
    for decoding, block in report["decodings"].items():
        for system, r in block["rows"].items():
            table.add_row(
                decoding,
                system,
                *(f"{r[c]:.3f}" for c in CRITERIA),
                f"{r['overall']:.3f}",
                "-" if r["plan_adherence"] is None else f"{r['plan_adherence']:.3f}",
                f"{r['words']:.0f}",
                f"{r['tokens_per_story']:.0f}",
                str(r["truncated"]),
                f"{r['seconds']:.0f}",
            )
    console.print(table)
    wins = Table(
        title="Pairwise criteria judge, both orders (a win needs both orders to agree; ties count half)"
    )
    for col in (
        "decoding",
        "pair",
        "wins",
        "ties",
        "losses",
        "win rate",
        "sign-test p",
        "position-consistent",
    ):
        wins.add_column(col, justify="left" if col in ("decoding", "pair") else "right")
    for decoding, block in report["decodings"].items():
        for pair, key in (
            ("agents vs e2e", "agents_vs_e2e"),
            ("agents (shuffled) vs e2e", "shuffled_vs_e2e"),
        ):
            w = block[key]
            wins.add_row(
                decoding,
                pair,
                str(w["wins"]),
                str(w["ties"]),
                str(w["losses"]),
                f"{w['win_rate']:.3f}",
                f"{w['sign_test_p']:.3f}",
                f"{w['position_consistency']:.2f}",
            )
    console.print(wins)
    votes = Table(
        title="Criterion votes of the judge, agents vs e2e: share of premises agents win minus share they lose"
    )
    votes.add_column("decoding")
    for c in CRITERIA:
        votes.add_column(short[c], justify="right")
    for decoding, block in report["decodings"].items():
        votes.add_row(decoding, *(f"{block['criterion_margin'][c]:+.3f}" for c in CRITERIA))
    console.print(votes)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Mean criteria per system (one panel per decoding) and win/tie/loss bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    decodings = report["decodings"]
    fig, axes = plt.subplots(1, len(decodings) + 1, figsize=(6 * len(decodings) + 4, 4.5))
    x = np.arange(len(CRITERIA))
    for ax, (decoding, block) in zip(axes, decodings.items(), strict=False):
        series = [("reference", report["reference"])] + list(block["rows"].items())
        width = 0.8 / len(series)
        for i, (name, row) in enumerate(series):
            ax.bar(
                x + (i - (len(series) - 1) / 2) * width,
                [row[c] for c in CRITERIA],
                width,
                label=name,
            )
        ax.set_xticks(x, [c.replace("_", "\n") for c in CRITERIA], fontsize=7)
        ax.set(ylim=(0, 1.05), title=f"criteria ({decoding})")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    ax = axes[-1]
    labels, bottoms = [], None
    results = [block["agents_vs_e2e"] for block in decodings.values()]
    labels = [f"agents vs e2e\n{d}" for d in decodings]
    bottoms = np.zeros(len(results))
    for key, colour in (("wins", "tab:green"), ("ties", "tab:gray"), ("losses", "tab:red")):
        values = np.array([r[key] for r in results], dtype=float)
        ax.bar(labels, values, bottom=bottoms, color=colour, label=f"agents {key}")
        bottoms += values
    ax.set(title="pairwise judge (both orders)", ylabel="premises")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def experiment(
    out: Path, show_progress: bool = True, config: StoryLMConfig | None = None
) -> dict[str, Any]:
    """Run the study, print its tables, write ``report.json`` and ``agents_room.png`` under ``out``."""
    return write_study(
        run_study(config, show_progress=show_progress), out, print_table, plot, "agents_room.png"
    )


def run(card: AgentsRoomCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval agents-room`` (``edgekit.study.Study``), with the card's config."""
    return experiment(Path(out), show_progress, card.config)
