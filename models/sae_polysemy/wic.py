"""The shipped Word-in-Context style polysemy set (``wic.tsv``), written for this repository.

80 polysemous target words, each with two senses and four contexts (two per sense). Every
word gives two same-meaning pairs (label 1) and two different-meaning pairs (label 0): 320
pairs, balanced 160/160. Each row also names the sense of each context (a short gloss), so
the label can be checked against the senses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

WIC_FILE = Path(__file__).with_name("wic.tsv")
COLUMNS = ("word", "sense1", "context1", "sense2", "context2", "label")


@dataclass(frozen=True)
class WiCPair:
    """One pair: the target word in two contexts; label 1 = same meaning, 0 = different."""

    word: str
    sense1: str
    context1: str
    sense2: str
    context2: str
    label: int


def _check_row(file: Path, lineno: int, cols: list[str]) -> WiCPair:
    if len(cols) != len(COLUMNS):
        raise ValueError(f"{file}:{lineno}: expected {len(COLUMNS)} columns, got {len(cols)}")
    word, sense1, context1, sense2, context2, label_text = (c.strip() for c in cols)
    if label_text not in ("0", "1"):
        raise ValueError(f"{file}:{lineno}: label must be 0 or 1, got {label_text!r}")
    label = int(label_text)
    if not word or " " in word or not all((sense1, context1, sense2, context2)):
        raise ValueError(f"{file}:{lineno}: word must be one token and no field empty: {cols}")
    if label != int(sense1 == sense2):
        raise ValueError(f"{file}:{lineno}: label {label} contradicts senses {sense1!r}/{sense2!r}")
    pattern = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
    for context in (context1, context2):
        if not pattern.search(context):
            raise ValueError(f"{file}:{lineno}: context does not contain {word!r}: {context!r}")
    return WiCPair(word, sense1, context1, sense2, context2, label)


@lru_cache(maxsize=2)
def load_wic(path: str | None = None) -> tuple[WiCPair, ...]:
    """All pairs of the TSV at ``path`` (default: the shipped file); ``#`` lines are comments.

    Raises ValueError naming the line for a malformed row: wrong column count, a label that
    is not 0/1 or contradicts the two senses, or a context without the target word.
    """
    from edgekit.tsv import tsv_rows

    file = Path(path) if path else WIC_FILE
    pairs: list[WiCPair] = []
    for lineno, _, cols in tsv_rows(file, [COLUMNS]):
        pairs.append(_check_row(file, lineno, cols))
    return tuple(pairs)


def all_contexts(pairs: tuple[WiCPair, ...] | None = None) -> list[str]:
    """Every distinct context of ``pairs`` (default: the shipped set), first-seen order."""
    seen: dict[str, None] = {}
    for pair in pairs if pairs is not None else load_wic():
        seen.setdefault(pair.context1)
        seen.setdefault(pair.context2)
    return list(seen)
