"""A 3x5 bitmap font drawn by hand (digits and capital letters) and a text renderer.

Each glyph is five rows of three pixels; a rendered character takes a (5 * scale, 4 * scale)
cell (one blank column of spacing). ``render_text`` stamps a string into a float image.
"""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError

_ROWS: dict[str, tuple[str, str, str, str, str]] = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("##.", "..#", ".#.", "#..", "###"),
    "3": ("##.", "..#", ".#.", "..#", "##."),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "##.", "..#", "##."),
    "6": (".##", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", ".#.", ".#.", ".#."),
    "8": ("###", "#.#", ".#.", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "##."),
    "A": (".#.", "#.#", "###", "#.#", "#.#"),
    "B": ("##.", "#.#", "##.", "#.#", "##."),
    "C": (".##", "#..", "#..", "#..", ".##"),
    "D": ("##.", "#.#", "#.#", "#.#", "##."),
    "E": ("###", "#..", "##.", "#..", "###"),
    "F": ("###", "#..", "##.", "#..", "#.."),
    "G": (".##", "#..", "#.#", "#.#", ".##"),
    "H": ("#.#", "#.#", "###", "#.#", "#.#"),
    "I": ("###", ".#.", ".#.", ".#.", "###"),
    "J": ("..#", "..#", "..#", "#.#", ".#."),
    "K": ("#.#", "#.#", "##.", "#.#", "#.#"),
    "L": ("#..", "#..", "#..", "#..", "###"),
    "M": ("#.#", "###", "###", "#.#", "#.#"),
    "N": ("##.", "#.#", "#.#", "#.#", "#.#"),
    "O": (".#.", "#.#", "#.#", "#.#", ".#."),
    "P": ("##.", "#.#", "##.", "#..", "#.."),
    "Q": (".#.", "#.#", "#.#", "##.", ".##"),
    "R": ("##.", "#.#", "##.", "#.#", "#.#"),
    "S": (".##", "#..", ".#.", "..#", "##."),
    "T": ("###", ".#.", ".#.", ".#.", ".#."),
    "U": ("#.#", "#.#", "#.#", "#.#", "###"),
    "V": ("#.#", "#.#", "#.#", "#.#", ".#."),
    "W": ("#.#", "#.#", "###", "###", "#.#"),
    "X": ("#.#", "#.#", ".#.", "#.#", "#.#"),
    "Y": ("#.#", "#.#", ".#.", ".#.", ".#."),
    "Z": ("###", "..#", ".#.", "#..", "###"),
}

GLYPH_H, GLYPH_W = 5, 3
CELL_W = GLYPH_W + 1  # one blank column between characters
FONT_CHARS = "".join(_ROWS)


def glyph(char: str) -> np.ndarray:
    """The (5, 3) float32 bitmap of ``char`` (1 = ink)."""
    if char not in _ROWS:
        raise InputError(f"the bitmap font has no glyph for {char!r}; it has {FONT_CHARS}")
    return np.array([[c == "#" for c in row] for row in _ROWS[char]], dtype=np.float32)


def text_size(text: str, scale: int = 1) -> tuple[int, int]:
    """(height, width) in pixels of ``text`` rendered at ``scale`` (no trailing spacing)."""
    return GLYPH_H * scale, (CELL_W * len(text) - 1) * scale


def render_text(image: np.ndarray, text: str, top: int, left: int, scale: int = 1) -> np.ndarray:
    """Stamp ``text`` into ``image`` (H, W) float32 in place (max with the ink); returns it.

    Raises InputError when the text does not fit at (top, left) or ``scale`` < 1.
    """
    if scale < 1:
        raise InputError(f"text scale must be an integer >= 1, got {scale}")
    h, w = text_size(text, scale)
    if top < 0 or left < 0 or top + h > image.shape[0] or left + w > image.shape[1]:
        raise InputError(
            f"text {text!r} ({h}x{w} px at scale {scale}) does not fit at ({top}, {left}) "
            f"in a {image.shape[0]}x{image.shape[1]} image"
        )
    for i, char in enumerate(text):
        bitmap = np.kron(glyph(char), np.ones((scale, scale), np.float32))
        x = left + i * CELL_W * scale
        region = image[top : top + h, x : x + GLYPH_W * scale]
        np.maximum(region, bitmap, out=region)
    return image
