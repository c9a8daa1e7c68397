"""Con-J's contrastive selection, independent of how judgments are represented.

``select_contrastive`` is Con-J's data step (repeated
sampling, hint-driven sampling where the samples hold no positive / no negative, one (positive,
negative) choice per preference pair, the statistics) with the judge abstracted away: ``draw``
samples judgments of (pair index, hint) requests and ``verdict`` reads one judgment's verdict. The
in-repo TinyCausalLM judge (WordPiece ids, ``contrastive.py``) and a transformers causal LM
(``hf_judge.py``) both use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from edgekit.errors import InputError
from edgekit.models.con_j.prefs import PrefPair

J = TypeVar("J")
Request = tuple[int, str | None]  # (preference pair index, hint "a" | "b" | None)


@dataclass
class Choice(Generic[J]):
    """The (chosen, rejected) judgments kept for preference pair ``index``; sources are
    "sampled" (repeated sampling) or "hint" (hint-driven)."""

    index: int
    chosen: J
    rejected: J
    chosen_source: str
    rejected_source: str


def worse_label(pair: PrefPair) -> str:
    """The label ("a" | "b") of the worse answer of ``pair``."""
    return "b" if pair.better == "a" else "a"


def select_contrastive(
    pairs: Sequence[PrefPair],
    draw: Callable[[list[Request], np.random.Generator], Sequence[J]],
    verdict: Callable[[J, PrefPair], str | None],
    rng: np.random.Generator,
    samples: int = 8,
    hint_samples: int = 4,
) -> tuple[list[Choice[J]], dict[str, float]]:
    """Contrastive choices for ``pairs`` and statistics of how they were found.

    ``draw(requests, rng)`` returns one sampled judgment per request, in order (first all
    ``samples`` plain requests of every pair, then ``hint_samples`` hinted requests of every
    pair lacking a positive, then of every pair lacking a negative). A judgment is positive
    when ``verdict`` names the better answer, negative otherwise (wrong or no verdict).
    Statistics: ``sampled_accuracy`` (share of plain samples judged right), counts of kept
    pairs whose positive / negative came from sampling or a hint, and ``dropped`` pairs."""
    if samples < 1 or hint_samples < 0:
        raise InputError(
            f"samples must be >= 1 and hint_samples >= 0, got {samples}, {hint_samples}"
        )
    if not pairs:
        raise InputError("contrastive selection needs at least one preference pair")
    drawn = list(draw([(i, None) for i in range(len(pairs)) for _ in range(samples)], rng))
    if len(drawn) != len(pairs) * samples:
        raise InputError(f"draw returned {len(drawn)} judgments for {len(pairs) * samples}")
    pos: list[list[J]] = []
    neg: list[list[J]] = []
    for i, pair in enumerate(pairs):
        chunk = drawn[i * samples : (i + 1) * samples]
        pos.append([j for j in chunk if verdict(j, pair) == pair.better])
        neg.append([j for j in chunk if verdict(j, pair) != pair.better])
    sampled_right = sum(len(p) for p in pos) / (len(pairs) * samples)
    source_pos = ["sampled" if p else "hint" for p in pos]
    source_neg = ["sampled" if n else "hint" for n in neg]
    wants = [(i, "pos") for i in range(len(pairs)) if not pos[i]]
    wants += [(i, "neg") for i in range(len(pairs)) if not neg[i]]
    if wants and hint_samples:
        requests: list[Request] = [
            (i, pairs[i].better if kind == "pos" else worse_label(pairs[i]))
            for i, kind in wants
            for _ in range(hint_samples)
        ]
        hinted = list(draw(requests, rng))
        if len(hinted) != len(requests):
            raise InputError(f"draw returned {len(hinted)} judgments for {len(requests)}")
        for w, (i, kind) in enumerate(wants):
            chunk = hinted[w * hint_samples : (w + 1) * hint_samples]
            right = [j for j in chunk if verdict(j, pairs[i]) == pairs[i].better]
            if kind == "pos":
                pos[i] = right
            else:
                neg[i] = [j for j in chunk if verdict(j, pairs[i]) != pairs[i].better]
    out: list[Choice[J]] = []
    for i in range(len(pairs)):
        if not pos[i] or not neg[i]:
            continue
        chosen = pos[i][int(rng.integers(len(pos[i])))]
        rejected = neg[i][int(rng.integers(len(neg[i])))]
        out.append(Choice(i, chosen, rejected, source_pos[i], source_neg[i]))
    kept = {o.index for o in out}
    stats = {
        "preference_pairs": float(len(pairs)),
        "samples_per_pair": float(samples),
        "sampled_accuracy": float(sampled_right),
        "positive_sampled": float(sum(s == "sampled" for s in source_pos)),
        "positive_hint": float(sum(s == "hint" and i in kept for i, s in enumerate(source_pos))),
        "negative_sampled": float(sum(s == "sampled" for s in source_neg)),
        "negative_hint": float(sum(s == "hint" and i in kept for i, s in enumerate(source_neg))),
        "contrastive_pairs": float(len(out)),
        "dropped": float(len(pairs) - len(out)),
    }
    return out, stats
