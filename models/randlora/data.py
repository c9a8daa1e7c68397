"""The adaptation task: sklearn's bundled digits (all ten classes), before and after a fixed pixel permutation.

A network pretrained on the 8x8 digits must be adapted to the same classes seen through a
fixed, seeded permutation of the 64 pixels. The exact fix is W1 P^T for the first layer: a
full-rank change of a pretrained weight, which a rank-q update cannot express.

Pixels are the digits' 0..16 values divided by 16: (N, 64) float32 in [0, 1], row-major.
Splits are stratified and seeded: 60 % train, 15 % validation (learning-rate choice), 25 % test.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

CLASSES = tuple(range(10))
PIXELS = 64
PERMUTATION_SEED = 7
SPLIT_SEED = 0


@dataclass(frozen=True)
class Split:
    """Inputs (N, 64) float32 in [0, 1] and labels (N,) int64 in [0, len(CLASSES))."""

    x: torch.Tensor
    y: torch.Tensor


@dataclass(frozen=True)
class Task:
    """One classification task: train, validation and test splits."""

    name: str
    train: Split
    val: Split
    test: Split


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.isin(digits.target, CLASSES)
    x = (digits.data[keep] / 16.0).astype(np.float32)  # (N, 64)
    y = np.searchsorted(np.asarray(CLASSES), digits.target[keep]).astype(np.int64)  # (N,)
    return x, y


@lru_cache(maxsize=1)
def _split_indices() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded (train, val, test) row indices."""
    _, y = _digits()
    rng = np.random.default_rng(SPLIT_SEED)
    parts: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = ([], [], [])
    for c in range(len(CLASSES)):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_train, n_val = int(0.6 * len(idx)), int(0.15 * len(idx))
        parts[0].append(idx[:n_train])
        parts[1].append(idx[n_train : n_train + n_val])
        parts[2].append(idx[n_train + n_val :])
    return tuple(np.sort(np.concatenate(p)) for p in parts)  # type: ignore[return-value]


def permutation(seed: int = PERMUTATION_SEED) -> torch.Tensor:
    """The fixed pixel permutation (64,) int64 of the adaptation task."""
    return torch.randperm(PIXELS, generator=torch.Generator().manual_seed(seed))


def _task(name: str, perm: torch.Tensor | None) -> Task:
    x, y = _digits()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    if perm is not None:
        xt = xt[:, perm]
    train, val, test = (Split(xt[i], yt[i]) for i in _split_indices())
    return Task(name, train, val, test)


def source_task() -> Task:
    """Digits 0-4 as they are: the pretraining task."""
    return _task("digits", None)


def permuted_task(seed: int = PERMUTATION_SEED) -> Task:
    """Digits 0-4 with the pixels permuted by ``permutation(seed)``: the adaptation task."""
    return _task(f"permuted-digits-{seed}", permutation(seed))
