"""Beam search and multinomial sampling over ``CausalLM``, with sequence log-probabilities.

Generation starts after a prefix (``[CLS] question [SEP]``, or another LM's prompt) and stops
at a stop token (``stop``: EOS, or the LM vocabulary's ``stop_ids``) or after
``max_new_tokens``. A Generation's ``log_prob`` is the sum of its tokens' log-probabilities,
the stop token included when it finished (NLL = -log_prob); beam scores are these sums (no
length normalisation), so beam search stops as soon as the best finished beam scores at least
the best live one (log-probabilities only decrease).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from edgekit.models.tinylm.causal import CausalLM
from edgekit.models.tinylm.tokens import EOS_ID

STOP = frozenset((EOS_ID,))  # the in-repo LM's [SEP]


@dataclass
class Generation:
    """A generated continuation: ``tokens`` (EOS excluded), ``log_prob`` (sum, EOS included if
    ``finished``), per-token log-probs, and, when kept, the next-token log-distribution
    (V,) at each generated position (the last one is the distribution EOS was drawn from)."""

    tokens: list[int]
    log_prob: float
    token_log_probs: list[float]
    finished: bool
    distributions: list[np.ndarray] = field(default_factory=list, repr=False)


def beam_search(
    lm: CausalLM,
    prefix: Sequence[int],
    beams: int = 5,
    max_new_tokens: int = 8,
    keep_distributions: bool = False,
    stop: Collection[int] = STOP,
) -> Generation:
    """The highest-log-probability continuation of ``prefix`` found by beam search; a token
    in ``stop`` ends a beam (it is scored, not kept)."""
    live = [Generation([], 0.0, [], False)]
    finished: list[Generation] = []
    budget = min(max_new_tokens, lm.max_len - len(prefix))
    for _ in range(budget):
        log_probs = lm.next_log_probs([list(prefix) + g.tokens for g in live])  # (n, V)
        proposals = []
        for row, gen in enumerate(live):
            top = np.argpartition(-log_probs[row], beams - 1)[:beams]
            for token in top:
                proposals.append((gen.log_prob + float(log_probs[row, token]), row, int(token)))
        proposals.sort(key=lambda p: (-p[0], p[2]))
        next_live = []
        for score, row, token in proposals[:beams]:
            parent = live[row]
            dists = parent.distributions + [log_probs[row]] if keep_distributions else []
            lp = parent.token_log_probs + [float(log_probs[row, token])]
            if token in stop:
                finished.append(Generation(parent.tokens, score, lp, True, dists))
            else:
                next_live.append(Generation(parent.tokens + [token], score, lp, False, dists))
        live = next_live
        best_finished = max((g.log_prob for g in finished), default=-np.inf)
        if not live or len(finished) >= beams or best_finished >= live[0].log_prob:
            break
    candidates = finished or live
    return max(candidates, key=lambda g: g.log_prob)


def sample(
    lm: CausalLM,
    prefix: Sequence[int],
    n: int,
    rng: np.random.Generator,
    max_new_tokens: int = 8,
    temperature: float = 1.0,
    stop: Collection[int] = STOP,
) -> list[Generation]:
    """``n`` multinomial samples, run together (one backend call per step for the live ones);
    a token in ``stop`` ends a sample.

    ``log_prob`` is under the model (temperature 1), whatever ``temperature`` samples with.
    """
    gens = [Generation([], 0.0, [], False) for _ in range(n)]
    budget = min(max_new_tokens, lm.max_len - len(prefix))
    for _ in range(budget):
        live = [g for g in gens if not g.finished]
        if not live:
            break
        log_probs = lm.next_log_probs([list(prefix) + g.tokens for g in live])  # (n, V)
        scaled = log_probs / temperature
        probs = np.exp(scaled - scaled.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        for row, gen in enumerate(live):
            token = int(rng.choice(probs.shape[1], p=probs[row]))
            gen.log_prob += float(log_probs[row, token])
            gen.token_log_probs.append(float(log_probs[row, token]))
            if token in stop:
                gen.finished = True
            else:
                gen.tokens.append(token)
    return gens
