"""Judgment generation (batched multinomial sampling and greedy decoding) and sequence
log-probabilities of judgments, the quantity DPO compares.

Generation runs over any ``NextLogits`` function ``(input_ids (B, S) int64, attention_mask (B, S)
int64) -> logits (B, V)`` of the next token after each row's last real token: the torch judge
(``JudgeNextToken``) or an edgekit runtime Session of its exported graph (``runner_next_logits``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from edgekit.errors import InputError
from edgekit.models.tinylm.causal import log_softmax, pad, runner_backend, torch_backend
from edgekit.models.tinylm.tokens import EOS_ID, PAD_ID

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from edgekit.card import Runner
    from edgekit.models.tinylm.model import TinyCausalLM

NextLogits = Callable[[np.ndarray, np.ndarray], np.ndarray]
# (prompts, rng or None for greedy) -> one continuation per prompt, EOS excluded
Decoder = Callable[[Sequence[Sequence[int]], "np.random.Generator | None"], list[list[int]]]
MAX_NEW_TOKENS = 12
CHUNK = 256  # sequences per backend call


def torch_next_logits(module: torch.nn.Module) -> NextLogits:
    """``NextLogits`` of a torch module ``(ids, mask) -> (B, V)`` under inference mode."""
    return torch_backend(module)


def runner_next_logits(runner: Runner, output: str = "next_logits") -> NextLogits:
    """``NextLogits`` over an edgekit runtime Session of the "judge" graph."""
    return runner_backend(runner, output)


def logits_decoder(next_logits: NextLogits, temperature: float = 1.0) -> Decoder:
    """A Decoder over ``next_logits`` (greedy for rng None, else sampling at ``temperature``)."""

    def decode(
        prompts: Sequence[Sequence[int]], rng: np.random.Generator | None
    ) -> list[list[int]]:
        return generate(next_logits, prompts, rng, temperature)

    return decode


def generate(
    next_logits: NextLogits,
    prompts: Sequence[Sequence[int]],
    rng: np.random.Generator | None = None,
    temperature: float = 1.0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    max_len: int = 48,
) -> list[list[int]]:
    """One continuation per prompt, EOS excluded: greedy when ``rng`` is None, else multinomial
    at ``temperature``. Continuations stop at EOS, after ``max_new_tokens`` or at ``max_len``."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InputError("generate needs at least one non-empty prompt")
    if rng is not None and temperature <= 0:
        raise InputError(f"temperature must be > 0 for sampling, got {temperature}")
    if max(len(p) for p in prompts) >= max_len:
        raise InputError(f"a prompt of {max(len(p) for p in prompts)} tokens leaves no room")
    outputs: list[list[int]] = []
    for start in range(0, len(prompts), CHUNK):
        outputs += _generate_chunk(
            next_logits, prompts[start : start + CHUNK], rng, temperature, max_new_tokens, max_len
        )
    return outputs


def _generate_chunk(
    next_logits: NextLogits,
    prompts: Sequence[Sequence[int]],
    rng: np.random.Generator | None,
    temperature: float,
    max_new_tokens: int,
    max_len: int,
) -> list[list[int]]:
    new: list[list[int]] = [[] for _ in prompts]
    live = list(range(len(prompts)))
    for _ in range(max_new_tokens):
        live = [i for i in live if len(prompts[i]) + len(new[i]) < max_len]
        if not live:
            break
        ids, mask = pad([list(prompts[i]) + new[i] for i in live])
        logits = np.asarray(next_logits(ids, mask), dtype=np.float64)  # (n, V)
        if rng is None:
            tokens = logits.argmax(axis=1)
        else:
            logp = log_softmax(logits / temperature)  # (n, V)
            cum = np.exp(logp).cumsum(axis=1)  # (n, V)
            u = rng.random(len(live))[:, None] * cum[:, -1:]
            tokens = (cum < u).sum(axis=1).clip(max=logits.shape[1] - 1)
        still = []
        for row, token in zip(live, tokens.tolist(), strict=True):
            if token == EOS_ID:
                continue
            new[row].append(int(token))
            still.append(row)
        live = still
    return new


def sequence_batch(
    prompts: Sequence[Sequence[int]], judgments: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids (B, S), attention_mask (B, S), targets (B, S)) of prompt + judgment rows;
    ``targets[b, i]`` is the token position i predicts when it is a judgment token (EOS
    included), else -100. Judgments should end with EOS to score stopping."""
    import torch

    if len(prompts) != len(judgments) or not prompts:
        raise InputError("sequence_batch needs as many (non-zero) prompts as judgments")
    rows = [list(p) + list(j) for p, j in zip(prompts, judgments, strict=True)]
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), PAD_ID, dtype=torch.long)
    mask = torch.zeros_like(ids)
    targets = torch.full_like(ids, -100)
    for b, (prompt, row) in enumerate(zip(prompts, rows, strict=True)):
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
        # position i predicts row[i + 1]; the judgment starts at len(prompt)
        targets[b, len(prompt) - 1 : len(row) - 1] = torch.tensor(row[len(prompt) :])
    return ids, mask, targets


def sequence_log_probs(
    model: TinyCausalLM, ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of log P(target tokens) per row (B,), number of target tokens per row (B,)).

    Only the target positions go through the vocabulary projection (differentiable)."""
    import torch

    hidden = model.hidden(ids, mask)  # (B, S, d)
    rows = targets != -100  # (B, S)
    logits = hidden[rows] @ model.tokens.weight.T  # (N, V)
    token_lp = torch.log_softmax(logits, dim=-1).gather(1, targets[rows][:, None])[:, 0]  # (N,)
    which = rows.nonzero()[:, 0]  # (N,) row of each target
    total = torch.zeros(ids.shape[0], dtype=token_lp.dtype).index_add(0, which, token_lp)
    return total, rows.sum(dim=1)
