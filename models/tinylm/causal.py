"""The causal-LM interface decoders run on, over torch or over any edgekit runtime Session.

A backend is a function ``(input_ids (B, S) int64, attention_mask (B, S) int64) -> logits
(B, S, V)`` on numpy (full-sequence re-run, right padding). ``CausalLM`` turns it into
next-token log-probabilities for a batch of prefixes and counts its work: ``calls`` (graph
invocations) and ``rows`` (sequences run: LM forward passes, the unit decoding costs are
measured in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from edgekit.errors import InputError
from edgekit.models.tinylm.tokens import PAD_ID

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from edgekit.card import Runner

Backend = Callable[[np.ndarray, np.ndarray], np.ndarray]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of (..., V) logits, float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def pad(prefixes: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids (B, S) int64, attention_mask (B, S) int64), right-padded with PAD_ID."""
    length = max(len(p) for p in prefixes)
    ids = np.full((len(prefixes), length), PAD_ID, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, prefix in enumerate(prefixes):
        ids[row, : len(prefix)] = prefix
        mask[row, : len(prefix)] = 1
    return ids, mask


class CausalLM:
    """Next-token distributions of a causal LM backend, with a work counter.

    ``max_len`` is the longest sequence the backend accepts (its position table).
    """

    def __init__(self, backend: Backend, max_len: int, name: str = "lm") -> None:
        self.backend, self.max_len, self.name = backend, int(max_len), name
        self.calls = 0
        self.rows = 0

    def next_log_probs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """log P(next token | prefix) (B, V) float64 for each prefix (one backend call)."""
        if not prefixes or any(len(p) == 0 for p in prefixes):
            raise InputError("next_log_probs needs at least one non-empty prefix")
        longest = max(len(p) for p in prefixes)
        if longest > self.max_len:
            raise InputError(f"prefix of {longest} tokens is longer than the LM's {self.max_len}")
        ids, mask = pad(prefixes)
        logits = np.asarray(self.backend(ids, mask))  # (B, S, V)
        self.calls += 1
        self.rows += len(prefixes)
        last = mask.sum(axis=1) - 1  # (B,) index of each prefix's last real token
        return log_softmax(logits[np.arange(len(prefixes)), last])

    def reset_counter(self) -> None:
        self.calls = 0
        self.rows = 0


def torch_backend(module: nn.Module) -> Backend:
    """Backend running a torch module ``(ids, mask) -> logits`` under inference mode."""
    import torch

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

    return run


def runner_backend(runner: Runner, output: str = "logits") -> Backend:
    """Backend over an edgekit runtime Session (or any ``run(feeds) -> outputs``)."""

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out: Mapping[str, np.ndarray] = runner.run({"input_ids": ids, "attention_mask": mask})
        return np.asarray(out[output], dtype=np.float32)

    return run
