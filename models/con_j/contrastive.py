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
from edgekit.models.con_j.generate import Decoder
from edgekit.models.con_j.judge_format import pair_prompt, pair_verdict
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.sdlg.lm import EOS_ID


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


def _worse(pair: PrefPair) -> str:
    return "b" if pair.better == "a" else "a"


def split_by_verdict(
    judgments: Sequence[Sequence[int]], pair: PrefPair
) -> tuple[list[list[int]], list[list[int]]]:
    """(positives, negatives) among ``judgments`` of ``pair``: verdict == the better answer or
    not (no verdict counts as negative)."""
    pos, neg = [], []
    for tokens in judgments:
        (pos if pair_verdict(tokens, pair) == pair.better else neg).append(list(tokens))
    return pos, neg


def build_contrastive(
    decode: Decoder,
    pairs: Sequence[PrefPair],
    rng: np.random.Generator,
    samples: int = 8,
    hint_samples: int = 4,
) -> tuple[list[ContrastivePair], dict[str, float]]:
    """Contrastive judgment pairs for ``pairs`` from judgments sampled by ``decode`` (called
    with ``rng``) and statistics of how they were found:
    ``sampled_accuracy`` (share of plain samples with the right verdict), counts of pairs
    whose positive / negative came from sampling or from a hint, and ``dropped`` pairs."""
    if samples < 1 or hint_samples < 0:
        raise InputError(
            f"samples must be >= 1 and hint_samples >= 0, got {samples}, {hint_samples}"
        )
    if not pairs:
        raise InputError("build_contrastive needs at least one preference pair")
    prompts = [pair_prompt(p) for p in pairs for _ in range(samples)]
    drawn = decode(prompts, rng)
    pos: list[list[list[int]]] = []
    neg: list[list[list[int]]] = []
    for i, pair in enumerate(pairs):
        p, n = split_by_verdict(drawn[i * samples : (i + 1) * samples], pair)
        pos.append(p)
        neg.append(n)
    sampled_right = sum(len(p) for p in pos) / (len(pairs) * samples)
    source_pos = ["sampled" if p else "hint" for p in pos]
    source_neg = ["sampled" if n else "hint" for n in neg]
    wants = [(i, "pos") for i in range(len(pairs)) if not pos[i]]
    wants += [(i, "neg") for i in range(len(pairs)) if not neg[i]]
    if wants and hint_samples:
        hinted = [
            pair_prompt(pairs[i], pairs[i].better if kind == "pos" else _worse(pairs[i]))
            for i, kind in wants
            for _ in range(hint_samples)
        ]
        drawn_hint = decode(hinted, rng)
        for w, (i, kind) in enumerate(wants):
            chunk = drawn_hint[w * hint_samples : (w + 1) * hint_samples]
            p, n = split_by_verdict(chunk, pairs[i])
            if kind == "pos":
                pos[i] = p
            else:
                neg[i] = n
    out = []
    for i in range(len(pairs)):
        if not pos[i] or not neg[i]:
            continue
        chosen = pos[i][int(rng.integers(len(pos[i])))] + [EOS_ID]
        rejected = neg[i][int(rng.integers(len(neg[i])))] + [EOS_ID]
        out.append(ContrastivePair(i, chosen, rejected, source_pos[i], source_neg[i]))
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
