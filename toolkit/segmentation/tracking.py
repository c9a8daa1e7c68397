"""Box-based tracking metrics, as single-object tracking benchmarks (OTB, LaSOT, VOT) use them.

They need only a box per object on some frames (hand-drawn ground truth), not masks:

- **box IoU** of the predicted mask's bounding box with the ground-truth box;
- **success AUC**: the share of frames whose IoU exceeds a threshold, averaged over the
  thresholds 0, 0.05, ..., 1 (OTB's success plot, area under the curve);
- **lost share**: the share of frames where the object is present but the prediction misses
  it (IoU below ``LOST_IOU``, an empty mask included; VOT counts a failure at zero overlap);
- **absent accuracy**: on frames where the object is out of view or hidden (ground truth
  ``None``), the share where the prediction is empty too.

Boxes are ``(x0, y0, x1, y1)`` in frame pixels, exclusive of ``x1, y1`` (a mask's box covers
its pixels: ``x1 = last column + 1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgekit.errors import InputError

LOST_IOU = 0.1  # below this overlap the tracker has lost the object
SUCCESS_THRESHOLDS = np.linspace(0.0, 1.0, 21)

Box = tuple[float, float, float, float]


def mask_box(mask: np.ndarray) -> Box | None:
    """The bounding box ``(x0, y0, x1, y1)`` of an (H, W) bool mask; None when it is empty."""
    mask = np.asarray(mask, bool)
    if mask.ndim != 2:
        raise InputError(f"a mask must be (H, W), got shape {mask.shape}")
    rows = np.flatnonzero(mask.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def check_box(box: Sequence[float], hw: tuple[int, int] | None = None) -> Box:
    """``box`` as four floats with x0 < x1 and y0 < y1 (inside an (H, W) frame when ``hw``
    is given); anything else is an InputError saying what."""
    values = [float(v) for v in box]
    if len(values) != 4 or not np.all(np.isfinite(values)):
        raise InputError(f"a box is four finite numbers (x0, y0, x1, y1), got {box!r}")
    x0, y0, x1, y1 = values
    if not (x0 < x1 and y0 < y1):
        raise InputError(f"a box needs x0 < x1 and y0 < y1, got {box!r}")
    if hw is not None and (x0 < 0 or y0 < 0 or x1 > hw[1] or y1 > hw[0]):
        raise InputError(f"box {box!r} is outside the {hw[1]} x {hw[0]} frame")
    return x0, y0, x1, y1


def box_iou(a: Box | None, b: Box | None) -> float:
    """Intersection over union of two boxes; 0 when either is None (an empty prediction)."""
    if a is None or b is None:
        return 0.0
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union)


def success_auc(ious: Sequence[float]) -> float:
    """OTB's success AUC of per-frame IoUs: mean over SUCCESS_THRESHOLDS t of P(IoU > t)."""
    values = np.asarray(ious, np.float64)
    if values.size == 0:
        return float("nan")
    return float(np.mean([(values > t).mean() for t in SUCCESS_THRESHOLDS]))


def lost_share(ious: Sequence[float], threshold: float = LOST_IOU) -> float:
    """Share of frames (object present) whose IoU is below ``threshold``."""
    values = np.asarray(ious, np.float64)
    return float((values < threshold).mean()) if values.size else float("nan")


def bootstrap_ci(
    groups: Sequence[Sequence[float]], resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the pooled mean of ``groups`` (per clip, its
    per-frame values), resampling frames within each clip (the clips stay fixed)."""
    arrays = [np.asarray(g, np.float64) for g in groups if len(g)]
    if not arrays:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    total = sum(a.size for a in arrays)
    means = np.zeros(resamples)
    for a in arrays:
        picks = rng.integers(0, a.size, size=(resamples, a.size))
        means += a[picks].sum(axis=1)
    means /= total
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)
