"""Cached (key/value) decoding of a TinyCausalLM on torch, for training-time sampling.

The exported "judge" graph re-runs the whole sequence for every new token (one graph, no state);
here the prompt is run once and every new token attends to cached keys and values, the same maths
as ``TinyCausalLM.hidden`` (pre-norm blocks, learnt absolute positions, -1e4 masking) at about
1/S of the cost. ``generate_cached`` is a drop-in for ``generate.generate`` on a torch model; the
tests check both give the same tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from edgekit.errors import InputError
from edgekit.models.con_j.generate import Decoder
from edgekit.models.tinylm.causal import pad
from edgekit.models.tinylm.model import Block, TinyCausalLM
from edgekit.models.tinylm.tokens import EOS_ID

CHUNK = 512  # rows decoded together


def cached_decoder(lm: TinyCausalLM, temperature: float = 1.0) -> Decoder:
    """A Decoder running ``generate_cached`` on ``lm``."""

    def decode(
        prompts: Sequence[Sequence[int]], rng: np.random.Generator | None
    ) -> list[list[int]]:
        return generate_cached(lm, prompts, rng, temperature)

    return decode


def _attend(
    block: Block, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Block output for queries ``x`` (B, T, d) over cached keys/values (B, H, L, d/H)."""
    b, t, d = x.shape
    q, _, _ = block.qkv(block.norm1(x)).split(d, dim=-1)  # (B, T, d)
    q = q.reshape(b, t, block.heads, d // block.heads).transpose(1, 2)  # (B, H, T, d/H)
    scores = q @ keys.transpose(-1, -2) / math.sqrt(d // block.heads) + bias  # (B, H, T, L)
    attended = (scores.softmax(dim=-1) @ values).transpose(1, 2).reshape(b, t, d)
    x = x + block.proj(attended)
    return x + block.mlp(block.norm2(x))


def _kv(block: Block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, t, d = x.shape
    _, k, v = block.qkv(block.norm1(x)).split(d, dim=-1)
    shape = (b, t, block.heads, d // block.heads)
    return k.reshape(shape).transpose(1, 2), v.reshape(shape).transpose(1, 2)  # (B, H, T, d/H)


@torch.inference_mode()
def generate_cached(
    lm: TinyCausalLM,
    prompts: Sequence[Sequence[int]],
    rng: np.random.Generator | None = None,
    temperature: float = 1.0,
    max_new_tokens: int = 12,
) -> list[list[int]]:
    """One continuation per prompt (EOS excluded): greedy when ``rng`` is None, else
    multinomial at ``temperature``; stops at EOS, ``max_new_tokens`` or the LM's max_len."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise InputError("generate_cached needs at least one non-empty prompt")
    if rng is not None and temperature <= 0:
        raise InputError(f"temperature must be > 0 for sampling, got {temperature}")
    if max(len(p) for p in prompts) >= lm.max_len:
        raise InputError(f"a prompt of {max(len(p) for p in prompts)} tokens leaves no room")
    out: list[list[int]] = []
    for start in range(0, len(prompts), CHUNK):
        out += _chunk(lm, prompts[start : start + CHUNK], rng, temperature, max_new_tokens)
    return out


def _chunk(
    lm: TinyCausalLM,
    prompts: Sequence[Sequence[int]],
    rng: np.random.Generator | None,
    temperature: float,
    max_new_tokens: int,
) -> list[list[int]]:
    ids_np, mask_np = pad(prompts)
    ids, mask = torch.from_numpy(ids_np), torch.from_numpy(mask_np)
    b, s = ids.shape
    cap = lm.max_len
    lengths = mask.sum(dim=1)  # (B,)
    # prompt pass, exactly as TinyCausalLM.hidden, keeping every block's keys and values
    x = lm.tokens(ids) + lm.positions(torch.arange(s))[None]  # (B, S, d)
    allowed = torch.ones(s, s, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None]
    bias = torch.zeros(allowed.shape).masked_fill(~allowed, -1e4)  # (B, 1, S, S)
    caches = []
    for block in lm.blocks:
        k, v = _kv(block, x)
        keys = torch.zeros(b, block.heads, cap, k.shape[-1])
        values = torch.zeros_like(keys)
        keys[:, :, :s], values[:, :, :s] = k, v
        caches.append((keys, values))
        x = _attend(block, x, k, v, bias)
    last = lm.norm(x)[torch.arange(b), lengths - 1]  # (B, d)
    valid = torch.zeros(b, cap, dtype=torch.bool)
    valid[:, :s] = mask.bool()
    new: list[list[int]] = [[] for _ in range(b)]
    live = torch.ones(b, dtype=torch.bool)
    rows = torch.arange(b)
    for step in range(max_new_tokens):
        position = lengths + step  # (B,) where the next token goes
        live &= position < cap
        if not live.any():
            break
        logits = (last @ lm.tokens.weight.T).double()  # (B, V)
        if rng is None:
            tokens = logits.argmax(dim=1)
        else:
            probs = torch.softmax(logits.float() / temperature, dim=1)  # (B, V)
            seed = torch.Generator().manual_seed(int(rng.integers(2**62)))
            tokens = torch.multinomial(probs, 1, generator=seed)[:, 0]
        for row in live.nonzero()[:, 0].tolist():
            token = int(tokens[row])
            if token == EOS_ID:
                live[row] = False
            else:
                new[row].append(token)
        if not live.any() or step == max_new_tokens - 1:
            break
        pos = position.clamp(max=cap - 1)
        x = (lm.tokens(tokens.long()) + lm.positions(pos))[:, None]  # (B, 1, d)
        valid[rows, pos] = True
        step_bias = torch.zeros(b, 1, 1, cap).masked_fill(~valid[:, None, None], -1e4)
        for block, (keys, values) in zip(lm.blocks, caches, strict=True):
            k, v = _kv(block, x)  # (B, H, 1, d/H)
            keys[rows, :, pos], values[rows, :, pos] = k[:, :, 0], v[:, :, 0]
            x = _attend(block, x, keys, values, step_bias)
        last = lm.norm(x)[:, 0]  # (B, d)
    return new
