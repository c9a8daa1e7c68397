"""Self-generated contrastive judgment pairs (Con-J's data step).

For every training preference pair the judge samples ``samples`` judgments of the plain prompt
(repeated sampling). A judgment is positive when its verdict names the better answer, negative
otherwise (a wrong verdict, or none). When the samples hold no positive, the judge is prompted
with the right answer as a hint (``hint : a``) and a hinted judgment with the right verdict is the
rationalised positive; when they hold no negative, the wrong answer is the hint and a hinted
judgment with a wrong verdict is the negative. One (positive, negative) pair is kept per
preference pair, both scored later against the plain (hint-free) prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.con_j.contrastive_core import Request, select_contrastive
from edgekit.models.con_j.generate import Decoder
from edgekit.models.con_j.judge_format import pair_prompt, pair_verdict
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.tinylm.tokens import EOS_ID


@dataclass
class ContrastivePair:
    """Judgment token lists (EOS appended) for the preference pair ``index``; ``*_source`` is
    "sampled" (repeated sampling) or "hint" (hint-driven)."""

    index: int
    chosen: list[int]
    rejected: list[int]
    chosen_source: str
    rejected_source: str

    def to_json(self) -> dict:
        return asdict(self)


def build_contrastive(
    decode: Decoder,
    pairs: Sequence[PrefPair],
    rng: np.random.Generator,
    samples: int = 8,
    hint_samples: int = 4,
) -> tuple[list[ContrastivePair], dict[str, float]]:
    """Contrastive judgment pairs for ``pairs`` from judgments sampled by ``decode`` (called
    with ``rng``) and statistics of how they were found (``contrastive_core.select_contrastive``:
    ``sampled_accuracy``, counts of pairs whose positive / negative came from sampling or from
    a hint, ``dropped`` pairs). Judgments are WordPiece id lists; EOS is appended to the kept ones."""
    if not pairs:
        raise InputError("build_contrastive needs at least one preference pair")

    def draw(requests: list[Request], rng: np.random.Generator) -> list[list[int]]:
        return decode([pair_prompt(pairs[i], hint) for i, hint in requests], rng)

    choices, stats = select_contrastive(pairs, draw, pair_verdict, rng, samples, hint_samples)
    out = [
        ContrastivePair(
            c.index, list(c.chosen) + [EOS_ID], list(c.rejected) + [EOS_ID],
            c.chosen_source, c.rejected_source,
        )
        for c in choices
    ]  # fmt: skip
    return out, stats
