"""The image parts of interleaved answers: 16x16 grayscale pictures in [0, 1].

- digits: scikit-learn's handwritten digits (8x8, upsampled 2x); the first DIGIT_SPLIT samples
  feed training items, the rest held-out items, so test answers show unseen handwriting;
- shapes: procedurally drawn circle, square, triangle, cross, ring, diamond with random size,
  position, stroke and noise (the objects of situational scenes);
- progress: a stage-k-of-n sketch, n columns with the first k filled (project plans).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgekit.errors import InputError

SIZE = 16
SHAPES = ("circle", "square", "triangle", "cross", "ring", "diamond")
DIGIT_SPLIT = 1000  # digits [0, 1000) for training items, [1000, 1797) held out


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.kron(data.images / 16.0, np.ones((2, 2))).astype(np.float32)  # (1797, 16, 16)
    return images, data.target.astype(np.int64)


def digit_image(value: int, rng: np.random.Generator, held_out: bool) -> np.ndarray:
    """A handwritten ``value`` (0-9) as a (16, 16) float32 image, from the train or held-out pool."""
    if not 0 <= value <= 9:
        raise InputError(f"digit images exist for 0..9, got {value}")
    images, labels = _digits()
    pool = np.arange(len(labels))
    pool = pool[pool >= DIGIT_SPLIT] if held_out else pool[pool < DIGIT_SPLIT]
    choices = pool[labels[pool] == value]
    return images[rng.choice(choices)].copy()


def _grid() -> tuple[np.ndarray, np.ndarray]:
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    return y + 0.5, x + 0.5


def shape_image(shape: str, rng: np.random.Generator) -> np.ndarray:
    """A (16, 16) float32 drawing of ``shape`` (one of SHAPES) with random size, offset, noise."""
    if shape not in SHAPES:
        raise InputError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    y, x = _grid()
    cy, cx = SIZE / 2 + rng.uniform(-2, 2, 2)
    r = rng.uniform(4.0, 6.5)
    dy, dx = y - cy, x - cx
    stroke = rng.uniform(1.2, 2.0)
    if shape == "circle":
        mask = np.hypot(dy, dx) <= r
    elif shape == "ring":
        mask = np.abs(np.hypot(dy, dx) - r) <= stroke / 2 + 0.3
    elif shape == "square":
        mask = np.maximum(np.abs(dy), np.abs(dx)) <= r * 0.85
    elif shape == "diamond":
        mask = np.abs(dy) + np.abs(dx) <= r
    elif shape == "cross":
        mask = ((np.abs(dy) <= stroke) | (np.abs(dx) <= stroke)) & (
            np.maximum(np.abs(dy), np.abs(dx)) <= r
        )
    else:  # triangle, apex up
        mask = (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.6)
    image = mask.astype(np.float32) * rng.uniform(0.7, 1.0)
    image += rng.normal(0.0, 0.05, image.shape).astype(np.float32)
    return np.clip(image, 0.0, 1.0)


def progress_image(stage: int, stages: int, rng: np.random.Generator) -> np.ndarray:
    """A (16, 16) float32 sketch of stage ``stage`` of ``stages`` (1 <= stage <= stages <= 6):
    ``stages`` columns along a base line, the first ``stage`` filled to a random height."""
    if not 1 <= stages <= 6 or not 1 <= stage <= stages:
        raise InputError(f"progress needs 1 <= stage <= stages <= 6, got {stage} of {stages}")
    image = np.zeros((SIZE, SIZE), np.float32)
    image[SIZE - 1, :] = 0.5  # base line
    width = SIZE // stages
    for col in range(stage):
        height = int(rng.integers(8, SIZE - 1))
        left = col * width
        image[SIZE - 1 - height : SIZE - 1, left : left + max(1, width - 1)] = rng.uniform(0.7, 1.0)
    image += rng.normal(0.0, 0.05, image.shape).astype(np.float32)
    return np.clip(image, 0.0, 1.0)
