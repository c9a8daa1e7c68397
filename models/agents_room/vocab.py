"""A compact vocabulary over MiniLM's WordPiece ids: the tokens the story world can produce.

Text is tokenised with MiniLM's WordPiece tokenizer (``edgekit.models.tinylm.tokens.encode``); the
few hundred WordPiece ids the world's templates and lexicons use are renumbered 0..K-1 so the
story LM's output layer is K wide instead of 30522 (training in minutes on one CPU thread).
Compact ids 0-3 are [PAD], [UNK], [CLS], [SEP]; [SEP] doubles as end of text. A WordPiece id
outside the vocabulary encodes as [UNK].
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from edgekit.errors import InputError

PAD, UNK, CLS, SEP = 0, 1, 2, 3
EOS = SEP
_WORDPIECE_SPECIALS = (0, 100, 101, 102)  # [PAD] [UNK] [CLS] [SEP] in MiniLM's vocabulary


class CompactVocab:
    """WordPiece ids <-> compact ids; ``wordpiece[i]`` is the WordPiece id of compact id i."""

    def __init__(self, wordpiece: Sequence[int]) -> None:
        ids = [int(i) for i in wordpiece]
        if tuple(ids[:4]) != _WORDPIECE_SPECIALS or len(set(ids)) != len(ids):
            raise InputError(
                "a compact vocabulary starts with the WordPiece ids [0, 100, 101, 102] "
                "([PAD] [UNK] [CLS] [SEP]) and lists each id once"
            )
        self.wordpiece = ids
        self._compact = {wp: i for i, wp in enumerate(ids)}

    def __len__(self) -> int:
        return len(self.wordpiece)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CompactVocab:
        """The specials, then every WordPiece id of ``texts`` in ascending id order."""
        from edgekit.models.tinylm.tokens import encode

        seen = {i for text in texts for i in encode(text)} - set(_WORDPIECE_SPECIALS)
        return cls([*_WORDPIECE_SPECIALS, *sorted(seen)])

    def encode(self, text: str) -> list[int]:
        """Compact ids of ``text`` (no [CLS]/[SEP]); unknown pieces become UNK."""
        from edgekit.models.tinylm.tokens import encode

        return [self._compact.get(i, UNK) for i in encode(text)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of compact ``ids`` (specials dropped, "##" pieces joined)."""
        from edgekit.models.tinylm.tokens import decode

        for i in ids:
            if not 0 <= int(i) < len(self):
                raise InputError(f"compact id {int(i)} is outside the vocabulary of {len(self)}")
        return decode([self.wordpiece[int(i)] for i in ids if int(i) >= 4])


@lru_cache(maxsize=1)
def story_vocab() -> CompactVocab:
    """The vocabulary of the story world: its templates, lexicons and prompt words."""
    from edgekit.models.agents_room import world

    pieces: list[str] = ["premise plan write story : , .", "a from must face the"]
    pieces += [*world.PLANNING, *world.SECTIONS]
    for values in (world.NAMES, world.ROLES, world.PLACES, world.THREATS, world.LANDMARKS):
        pieces += values
    for values in (world.TREASURES, world.FEARS, world.TOOLS, world.TRAITS, world.SEASONS):
        pieces += values
    pieces += [word for pair in world.OUTCOMES for word in pair]
    for templates in (*world.PLAN_TEMPLATES.values(), *world.SECTION_TEMPLATES.values()):
        pieces += [re.sub(r"\{\w+\}", " ", t) for t in templates]
    return CompactVocab.from_texts(pieces)
