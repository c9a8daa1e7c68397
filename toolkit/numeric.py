"""Small numeric helpers shared by cards and applications (numpy only)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``logits`` (N, C) -> (N, C) float64."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    n: int,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile-bootstrap ``level`` interval of ``statistic`` over ``n`` test items.

    ``statistic(idx)`` gets an index array (n,) drawn with replacement and returns the metric
    of those items (so paired metrics, e.g. F1 of predictions and labels or a difference
    between two methods on the same items, resample both sides together). Resamples where the
    statistic is not finite (e.g. one class only) are dropped.
    """
    if n < 1:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = np.array([statistic(rng.integers(0, n, size=n)) for _ in range(resamples)])
    draws = draws[np.isfinite(draws)]
    if draws.size == 0:
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)
