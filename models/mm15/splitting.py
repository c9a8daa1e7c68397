"""Dynamic image splitting: a grid of sub-images at full resolution plus a low-res overview.

MM1.5 (after LLaVA-NeXT / InternVL) feeds a high-resolution image as one overview (the whole
image resized to the encoder's tile size) and a grid of tiles cut from the image resized to
(rows * tile, cols * tile). ``select_grid`` picks the grid among those with at most
``max_tiles`` tiles that keeps the most of the image's resolution, then wastes the fewest
pixels (LLaVA-NeXT's ``select_best_resolution`` rule). Resizing is area averaging
(``resize_area``), which is exact block means for integer downsampling.
"""

from __future__ import annotations

import functools

import numpy as np

from edgekit.errors import InputError


def candidate_grids(max_tiles: int) -> list[tuple[int, int]]:
    """All (rows, cols) with 1 <= rows * cols <= ``max_tiles``, in (rows, cols) order."""
    if max_tiles < 1:
        raise InputError(f"max_tiles must be >= 1, got {max_tiles}")
    return [
        (r, c)
        for r in range(1, max_tiles + 1)
        for c in range(1, max_tiles + 1)
        if r * c <= max_tiles
    ]


def select_grid(height: int, width: int, tile: int, max_tiles: int) -> tuple[int, int]:
    """(rows, cols) for a (height, width) image: the most effective resolution, then least waste.

    For a grid the image is scaled by s = min(rows * tile / height, cols * tile / width) to fit;
    effective resolution = min(height * width * s^2, height * width), waste = canvas - effective.
    """
    if height < 1 or width < 1 or tile < 1:
        raise InputError(f"image size and tile must be positive, got {height}x{width}, tile {tile}")
    best, best_key = (1, 1), (-1.0, 0.0)
    for rows, cols in candidate_grids(max_tiles):
        s = min(rows * tile / height, cols * tile / width)
        effective = min(height * width * s * s, float(height * width))
        waste = rows * cols * tile * tile - effective
        key = (effective, -waste)
        if key > best_key:
            best, best_key = (rows, cols), key
    return best


@functools.lru_cache(maxsize=64)
def _area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) float32 weights: output cell i averages input span [i, i + 1) * n_in / n_out
    (cached, read-only)."""
    edges = np.arange(n_out + 1) * (n_in / n_out)
    lo, hi = edges[:-1, None], edges[1:, None]
    left, right = np.arange(n_in)[None, :], np.arange(1, n_in + 1)[None, :]
    overlap = np.clip(np.minimum(hi, right) - np.maximum(lo, left), 0.0, None)
    matrix = (overlap / overlap.sum(axis=1, keepdims=True)).astype(np.float32)
    matrix.flags.writeable = False
    return matrix


def resize_area(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W) -> (height, width) float32 by area averaging (box filter); works both ways."""
    if image.ndim != 2:
        raise InputError(f"resize_area takes a (H, W) image, got shape {image.shape}")
    rows = _area_matrix(image.shape[0], height)
    cols = _area_matrix(image.shape[1], width)
    return rows @ image.astype(np.float32) @ cols.T


def split_image(image: np.ndarray, tile: int, grid: tuple[int, int]) -> np.ndarray:
    """(H, W) -> (1 + rows * cols, tile, tile) float32: the overview, then tiles row by row."""
    rows, cols = grid
    if rows < 1 or cols < 1:
        raise InputError(f"grid must be (rows >= 1, cols >= 1), got {grid}")
    overview = resize_area(image, tile, tile)
    big = resize_area(image, rows * tile, cols * tile)
    tiles = big.reshape(rows, tile, cols, tile).transpose(0, 2, 1, 3).reshape(-1, tile, tile)
    return np.concatenate([overview[None], tiles], axis=0)


def image_tiles(image: np.ndarray, tile: int, max_tiles: int, split: bool) -> np.ndarray:
    """The encoder input of one image: ``split_image`` on the selected grid when ``split``,
    else the overview alone (1, tile, tile) float32."""
    if not split:
        return resize_area(image, tile, tile)[None]
    return split_image(image, tile, select_grid(*image.shape, tile, max_tiles))
