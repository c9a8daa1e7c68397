"""Small numeric helpers shared by cards and applications (numpy only)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample SD / sqrt n) of per-seed ``values`` (n,).

    One value gives an SE of nan (no spread to measure), never 0.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def seed_summary(values: Sequence[float], against: Sequence[float] | None = None) -> dict:
    """Summary over seeds of one metric: ``mean``, ``se``, ``values`` and, given ``against``
    (the same metric of a baseline on the same seeds, (n,)), the paired difference
    ``diff`` = mean(values - against), its ``diff_se`` and ``wins`` (seeds where values > against).

    A difference counts as shown only where |diff| > 2 diff_se (about a 95 % interval).
    """
    mean, se = mean_se(values)
    out = {"mean": mean, "se": se, "values": [float(v) for v in values]}
    if against is not None:
        if len(against) != len(values):
            raise ValueError(f"seed_summary: {len(values)} values against {len(against)}")
        d = np.asarray(values, dtype=np.float64) - np.asarray(against, dtype=np.float64)
        out["diff"], out["diff_se"] = mean_se(d)
        out["wins"] = int((d > 0).sum())
        out["shown"] = bool(np.isfinite(out["diff_se"]) and abs(out["diff"]) > 2 * out["diff_se"])
    return out


def format_mean_se(mean: float, se: float, sign: str = "", digits: int = 3) -> str:
    """``mean ± se`` at ``digits`` decimals (``sign="+"`` shows a plus); SE "n/a" when nan."""
    spread = "n/a" if math.isnan(se) else f"{se:.{digits}f}"
    return f"{mean:{sign}.{digits}f} ± {spread}"


def format_diff(summary: dict | None, digits: int = 3) -> str:
    """A ``seed_summary`` paired difference as ``+d ± se (wins/n)``, starred where shown
    (|d| > 2 SE); "" for None."""
    if summary is None:
        return ""
    star = " *" if summary["shown"] else ""
    n = len(summary["values"])
    text = format_mean_se(summary["diff"], summary["diff_se"], "+", digits)
    return f"{text} ({summary['wins']}/{n}){star}"
