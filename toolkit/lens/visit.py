"""VisiT: a training-free capture-quality indicator computed by the deployed classifier itself.

For a batch of candidate captures of one scene, the target model scores each capture from its own
softmax: ``top1`` = max_c softmax(z)_c (the Lens paper's Q(x)), ``entropy`` = minus the entropy
normalised by log(C) (in [-1, 0], higher = more confident), ``margin`` = top1 - top2. Each has
a ``-flip`` form (``top1-flip``, ...; an edgekit option, not in the paper): the same score of the
softmax averaged over the capture and its mirror image, so a capture whose prediction does not
survive a left-right flip (noise or aliasing the model reads as evidence) scores lower. The
prediction stays the capture's own. All candidates (and their mirrors) go through the session
in one ``run`` call. Works on any single-input classifier
bundle: the input name and (fixed) spatial size are read from the session's ``io()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.numeric import softmax

BASE_VARIANTS = ("top1", "entropy", "margin")
FLIP = "-flip"  # suffix of the variants scored over the capture and its mirror image
VARIANTS = BASE_VARIANTS + tuple(v + FLIP for v in BASE_VARIANTS)
Preprocess = Callable[[np.ndarray, tuple[int, int]], np.ndarray]


def check_variant(variant: str) -> tuple[str, bool]:
    """(base variant, whether it scores the mirror image too) of ``variant``; a clear error
    for a name outside VARIANTS."""
    if variant not in VARIANTS:
        raise InputError(
            f"unknown VisiT variant '{variant}'; expected one of {', '.join(VARIANTS)}"
        )
    return variant.removesuffix(FLIP), variant.endswith(FLIP)


def visit_from_logits(
    logits: np.ndarray, variant: str = "top1", flipped_logits: np.ndarray | None = None
) -> np.ndarray:
    """VisiT scores (N,) float64 of ``logits`` (N, C); higher means a better capture.

    ``-flip`` variants need ``flipped_logits`` (N, C), the logits of the mirrored captures:
    the score is then read from the mean of the two softmaxes."""
    base, flip = check_variant(variant)
    probs = softmax(logits)  # (N, C)
    if flip:
        if flipped_logits is None or np.shape(flipped_logits) != probs.shape:
            raise InputError(
                f"VisiT variant '{variant}' needs the logits of the mirrored captures, "
                f"shaped like the captures' {probs.shape}; got "
                f"{None if flipped_logits is None else np.shape(flipped_logits)}"
            )
        probs = (probs + softmax(flipped_logits)) / 2
    if base == "top1":
        return probs.max(axis=1)
    if base == "margin":
        top2 = np.sort(probs, axis=1)[:, -2:]  # (N, 2) ascending
        return top2[:, 1] - top2[:, 0]
    entropy = -(probs * np.log(np.clip(probs, 1e-12, None))).sum(axis=1)  # (N,)
    return -entropy / np.log(probs.shape[1])


def input_spec(runner: Any) -> tuple[str, tuple[int, int] | None]:
    """(input name, fixed (H, W) or None when spatial axes are dynamic) of a classifier session.

    Runners without ``io()`` are assumed to take "image" (B, 3, H, W).
    """
    if not hasattr(runner, "io"):
        return "image", None
    inputs, _ = runner.io()
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        raise InputError("VisiT needs a classifier with one (B, 3, H, W) image input")
    spec = inputs[0]
    h, w = spec.shape[2], spec.shape[3]
    return spec.name, (h, w) if isinstance(h, int) and isinstance(w, int) else None


def default_preprocess(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Captures (N, H, W, 3) uint8 RGB -> (N, 3, h, w) float32 in [0, 1], resized to ``size``.

    Resizing (only when sizes differ) is bilinear and anti-aliased: scikit-image's where it is
    installed, else torch's antialiased bilinear in numpy (the lean device install).
    """
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise InputError(f"captures must be (N, H, W, 3) RGB, got shape {x.shape}")
    x = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)
    if x.shape[1:3] != tuple(size):
        try:
            from skimage.transform import resize
        except ModuleNotFoundError:  # the lean device install: torch's antialiased bilinear
            from edgekit.segmentation.arrays import resize_bilinear

            chw = resize_bilinear(x.transpose(0, 3, 1, 2), tuple(size), antialias=True)
            return np.ascontiguousarray(chw, np.float32)
        x = np.stack([resize(img, (*size, 3), order=1, anti_aliasing=True) for img in x]).astype(
            np.float32
        )
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # (N, 3, h, w)


def classify(
    runner: Any,
    images: np.ndarray | Sequence[np.ndarray],
    preprocess: Preprocess | None = None,
    output: str | None = None,
) -> np.ndarray:
    """Logits (N, C) float32 of captures ``images`` (N, H, W, 3) uint8 in one ``run`` call."""
    name, size = input_spec(runner)
    batch = as_batch(images)
    size = size or (int(batch.shape[1]), int(batch.shape[2]))
    feeds = {name: (preprocess or default_preprocess)(batch, size)}
    outputs = runner.run(feeds)
    key = output or ("logits" if "logits" in outputs else next(iter(outputs)))
    return np.asarray(outputs[key], dtype=np.float32)


def visit_scores(
    runner: Any,
    images: np.ndarray | Sequence[np.ndarray],
    variant: str = "top1",
    preprocess: Preprocess | None = None,
    return_logits: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """VisiT scores (N,) of candidate captures (N, H, W, 3) uint8 RGB of one scene.

    ``runner``: a bundle Session (or anything with ``run(feeds)``); ``preprocess`` maps
    (N, H, W, 3) captures and the model's (h, w) to its (N, 3, h, w) float32 input. With
    ``return_logits`` also returns the logits (N, C) of the captures themselves (for the
    predicted labels; a ``-flip`` variant runs the mirrored captures in the same batch).
    """
    _, flip = check_variant(variant)
    batch = as_batch(images)
    n = len(batch)
    logits = classify(runner, with_mirrors(batch) if flip else batch, preprocess)
    scores = visit_from_logits(logits[:n], variant, logits[n:] if flip else None)
    return (scores, logits[:n]) if return_logits else scores


def as_batch(images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Captures as one (N, H, W, 3) array (a list of (H, W, 3) frames is stacked)."""
    return images if isinstance(images, np.ndarray) else np.stack(list(images))


def with_mirrors(images: np.ndarray) -> np.ndarray:
    """Captures (N, H, W, 3) followed by their left-right mirror images: (2N, H, W, 3)."""
    return np.concatenate([images, images[:, :, ::-1]])


def best_index(scores: np.ndarray) -> int:
    """Index of the highest score; ties go to the lower index (``np.argmax`` semantics)."""
    return int(np.argmax(np.asarray(scores)))


def fused_prediction(
    preds: np.ndarray, scores: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """VisiT-weighted vote over candidate captures: each capture votes for its predicted class
    with its VisiT score, the class with the most weight wins (ties: the lower class index).

    ``preds`` (..., N) int predicted classes, ``scores`` (..., N) VisiT scores, ``mask``
    (..., N) bool, the captures that take part (default: all). Returns (...) int classes."""
    preds, scores = np.asarray(preds), np.asarray(scores, dtype=np.float64)
    if preds.shape != scores.shape:
        raise ValueError(f"preds {preds.shape} and scores {scores.shape} must have one shape")
    weights = scores if mask is None else np.where(mask, scores, 0.0)
    classes = int(preds.max()) + 1 if preds.size else 1
    flat_preds = preds.reshape(-1, preds.shape[-1])
    flat_votes = np.zeros((flat_preds.shape[0], classes))
    rows = np.repeat(np.arange(flat_preds.shape[0]), flat_preds.shape[1])
    np.add.at(flat_votes, (rows, flat_preds.reshape(-1)), weights.reshape(-1))
    return flat_votes.argmax(-1).reshape(preds.shape[:-1])
