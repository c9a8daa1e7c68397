"""Pairwise story judges and the position-swap protocol.

``story_scores`` measures one story against its premise, each criterion in [0, 1], higher
better:

- ``premise_coverage``: share of the premise's hero, trade, town and threat the story mentions;
- ``character_consistency``: 1 / (1 + names beyond the hero and one companion + trades
  beyond the hero's and one more);
- ``setting_consistency``: 1 / (1 + towns other than the premise's + landmarks beyond one +
  seasons beyond one);
- ``plot_consistency``: 1 / (1 + threats other than the premise's + treasures, tools and
  fears beyond one each);
- ``structure``: longest subsequence of the section headers found that is in narrative
  order / max(5, headers found) (a missing, swapped or repeated section costs);
- ``non_repetition``: distinct word 4-grams / word 4-grams (headers left out);
- ``length``: min(words, target) / max(words, target) (words include headers; reference
  stories have about 90).

A story that names nothing is not inconsistent: the consistency criteria only count
contradictions, and coverage and length are what an empty story loses.

``CriteriaJudge`` votes criterion by criterion (a difference above ``margin``, 0.05 by
default, is a vote: a story a word or two longer wins nothing) and prefers the story with more
votes; it is symmetric, so swapping never changes its answer. ``BackendJudge`` asks a text
backend "which story is better" (for a real LLM through ``TransformersBackend``); such judges
have a position bias. ``judge_pair`` asks a judge twice,
stories swapped, and keeps a preference only when both orders agree: a judge that always
prefers the story shown first ends in ties, never in wins.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from edgekit.errors import InputError
from edgekit.models.agents_room.backend import TextBackend
from edgekit.models.agents_room.world import LEXICON, SECTIONS, Premise

CRITERIA = (
    "premise_coverage",
    "character_consistency",
    "setting_consistency",
    "plot_consistency",
    "structure",
    "non_repetition",
    "length",
)
#: non-premise entities one coherent story has per category (one companion, one landmark ...)
ALLOWED_EXTRA = {
    "character": 1,
    "trade": 1,
    "town": 0,
    "landmark": 1,
    "season": 1,
    "threat": 0,
    "treasure": 1,
    "tool": 1,
    "fear": 1,
}


def words(text: str) -> list[str]:
    """Lower-case word and punctuation tokens of ``text``."""
    return re.findall(r"[a-z]+|[.,:;!?]", text.lower())


def mentions(
    tokens: Sequence[str], lexicon: Mapping[str, Sequence[str]] = LEXICON
) -> dict[str, list[str]]:
    """Per lexicon category, the entities mentioned in ``tokens``, in order of appearance
    (multi-word entities such as "old tower" matched as phrases)."""
    found: dict[str, list[tuple[int, str]]] = {c: [] for c in lexicon}
    for category, forms in lexicon.items():
        for form in forms:
            parts = form.split()
            for i in range(len(tokens) - len(parts) + 1):
                if list(tokens[i : i + len(parts)]) == parts:
                    found[category].append((i, form))
    return {c: [form for _, form in sorted(hits)] for c, hits in found.items()}


def headers(tokens: Sequence[str]) -> list[int]:
    """Indices into SECTIONS of the section headers ("climax :") found, in text order."""
    found = []
    for i in range(len(tokens)):
        for index, section in enumerate(SECTIONS):
            parts = section.split()
            if list(tokens[i : i + len(parts)]) == parts and tokens[
                i + len(parts) : i + len(parts) + 1
            ] == [":"]:
                found.append(index)
    return found


def longest_increasing_run(values: Sequence[int]) -> int:
    """Length of the longest strictly increasing subsequence of ``values``."""
    best: list[int] = []
    for v in values:
        lo, hi = 0, len(best)
        while lo < hi:
            mid = (lo + hi) // 2
            if best[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        best[lo : lo + 1] = [v]
    return len(best)


def _extra(found: Sequence[str], premise_entity: str | None, category: str) -> int:
    distinct = set(found) - {premise_entity}
    return max(0, len(distinct) - ALLOWED_EXTRA[category])


def story_scores(story: str, premise: Premise, target_words: int = 90) -> dict[str, float]:
    """The criteria (module docstring) of ``story`` for ``premise``, each in [0, 1]."""
    if target_words < 1:
        raise InputError(f"target_words must be >= 1, got {target_words}")
    tokens = words(story)
    found = mentions(tokens)
    own = premise.entities()
    covered = [entity for category, entity in own.items() if entity in found[category]]
    extra = {c: _extra(found[c], own.get(c), c) for c in LEXICON}
    marks = headers(tokens)
    header_words = {w for s in SECTIONS for w in s.split()}
    body = [t for t in tokens if t.isalpha() and t not in header_words]
    grams = [tuple(body[i : i + 4]) for i in range(len(body) - 3)]
    n_words = sum(t.isalpha() for t in tokens)
    return {
        "premise_coverage": len(covered) / len(own),
        "character_consistency": 1 / (1 + extra["character"] + extra["trade"]),
        "setting_consistency": 1 / (1 + extra["town"] + extra["landmark"] + extra["season"]),
        "plot_consistency": 1
        / (1 + extra["threat"] + extra["treasure"] + extra["tool"] + extra["fear"]),
        "structure": longest_increasing_run(marks) / max(len(SECTIONS), len(marks)),
        "non_repetition": len(set(grams)) / len(grams) if grams else 0.0,
        "length": min(n_words, target_words) / max(n_words, target_words),
    }


def plan_adherence(plan: str, sections: str) -> float:
    """Share of the entity mentions in ``sections`` whose entity the ``plan`` text (premise +
    planning entries) also names in the same category; 1.0 when ``sections`` names none.
    Only a room of agents has a plan to adhere to."""
    planned = mentions(words(plan))
    written = mentions(words(sections))
    hits = [entity in planned[c] for c, found in written.items() for entity in found]
    return sum(hits) / len(hits) if hits else 1.0


@dataclass
class Verdict:
    """A judge's answer about (first, second): ``winner`` "first" | "second" | "tie"; for a
    criteria judge, per-criterion votes (+1 first, -1 second, 0 tie)."""

    winner: str
    votes: dict[str, int] = field(default_factory=dict)


class PairwiseJudge(Protocol):
    name: str

    def compare(self, premise: Premise, first: str, second: str) -> Verdict: ...


class CriteriaJudge:
    """Votes criterion by criterion; the story winning more criteria wins."""

    name = "criteria"

    def __init__(
        self, target_words: int = 90, margin: float = 0.05, criteria: Sequence[str] = CRITERIA
    ) -> None:
        unknown = sorted(set(criteria) - set(CRITERIA))
        if unknown or not criteria:
            raise InputError(
                f"criteria must be a non-empty subset of {CRITERIA}, got unknown {unknown}"
            )
        self.target_words, self.margin, self.criteria = target_words, margin, tuple(criteria)

    def compare(self, premise: Premise, first: str, second: str) -> Verdict:
        a = story_scores(first, premise, self.target_words)
        b = story_scores(second, premise, self.target_words)
        votes = {
            c: (a[c] - b[c] > self.margin) - (b[c] - a[c] > self.margin) for c in self.criteria
        }
        total = sum(votes.values())
        return Verdict("first" if total > 0 else "second" if total < 0 else "tie", votes)


class BackendJudge:
    """Asks ``backend`` "premise ... story a : ... story b : ... better story :"; an answer
    starting with "a" or "b" (after "story") is a preference, anything else a tie."""

    name = "backend"

    def __init__(self, backend: TextBackend) -> None:
        self.backend = backend

    def compare(self, premise: Premise, first: str, second: str) -> Verdict:
        prompt = (
            f"premise : {premise.text()} story a : {first} story b : {second} "
            "which story is better , a or b ? better story :"
        )
        answer = [
            w for w in words(self.backend.generate([prompt], 4)[0]) if w.isalpha() and w != "story"
        ]
        head = answer[0] if answer else ""
        return Verdict("first" if head == "a" else "second" if head == "b" else "tie")


@dataclass
class PairResult:
    """``winner`` "a" | "b" | "tie" after the swap; ``consistent``: both orders agreed."""

    winner: str
    consistent: bool
    forward: Verdict
    backward: Verdict


def judge_pair(judge: PairwiseJudge, premise: Premise, a: str, b: str) -> PairResult:
    """Ask ``judge`` about (a, b) and about (b, a); keep a winner only if both orders agree."""
    forward = judge.compare(premise, a, b)
    backward = judge.compare(premise, b, a)
    first = {"first": "a", "second": "b", "tie": "tie"}[forward.winner]
    second = {"first": "b", "second": "a", "tie": "tie"}[backward.winner]
    return PairResult(first if first == second else "tie", first == second, forward, backward)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test of wins vs losses (ties left out): P(a split at least this
    uneven | each decided pair is a fair coin)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def win_rate(results: Sequence[PairResult]) -> dict[str, float]:
    """Wins, losses and ties of story a, its win rate (ties count half), the sign-test p-value
    of wins vs losses and the share of pairs the judge answered the same way in both orders."""
    if not results:
        raise InputError("win_rate needs at least one judged pair")
    wins = sum(r.winner == "a" for r in results)
    losses = sum(r.winner == "b" for r in results)
    ties = len(results) - wins - losses
    return {
        "wins": wins,
        "losses": losses,
        "ties": ties,
        "win_rate": (wins + 0.5 * ties) / len(results),
        "sign_test_p": sign_test_p(wins, losses),
        "position_consistency": sum(r.consistent for r in results) / len(results),
    }
