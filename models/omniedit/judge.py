"""The judge: a rubric scorer standing in for the paper's LMM (GPT-4o) rater.

Like VIEScore, it rates each (source, instruction, edited) pair on semantic consistency SC (did
the requested change happen, and nothing else?) and perceptual quality PQ (is the image clean?),
both 0..10, and reports O = sqrt(SC * PQ). It reads only the images and the instruction:

- the region R that should change: the source pixels of colour A (recolour, remove), the
  requested shape at the requested quadrant (add) or the source's background pixels
  (background), and the colour R should end up (B, the background colour, the new background);
- SC = 10 * done * clip(1 - changed_outside / 25, 0, 1), with ``done`` the share of R whose
  nearest palette colour is the expected one and ``changed_outside`` the number of pixels
  outside R that moved by more than 0.25 in some channel (25 pixels, one shape's box, of
  collateral change score 0);
- PQ = 10 * clip(1 - 5 * off, 0, 1), ``off`` the share of pixels farther than 0.15 (RGB
  distance) from every palette colour (noise, blur, half-transparent remains).

``noise`` adds N(0, noise^2) to SC and PQ before clipping: the LMM's own rating errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.omniedit.scenes import (
    BACKGROUNDS,
    OBJECT_COLOURS,
    PALETTE,
    Instruction,
    quadrant_corner,
    shape_mask,
)

CHANGED = 0.25  # a pixel "changed" when some channel moved by more than this
COLLATERAL = 25.0  # pixels of change outside the region that zero SC
OFF_PALETTE = 0.15  # RGB distance beyond which a pixel matches no palette colour


@dataclass
class JudgeScores:
    """Per pair (N,) float64 arrays: semantic consistency, perceptual quality, overall."""

    sc: np.ndarray
    pq: np.ndarray
    overall: np.ndarray


def nearest_palette(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(3, H, W) image -> (index (H, W) into PALETTE, RGB distance (H, W) to that colour)."""
    dist = np.linalg.norm(image[None] - PALETTE[:, :, None, None], axis=1)  # (K, H, W)
    return dist.argmin(axis=0), dist.min(axis=0)


def _palette_index(rgb: tuple[float, float, float]) -> int:
    return int(np.flatnonzero((np.asarray(rgb, np.float32) == PALETTE).all(axis=1))[0])


def edit_region(source: np.ndarray, instruction: Instruction) -> tuple[np.ndarray, int]:
    """(mask (H, W) bool of the pixels the edit must change, PALETTE index they must end up)."""
    index, _ = nearest_palette(source)
    size = source.shape[-1]
    bg_indices = [_palette_index(c) for c in BACKGROUNDS.values()]
    if instruction.task in ("recolour", "remove"):
        mask = index == _palette_index(OBJECT_COLOURS[str(instruction.colour_a)])
        if instruction.task == "recolour":
            return mask, _palette_index(OBJECT_COLOURS[str(instruction.colour_b)])
        counts = np.bincount(index[np.isin(index, bg_indices)], minlength=len(PALETTE))
        return mask, int(counts.argmax())
    if instruction.task == "add":
        assert instruction.quadrant is not None
        top, left = quadrant_corner(instruction.quadrant, size)
        mask = shape_mask(str(instruction.shape), size, top, left)
        return mask, _palette_index(OBJECT_COLOURS[str(instruction.colour_b)])
    if instruction.task == "background":
        mask = np.isin(index, bg_indices)
        return mask, _palette_index(BACKGROUNDS[str(instruction.background)])
    raise InputError(f"unknown task {instruction.task!r}")


def rubric(source: np.ndarray, edited: np.ndarray, instruction: Instruction) -> tuple[float, float]:
    """(SC, PQ) in [0, 10] of one pair; images (3, H, W) float in [0, 1]."""
    if source.shape != edited.shape or source.ndim != 3 or source.shape[0] != 3:
        raise InputError(
            f"judge wants source and edited as (3, H, W) images, got {source.shape} and "
            f"{edited.shape}"
        )
    region, expected = edit_region(source, instruction)
    index, dist = nearest_palette(edited)
    done = float((index[region] == expected).mean()) if region.any() else 0.0
    moved = np.abs(edited - source).max(axis=0) > CHANGED
    outside = float((moved & ~region).sum())
    sc = 10.0 * done * float(np.clip(1.0 - outside / COLLATERAL, 0.0, 1.0))
    pq = 10.0 * float(np.clip(1.0 - 5.0 * (dist > OFF_PALETTE).mean(), 0.0, 1.0))
    return sc, pq


def judge(
    source: np.ndarray,
    edited: np.ndarray,
    instructions: list[Instruction],
    noise: float = 0.0,
    seed: int = 0,
) -> JudgeScores:
    """Scores of N pairs: source / edited (N, 3, H, W) in [0, 1], one instruction each."""
    if len(source) != len(edited) or len(source) != len(instructions):
        raise InputError(
            f"judge needs as many sources, edits and instructions; got {len(source)}, "
            f"{len(edited)}, {len(instructions)}"
        )
    if noise < 0:
        raise InputError(f"judge noise must be >= 0, got {noise}")
    pairs = [rubric(s, e, i) for s, e, i in zip(source, edited, instructions, strict=True)]
    sc, pq = (np.array(v, np.float64).reshape(len(pairs)) for v in zip(*pairs, strict=True))
    if noise > 0:
        rng = np.random.default_rng(seed)
        sc = np.clip(sc + rng.normal(0.0, noise, sc.shape), 0.0, 10.0)
        pq = np.clip(pq + rng.normal(0.0, noise, pq.shape), 0.0, 10.0)
    return JudgeScores(sc, pq, np.sqrt(sc * pq))
