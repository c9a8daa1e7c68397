"""Labelled texts for the BingoGuard scorer and the hand-written held-out test set.

``heldout.tsv`` was written by hand for this repository (3 texts per topic x level, 165 in all,
mild wording, no operational detail), and so was the user query each response answers
(``heldout_queries.tsv``, by id). It is only ever used to measure: never for training, the
generator's filter or threshold choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from edgekit.models.bingoguard.taxonomy import check_level, load_taxonomy

HELDOUT_FILE = Path(__file__).with_name("heldout.tsv")
HELDOUT_COLUMNS = ("id", "topic", "level", "text")
HELDOUT_COLUMNS_WITH_QUERY = ("id", "topic", "level", "query", "text")


NO_TOPIC = -100  # everyday benign text: no harm topic (ignored by the topic loss)


@dataclass(frozen=True)
class Example:
    """One labelled response: topic index 0-10 (S1..S11) or NO_TOPIC, severity level 0-4, and
    the user query it answers ("" when none is known)."""

    text: str
    topic: int
    level: int
    query: str = ""

    @property
    def unsafe(self) -> int:
        """Binary label: 1 when level >= 1."""
        return int(self.level >= 1)


@lru_cache(maxsize=2)
def load_heldout(path: str | None = None) -> tuple[Example, ...]:
    """The held-out examples of the TSV at ``path`` (default: the shipped file, with the
    hand-written queries of ``heldout_queries.tsv`` joined by id).

    ``#`` lines are comments; the header is ``id topic level text`` or ``id topic level query
    text``. Raises ValueError naming the line for a malformed row (column count, unknown topic,
    level outside 0-4, empty text, repeated id).
    """
    from edgekit.models.bingoguard.queries import load_heldout_queries
    from edgekit.tsv import tsv_rows

    file = Path(path) if path else HELDOUT_FILE
    shipped_queries = load_heldout_queries() if path is None else {}
    taxonomy = load_taxonomy()
    examples: list[Example] = []
    ids: set[str] = set()
    rows = tsv_rows(file, [HELDOUT_COLUMNS, HELDOUT_COLUMNS_WITH_QUERY])
    for lineno, columns, cols in rows:
        row = dict(zip(columns, cols, strict=True))
        row_id, topic, level, text = row["id"], row["topic"], row["level"], row["text"]
        query = row.get("query", shipped_queries.get(row_id, "")).strip()
        try:
            example = Example(
                text.strip(), taxonomy.topic_index(topic), check_level(int(level)), query
            )
        except ValueError as exc:
            raise ValueError(f"{file}:{lineno}: {exc}") from exc
        if not example.text or row_id in ids:
            raise ValueError(f"{file}:{lineno}: empty text or repeated id {row_id!r}")
        ids.add(row_id)
        examples.append(example)
    return tuple(examples)


def everyday_examples() -> tuple[tuple[Example, ...], tuple[Example, ...]]:
    """Benign everyday sentences with no harm topic (level 0, NO_TOPIC): MiniLM's shipped STS
    sentences, split 80/20 (every fifth held back) into (train, check). Without them the
    scorer only ever sees benign text *about* a harm topic and flags ordinary text."""
    from edgekit.models.minilm.data import unique_sentences

    sentences = sorted(unique_sentences())
    examples = [Example(s, NO_TOPIC, 0) for s in sentences]
    return (
        tuple(e for i, e in enumerate(examples) if i % 5),
        tuple(e for i, e in enumerate(examples) if not i % 5),
    )
