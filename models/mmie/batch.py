"""Items -> padded arrays the judge graphs read.

Reference and answer are padded to ``max_steps`` segments. Per side: text (B, S, 384) float32
step embeddings, images (B, S, 16, 16) float32 (zeros where a step has none), mask (B, S)
float32 (1 = a real step), has_image (B, S) float32. Also query (B, 384), category (B,) int64
(index in CATEGORIES) and label (B,) int64 (the rubric score).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mmie.data import Item, Step
from edgekit.models.mmie.embed import DIM
from edgekit.models.mmie.images import SIZE
from edgekit.models.mmie.rubrics import CATEGORIES

MAX_STEPS = 6


@dataclass
class Side:
    """One padded side (reference or answer) of a batch."""

    text: np.ndarray  # (B, S, 384) float32
    images: np.ndarray  # (B, S, 16, 16) float32
    mask: np.ndarray  # (B, S) float32
    has_image: np.ndarray  # (B, S) float32

    def take(self, index: np.ndarray) -> Side:
        return Side(self.text[index], self.images[index], self.mask[index], self.has_image[index])


@dataclass
class Batch:
    """A padded batch of items (shapes in the module docstring)."""

    query: np.ndarray
    reference: Side
    answer: Side
    category: np.ndarray
    label: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    def take(self, index: np.ndarray) -> Batch:
        return Batch(
            self.query[index],
            self.reference.take(index),
            self.answer.take(index),
            self.category[index],
            self.label[index],
        )


def item_texts(items: Sequence[Item]) -> list[str]:
    """Every text a batch of ``items`` needs embedded (queries and step texts)."""
    texts = []
    for item in items:
        texts.append(item.query)
        texts += [s.text for s in (*item.reference, *item.answer)]
    return texts


def _side(
    steps_per_item: Sequence[Sequence[Step]], vectors: Mapping[str, np.ndarray], s: int
) -> Side:
    b = len(steps_per_item)
    side = Side(
        np.zeros((b, s, DIM), np.float32),
        np.zeros((b, s, SIZE, SIZE), np.float32),
        np.zeros((b, s), np.float32),
        np.zeros((b, s), np.float32),
    )
    for row, steps in enumerate(steps_per_item):
        if not 1 <= len(steps) <= s:
            raise InputError(f"an answer or reference has {len(steps)} steps; expected 1..{s}")
        for col, step in enumerate(steps):
            side.text[row, col] = vectors[step.text]
            side.mask[row, col] = 1.0
            if step.image is not None:
                if step.image.shape != (SIZE, SIZE):
                    raise InputError(
                        f"step images must be ({SIZE}, {SIZE}), got {step.image.shape}"
                    )
                side.images[row, col] = step.image
                side.has_image[row, col] = 1.0
    return side


def encode_items(
    items: Sequence[Item], vectors: Mapping[str, np.ndarray], max_steps: int = MAX_STEPS
) -> Batch:
    """Pad ``items`` into a Batch; ``vectors`` maps every text (``item_texts``) to (384,)."""
    if not items:
        raise InputError("encode_items needs at least one item")
    missing = [t for t in item_texts(items) if t not in vectors]
    if missing:
        raise InputError(f"{len(missing)} texts have no embedding, e.g. {missing[0]!r}")
    return Batch(
        np.stack([vectors[i.query] for i in items]).astype(np.float32),
        _side([i.reference for i in items], vectors, max_steps),
        _side([i.answer for i in items], vectors, max_steps),
        np.array([CATEGORIES.index(i.category) for i in items], np.int64),
        np.array([i.score for i in items], np.int64),
    )
