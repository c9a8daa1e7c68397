"""Prompts for sam2-edge: sampled ones for training and packing clicks / boxes into tensors.

A prompt for one object is (points (N, 2) float32 pixels (x, y), labels (N,) int64) with the
SAM labels: 1 positive click, 0 negative click, 2 / 3 box top-left / bottom-right corner.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgekit.errors import InputError

PAD_LABEL = -1


def click_prompt(clicks: Sequence[tuple[int, int, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """Clicks [(x, y, positive), ...] -> points (N, 2) float32, labels (N,) int64."""
    if not clicks:
        raise InputError("a click prompt needs at least one click")
    points = np.array([[x, y] for x, y, _ in clicks], np.float32)
    labels = np.array([1 if positive else 0 for _, _, positive in clicks], np.int64)
    return points, labels


def box_prompt(box: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Box (x0, y0, x1, y1) in pixels -> points (2, 2) float32, labels [2, 3]."""
    x0, y0, x1, y1 = (float(v) for v in box)
    if x1 < x0 or y1 < y0:
        raise InputError(f"a box is (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1, got {box}")
    return np.array([[x0, y0], [x1, y1]], np.float32), np.array([2, 3], np.int64)


def mask_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight box (x0, y0, x1, y1) of a non-empty (H, W) mask."""
    rows, cols = np.nonzero(mask)
    if len(rows) == 0:
        raise InputError("cannot take the box of an empty mask")
    return int(cols.min()), int(rows.min()), int(cols.max()), int(rows.max())


def pad_prompts(
    prompts: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """Stack prompts of different lengths -> points (B, N, 2), labels (B, N) padded with -1."""
    n = max(len(labels) for _, labels in prompts)
    points = np.zeros((len(prompts), n, 2), np.float32)
    labels = np.full((len(prompts), n), PAD_LABEL, np.int64)
    for i, (p, lab) in enumerate(prompts):
        points[i, : len(lab)] = p
        labels[i, : len(lab)] = lab
    return points, labels


# ---- sampled prompts for training ------------------------------------------------------------
def random_click(rng: np.random.Generator, mask: np.ndarray) -> tuple[int, int, bool]:
    """A positive click inside ``mask`` (H, W), biased towards the interior."""
    from scipy.ndimage import distance_transform_edt

    depth = distance_transform_edt(np.pad(mask, 1))[1:-1, 1:-1]
    weights = depth.ravel() ** 2
    index = int(rng.choice(weights.size, p=weights / weights.sum()))
    y, x = divmod(index, mask.shape[1])
    return x, y, True


def noisy_box(rng: np.random.Generator, mask: np.ndarray) -> tuple[float, float, float, float]:
    """The mask's box with each side moved by up to 10% of its size (clipped to the image)."""
    x0, y0, x1, y1 = mask_box(mask)
    w, h = x1 - x0 + 1, y1 - y0 + 1
    jitter = rng.uniform(-0.1, 0.1, size=4) * np.array([w, h, w, h])
    box = np.array([x0, y0, x1, y1], np.float64) + jitter
    size = mask.shape[1] - 1, mask.shape[0] - 1
    return (
        float(np.clip(box[0], 0, size[0])),
        float(np.clip(box[1], 0, size[1])),
        float(np.clip(box[2], box[0], size[0])),
        float(np.clip(box[3], box[1], size[1])),
    )
