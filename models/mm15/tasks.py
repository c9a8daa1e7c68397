"""The data categories of the mixture and their examples (image, prompt, answer).

- "caption": image-caption pairs (pretraining): "describe" -> the shape kinds left to right.
- "ocr": text-rich images (continual pretraining, SFT): "read" -> the rendered string, 3x5
  glyphs at scale 1, small enough that the low-res overview alone blurs them.
- "count": shape QA: "count" -> the number of shapes (1..MAX_COUNT).
- "refer": referring: "<box>...</box>what" -> the kind of the shape in that box.
- "ground": grounding: "find <kind>" -> "<box>...</box>" of the one shape of that kind.

Each skill is measured on the category of the same name; ``make_examples`` is deterministic in
its seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mm15.coords import box_text
from edgekit.models.mm15.scenes import SHAPES, shape_scene, text_scene

CATEGORIES = ("caption", "ocr", "count", "refer", "ground")
OCR_CHARS = "0123456789"
MAX_COUNT = 4


@dataclass
class Example:
    """One training / test example: image (size, size) float32 in [0, 1], prompt, answer text;
    ``target`` holds what scoring needs (the pixel box for "ground")."""

    category: str
    image: np.ndarray
    prompt: str
    answer: str
    target: dict = field(default_factory=dict)


def _example(
    category: str, rng: np.random.Generator, size: int, bins: int, ocr_len: int
) -> Example:
    if category == "ocr":
        text = "".join(OCR_CHARS[i] for i in rng.integers(0, len(OCR_CHARS), ocr_len))
        image, _ = text_scene(rng, size, text)
        return Example(category, image, "read", text)
    if category in ("caption", "count"):
        image, shapes = shape_scene(rng, size, int(rng.integers(1, MAX_COUNT + 1)))
        if category == "count":
            return Example(category, image, "count", str(len(shapes)))
        return Example(category, image, "describe", " ".join(sh.kind for sh in shapes))
    if category == "refer":
        image, shapes = shape_scene(rng, size, int(rng.integers(1, MAX_COUNT + 1)))
        shape = shapes[int(rng.integers(len(shapes)))]
        return Example(
            category, image, box_text(shape.box, (size, size), bins) + "what", shape.kind
        )
    if category == "ground":
        for _ in range(100):
            image, shapes = shape_scene(rng, size, int(rng.integers(1, MAX_COUNT + 1)))
            kinds = [sh.kind for sh in shapes]
            unique = [sh for sh in shapes if kinds.count(sh.kind) == 1]
            if unique:
                shape = unique[int(rng.integers(len(unique)))]
                answer = box_text(shape.box, (size, size), bins)
                return Example(category, image, f"find {shape.kind}", answer, {"box": shape.box})
    raise InputError(f"unknown data category {category!r}; expected one of {CATEGORIES}")


def make_examples(
    category: str, count: int, seed: int, size: int = 32, bins: int = 16, ocr_len: int = 3
) -> list[Example]:
    """``count`` examples of ``category`` on (size, size) images, deterministic in ``seed``."""
    if category not in CATEGORIES:
        raise InputError(f"unknown data category {category!r}; expected one of {CATEGORIES}")
    if count < 0:
        raise InputError(f"example count must be >= 0, got {count}")
    rng = np.random.default_rng([seed, CATEGORIES.index(category)])
    return draw_examples(category, count, rng, size, bins, ocr_len)


def draw_examples(
    category: str,
    count: int,
    rng: np.random.Generator,
    size: int = 32,
    bins: int = 16,
    ocr_len: int = 3,
) -> list[Example]:
    """``count`` fresh examples of ``category`` drawn with ``rng`` (training batches)."""
    if category not in CATEGORIES:
        raise InputError(f"unknown data category {category!r}; expected one of {CATEGORIES}")
    return [_example(category, rng, size, bins, ocr_len) for _ in range(count)]


__all__ = ["CATEGORIES", "SHAPES", "Example", "draw_examples", "make_examples"]
