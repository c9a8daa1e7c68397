"""Synthetic images with known content: shapes with their boxes, and rendered text.

Shapes are drawn into a (size, size) float32 canvas in [0, 1]: a filled "square", a filled
"circle", a "triangle" (apex up) and a "cross" (plus sign), each inside its box
(x1, y1, x2, y2), x2 / y2 exclusive, one shape per cell of a coarse layout grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mm15.font import CELL_W, render_text, text_size

SHAPES = ("square", "circle", "triangle", "cross")


@dataclass(frozen=True)
class Shape:
    """One drawn shape: its kind (one of SHAPES) and pixel box (x1, y1, x2, y2)."""

    kind: str
    box: tuple[int, int, int, int]


def shape_mask(kind: str, side: int) -> np.ndarray:
    """(side, side) bool mask of ``kind`` filling its square box."""
    if kind not in SHAPES:
        raise InputError(f"shape kind must be one of {SHAPES}, got {kind!r}")
    if side < 4:
        raise InputError(f"shapes need a side of at least 4 px, got {side}")
    yy, xx = np.mgrid[0:side, 0:side] + 0.5  # pixel centres
    c = side / 2
    if kind == "square":
        return np.ones((side, side), bool)
    if kind == "circle":
        return (yy - c) ** 2 + (xx - c) ** 2 <= c * c
    if kind == "triangle":  # apex at the top centre, base along the bottom row
        return np.abs(xx - c) <= yy / 2
    bar = max(1, side // 3)
    lo = (side - bar) // 2
    mask = np.zeros((side, side), bool)
    mask[lo : lo + bar, :] = True
    mask[:, lo : lo + bar] = True
    return mask


def shape_scene(
    rng: np.random.Generator,
    size: int,
    count: int,
    side: tuple[int, int] = (5, 7),
    cell: int = 8,
) -> tuple[np.ndarray, list[Shape]]:
    """(size, size) float32 image with ``count`` shapes of random kinds, and the shapes.

    The canvas is a layout grid of (size // cell)^2 cells; each shape takes its own cell, with
    a random side in ``side`` (<= cell - 1) at a random offset that keeps the cell's last row
    and column blank, so shapes never touch. Shapes come back sorted left to right (x1, y1).
    """
    cells = (size // cell) ** 2
    if not 1 <= count <= cells:
        raise InputError(f"a shape scene needs 1 <= count <= {cells} cells, got {count}")
    if not 4 <= side[0] <= side[1] <= cell - 1:
        raise InputError(f"shape sides must satisfy 4 <= min <= max <= cell - 1, got {side}")
    image = np.zeros((size, size), np.float32)
    shapes: list[Shape] = []
    per_row = size // cell
    for index in rng.choice(cells, count, replace=False):
        s = int(rng.integers(side[0], side[1] + 1))
        x = int(index % per_row) * cell + int(rng.integers(0, cell - s))
        y = int(index // per_row) * cell + int(rng.integers(0, cell - s))
        kind = SHAPES[int(rng.integers(len(SHAPES)))]
        image[y : y + s, x : x + s][shape_mask(kind, s)] = 1.0
        shapes.append(Shape(kind, (x, y, x + s, y + s)))
    return image, sorted(shapes, key=lambda sh: (sh.box[0], sh.box[1]))


def text_scene(
    rng: np.random.Generator, size: int, text: str, scale: int = 1
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """(size, size) float32 image with ``text`` at a random row, starting on a multiple of the
    character pitch (4 * scale px); returns the image and the text's pixel box."""
    h, w = text_size(text, scale)
    if h > size or w > size:
        raise InputError(f"text {text!r} at scale {scale} does not fit a {size}x{size} image")
    pitch = CELL_W * scale  # text starts on a character column, like a text line on a page
    x = pitch * int(rng.integers(0, (size - w) // pitch + 1))
    y = int(rng.integers(0, size - h + 1))
    box = (x, y, x + w, y + h)
    image = np.zeros((size, size), np.float32)
    render_text(image, text, box[1], box[0], scale)
    return image, box
