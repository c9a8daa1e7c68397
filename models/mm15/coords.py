"""Boxes written as text, as MM1.5 (after Ferret) does for referring and grounding.

A pixel box (x1, y1, x2, y2) with x2, y2 exclusive in a (H, W) image becomes
``"<box>a,b,c,d</box>"`` where each coordinate is normalised to an integer in [0, bins - 1]:
``round(x / W * (bins - 1))``. ``parse_box`` reads the first such span back (None when the
text holds none), ``box_iou`` scores a prediction.
"""

from __future__ import annotations

import re

import numpy as np

from edgekit.errors import InputError

BOX_RE = re.compile(r"<box>(\d+),(\d+),(\d+),(\d+)</box>")


def _check_bins(bins: int) -> None:
    if not isinstance(bins, int) or bins < 2:
        raise InputError(f"coordinate bins must be an integer >= 2, got {bins!r}")


def normalise_box(box: tuple[float, ...], size: tuple[int, int], bins: int = 100) -> list[int]:
    """Pixel box (x1, y1, x2, y2) in an image of ``size`` (H, W) -> 4 ints in [0, bins - 1]."""
    _check_bins(bins)
    if len(box) != 4:
        raise InputError(f"a box has 4 coordinates (x1, y1, x2, y2), got {len(box)}")
    h, w = size
    x1, y1, x2, y2 = box
    if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):
        raise InputError(f"box {tuple(box)} is not inside a {h}x{w} image with x1 < x2, y1 < y2")
    scale = (bins - 1) / np.array([w, h, w, h], dtype=np.float64)
    return [int(v) for v in np.rint(np.asarray(box, np.float64) * scale)]


def denormalise_box(coords: list[int], size: tuple[int, int], bins: int = 100) -> np.ndarray:
    """4 ints in [0, bins - 1] -> pixel box (4,) float64 in an image of ``size`` (H, W)."""
    _check_bins(bins)
    h, w = size
    return np.asarray(coords, np.float64) * np.array([w, h, w, h]) / (bins - 1)


def box_text(box: tuple[float, ...], size: tuple[int, int], bins: int = 100) -> str:
    """``"<box>a,b,c,d</box>"`` for a pixel box (see the module docstring)."""
    return "<box>" + ",".join(str(v) for v in normalise_box(box, size, bins)) + "</box>"


def parse_box(text: str, size: tuple[int, int], bins: int = 100) -> np.ndarray | None:
    """The first ``<box>a,b,c,d</box>`` in ``text`` as a pixel box (4,) float64, else None.

    Coordinates beyond ``bins - 1`` count as unparseable (None): a model wrote nonsense.
    """
    match = BOX_RE.search(text)
    if match is None:
        return None
    coords = [int(g) for g in match.groups()]
    if max(coords) > bins - 1:
        return None
    return denormalise_box(coords, size, bins)


def box_iou(a: np.ndarray | None, b: np.ndarray) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes; 0 when ``a`` is None or degenerate."""
    if a is None:
        return 0.0
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
    union = area - inter
    return float(inter / union) if union > 0 else 0.0
