"""The shipped sentence-pair set (``sts_pairs.tsv``), written for this repository.

Each row is a pair of English sentences with a graded similarity (0 = unrelated .. 5 = same
meaning) and a binary paraphrase label. The set mixes paraphrases, related-but-different pairs,
unrelated pairs, negations and near-miss edits (swapped roles, changed times, numbers or
objects), across everyday topics (travel, food, weather, sport, health, science, money, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PAIRS_FILE = Path(__file__).with_name("sts_pairs.tsv")
COLUMNS = ("sentence1", "sentence2", "score", "paraphrase")


@dataclass(frozen=True)
class SentencePair:
    """One evaluation pair: two sentences, gold similarity in [0, 5], paraphrase label 0/1."""

    sentence1: str
    sentence2: str
    score: float
    paraphrase: int


@lru_cache(maxsize=1)
def load_pairs(path: str | None = None) -> tuple[SentencePair, ...]:
    """All pairs of the TSV at ``path`` (default: the shipped file); ``#`` lines are comments.

    Raises ValueError naming the line for a malformed row (wrong column count, score outside
    [0, 5], label not 0/1, empty sentence).
    """
    from edgekit.tsv import tsv_rows

    file = Path(path) if path else PAIRS_FILE
    pairs: list[SentencePair] = []
    for lineno, _, cols in tsv_rows(file, [COLUMNS]):
        s1, s2, score_text, label_text = cols
        score, label = float(score_text), int(label_text)
        if not (s1.strip() and s2.strip()) or not 0.0 <= score <= 5.0 or label not in (0, 1):
            raise ValueError(f"{file}:{lineno}: malformed row {cols}")
        pairs.append(SentencePair(s1, s2, score, label))
    return tuple(pairs)


def unique_sentences(pairs: tuple[SentencePair, ...] | None = None) -> list[str]:
    """Every distinct sentence of ``pairs`` (default: the shipped set) in first-seen order."""
    seen: dict[str, None] = {}
    for pair in pairs if pairs is not None else load_pairs():
        seen.setdefault(pair.sentence1)
        seen.setdefault(pair.sentence2)
    return list(seen)
