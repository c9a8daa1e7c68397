"""Prompts of the streaming SAM 2 predictor (edgekit.segmentation.stream) and the checks of its input.

A ``Prompt`` is given in frame pixels; ``parse_prompt`` checks it against the frame and maps it
to the model's input square (points and box corners scaled, a mask resized and binarised).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.arrays import resize_bilinear


@dataclass
class Prompt:
    """One object's prompt in frame pixels: points (N, 2) (x, y) with labels (N,) 1 = positive,
    0 = negative, and/or a box (x0, y0, x1, y1); or a mask (H, W) at frame resolution alone."""

    points: Any = None
    labels: Any = None
    box: Any = None
    mask: Any = None


@dataclass
class ParsedPrompt:
    """A prompt in model-input coordinates (what the prompt graphs are fed)."""

    coords: np.ndarray | None = None  # (1, N, 2) model-input pixels
    labels: np.ndarray | None = None  # (1, N) int64
    mask: np.ndarray | None = None  # (S, S) float32 in {0, 1}


def check_frame(frame: Any) -> tuple[int, int]:
    """(H, W) of an (H, W, 3) uint8 RGB frame; anything else is an InputError saying what."""
    if not isinstance(frame, np.ndarray):
        raise InputError(
            f"a frame must be a numpy array (H, W, 3) uint8 RGB, got {type(frame).__name__}"
        )
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.shape[0] < 2 or frame.shape[1] < 2:
        raise InputError(f"a frame must have shape (H, W, 3) RGB, got {frame.shape}")
    if frame.dtype != np.uint8:
        raise InputError(f"a frame must be uint8 RGB (0..255), got dtype {frame.dtype}")
    return int(frame.shape[0]), int(frame.shape[1])


def parse_prompt(
    prompt: Prompt | Mapping[str, Any], hw: tuple[int, int], image_size: int
) -> ParsedPrompt:
    """``prompt`` (a Prompt or a dict of its fields) in frame pixels (frame size ``hw``) ->
    model-input coordinates at ``image_size``; a prompt outside the frame, an empty mask or a
    malformed one: InputError."""
    if isinstance(prompt, Mapping):
        unknown = set(prompt) - {"points", "labels", "box", "mask"}
        if unknown:
            raise InputError(
                f"unknown prompt fields {sorted(unknown)}; use points, labels, box, mask"
            )
        prompt = Prompt(**prompt)
    if not isinstance(prompt, Prompt):
        raise InputError(f"a prompt must be a Prompt or a dict, got {type(prompt).__name__}")
    h, w = hw
    if prompt.mask is not None:
        if prompt.points is not None or prompt.box is not None:
            raise InputError("a mask prompt cannot be combined with points or a box")
        mask = np.asarray(prompt.mask)
        if mask.shape != (h, w):
            raise InputError(
                f"a mask prompt must be (H, W) = {(h, w)} like the frame, got {mask.shape}"
            )
        if not np.any(mask):
            raise InputError("the mask prompt is empty: it must mark at least one pixel")
        mask = (mask != 0).astype(np.float32)
        if (h, w) != (image_size, image_size):
            mask = resize_bilinear(mask, (image_size, image_size), antialias=True)
            mask = (mask >= 0.5).astype(np.float32)
        return ParsedPrompt(mask=mask)
    coords, labels = [], []
    if prompt.box is not None:
        box = np.asarray(prompt.box, np.float32).reshape(-1)
        if box.shape != (4,) or box[0] > box[2] or box[1] > box[3]:
            raise InputError(
                f"a box must be (x0, y0, x1, y1) with x0 <= x1, y0 <= y1, got {prompt.box}"
            )
        check_inside(box.reshape(2, 2), hw, "box corner")
        coords.append(box.reshape(2, 2))
        labels += [G.LABEL_BOX_TOP_LEFT, G.LABEL_BOX_BOTTOM_RIGHT]
    if (prompt.points is None) != (prompt.labels is None):
        raise InputError("points and labels must be given together")
    if prompt.points is not None:
        points = np.asarray(prompt.points, np.float32)
        lab = np.asarray(prompt.labels).reshape(-1)
        if points.ndim != 2 or points.shape[1] != 2 or points.shape[0] == 0:
            raise InputError(f"points must be (N, 2) (x, y) with N >= 1, got shape {points.shape}")
        if lab.shape[0] != points.shape[0] or not np.isin(lab, (0, 1)).all():
            raise InputError(
                f"labels must be N = {points.shape[0]} values of 1 (positive) or 0, got {prompt.labels}"
            )
        check_inside(points, hw, "point")
        coords.append(points)
        labels += [int(v) for v in lab]
    if not coords:
        raise InputError("an empty prompt: give points with labels, a box, or a mask")
    xy = np.concatenate(coords, axis=0)
    xy = xy / np.array([w, h], np.float32) * np.float32(image_size)
    return ParsedPrompt(coords=xy[None].astype(np.float32), labels=np.asarray([labels], np.int64))


def check_inside(points: np.ndarray, hw: tuple[int, int], what: str) -> None:
    """InputError naming the first of ``points`` (N, 2) (x, y) outside an (H, W) = ``hw`` frame."""
    h, w = hw
    bad = (points[:, 0] < 0) | (points[:, 0] > w) | (points[:, 1] < 0) | (points[:, 1] > h)
    if np.any(bad) or not np.isfinite(points).all():
        first = points[np.argmax(bad)] if np.any(bad) else points[0]
        raise InputError(f"{what} ({first[0]:g}, {first[1]:g}) is outside the {w}x{h} frame")
