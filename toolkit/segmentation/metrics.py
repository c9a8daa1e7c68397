"""Video object segmentation metrics: DAVIS / SA-V J, F and J&F, and the click protocol.

- **J** (region similarity): intersection over union of a predicted and a ground-truth mask;
  both empty counts as 1.
- **F** (contour accuracy): the F-measure of boundary precision and recall. Boundaries are the
  one-pixel maps of where a mask changes value towards its right, lower or lower-right
  neighbour (pixels past the image edge do not count). A predicted boundary pixel is correct
  when a ground-truth boundary pixel lies within a disk of radius ``ceil(0.008 x diagonal)``
  (3 px at 256x256) and vice versa. Both boundaries empty is F = 1; only one empty is F = 0.
- **J&F**: per object per frame, averaged over frames for each object, then over all objects of
  all clips; reported in percent. ``drop_first_last`` skips the first and last frame of every
  clip as the DAVIS 2017 / SA-V scripts do (the first one is the prompted frame).
- **Clicks**: the first click goes to the interior point of the object farthest from its
  boundary; each next click goes to the point farthest from the boundary of the largest error
  region (false-negative regions give a positive click, false-positive ones a negative click).
  ``interactive_iou`` returns the IoU after each click; mIoU@k averages IoU after k clicks.

Masks are boolean numpy arrays (H, W); clips are (T, H, W) per object or (T, K, H, W).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError

BOUNDARY_FRACTION = 0.008  # of the image diagonal: the DAVIS boundary tolerance

Click = tuple[int, int, bool]  # (x, y, positive)


def _check_pair(prediction: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    prediction, truth = np.asarray(prediction), np.asarray(truth)
    if prediction.shape != truth.shape:
        raise InputError(
            f"prediction shape {prediction.shape} differs from ground truth shape {truth.shape}"
        )
    return prediction.astype(bool), truth.astype(bool)


def region_similarity(prediction: np.ndarray, truth: np.ndarray) -> float:
    """J: |P & G| / |P | G| of two (H, W) masks; 1.0 when both are empty."""
    prediction, truth = _check_pair(prediction, truth)
    union = np.count_nonzero(prediction | truth)
    if union == 0:
        return 1.0
    return np.count_nonzero(prediction & truth) / union


def boundary_map(mask: np.ndarray) -> np.ndarray:
    """(H, W) bool: pixels whose value differs from the right, lower or lower-right neighbour.

    Neighbours outside the image are not compared, so the image edge is no boundary.
    """
    mask = np.asarray(mask, dtype=bool)
    edges = np.zeros_like(mask)
    edges[:, :-1] |= mask[:, :-1] != mask[:, 1:]
    edges[:-1, :] |= mask[:-1, :] != mask[1:, :]
    edges[:-1, :-1] |= mask[:-1, :-1] != mask[1:, 1:]
    return edges


def boundary_tolerance(shape: Sequence[int]) -> int:
    """Tolerance radius in pixels for an (H, W) image: ceil(0.008 x diagonal)."""
    return int(math.ceil(BOUNDARY_FRACTION * math.hypot(shape[0], shape[1])))


def _disk(radius: int) -> np.ndarray:
    offsets = np.arange(-radius, radius + 1)
    return offsets[:, None] ** 2 + offsets[None, :] ** 2 <= radius**2


def contour_accuracy(
    prediction: np.ndarray, truth: np.ndarray, tolerance: int | None = None
) -> float:
    """F: boundary F-measure of two (H, W) masks within ``tolerance`` px (default DAVIS)."""
    from scipy.ndimage import binary_dilation

    prediction, truth = _check_pair(prediction, truth)
    radius = boundary_tolerance(truth.shape) if tolerance is None else int(tolerance)
    pred_edges, true_edges = boundary_map(prediction), boundary_map(truth)
    n_pred, n_true = np.count_nonzero(pred_edges), np.count_nonzero(true_edges)
    if n_pred == 0 and n_true == 0:
        return 1.0
    if n_pred == 0 or n_true == 0:
        return 0.0
    disk = _disk(radius)
    near_true = binary_dilation(true_edges, structure=disk)
    near_pred = binary_dilation(pred_edges, structure=disk)
    precision = np.count_nonzero(pred_edges & near_true) / n_pred
    recall = np.count_nonzero(true_edges & near_pred) / n_true
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


@dataclass
class VideoScores:
    """Per-object per-frame J and F (each (K, T') float64, frames after any dropping)."""

    j: np.ndarray
    f: np.ndarray

    def object_means(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-object mean J and F over frames: two (K,) arrays."""
        return self.j.mean(axis=1), self.f.mean(axis=1)


def score_video(
    prediction: np.ndarray, truth: np.ndarray, drop_first_last: bool = False
) -> VideoScores:
    """J and F per object per frame of a clip: prediction and truth (T, K, H, W) bool."""
    prediction, truth = _check_pair(prediction, truth)
    if truth.ndim != 4:
        raise InputError(f"expected masks (T, K, H, W), got shape {truth.shape}")
    frames = range(1, truth.shape[0] - 1) if drop_first_last else range(truth.shape[0])
    if len(frames) == 0:
        raise InputError(f"a clip of {truth.shape[0]} frames has none left after dropping")
    k = truth.shape[1]
    j = np.array(
        [[region_similarity(prediction[t, o], truth[t, o]) for t in frames] for o in range(k)]
    )
    f = np.array(
        [[contour_accuracy(prediction[t, o], truth[t, o]) for t in frames] for o in range(k)]
    )
    return VideoScores(j.reshape(k, -1), f.reshape(k, -1))


def summarize(scores: Sequence[VideoScores]) -> dict[str, float]:
    """Dataset J, F, J&F in percent: per-object frame means, averaged over all objects; with
    two or more objects also "J&F_se", the standard error of J&F over objects (sample std of
    the objects' (J + F) / 2 over sqrt(objects)): how far another draw of as many objects
    could move J&F."""
    if not scores:
        raise InputError("no clips were scored")
    j = np.concatenate([s.object_means()[0] for s in scores])
    f = np.concatenate([s.object_means()[1] for s in scores])
    jm, fm = 100.0 * float(j.mean()), 100.0 * float(f.mean())
    out = {"J": jm, "F": fm, "J&F": (jm + fm) / 2.0, "objects": float(len(j))}
    if len(j) > 1:
        out["J&F_se"] = 100.0 * float(np.std((j + f) / 2.0, ddof=1) / np.sqrt(len(j)))
    return out


def object_scores(scores: Sequence[VideoScores]) -> np.ndarray:
    """Per-object J&F (fraction, not percent) of clips in order: (objects,) float64."""
    if not scores:
        raise InputError("no clips were scored")
    return np.concatenate([(s.object_means()[0] + s.object_means()[1]) / 2.0 for s in scores])


def paired_difference(a: np.ndarray, b: np.ndarray, tie: float = 1e-3) -> dict[str, float]:
    """How B differs from A on the same objects: per-object J&F ``a``, ``b`` (N,) fractions.

    Returns percent "A", "B", "delta" (B - A) and "delta_se", the standard error of the mean
    per-object difference (sample std over sqrt(N); pairing removes the spread between
    objects that the unpaired J&F_se carries), "objects", and how many objects B scored
    higher / lower / within ``tie`` of A ("better", "worse", "tied").
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise InputError(
            f"paired scores need two equal-length 1-D arrays, got shapes {a.shape} and {b.shape}"
        )
    d = b - a
    se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {
        "A": 100.0 * float(a.mean()),
        "B": 100.0 * float(b.mean()),
        "delta": 100.0 * float(d.mean()),
        "delta_se": 100.0 * se,
        "objects": float(len(d)),
        "better": float((d > tie).sum()),
        "worse": float((d < -tie).sum()),
        "tied": float((np.abs(d) <= tie).sum()),
    }


# ---- the click protocol ------------------------------------------------------------------
def _farthest_from_boundary(region: np.ndarray) -> tuple[int, int]:
    """(x, y) of the pixel of ``region`` farthest from its outside (the image edge counts as
    outside); ties go to the first in row-major order."""
    from scipy.ndimage import distance_transform_edt

    padded = np.pad(region, 1, constant_values=False)
    distance = distance_transform_edt(padded)[1:-1, 1:-1]
    y, x = np.unravel_index(int(np.argmax(distance)), distance.shape)
    return int(x), int(y)


def first_click(truth: np.ndarray) -> Click:
    """The positive click at the interior point of ``truth`` (H, W) farthest from its boundary."""
    truth = np.asarray(truth, dtype=bool)
    if not truth.any():
        raise InputError("cannot click on an empty ground-truth mask")
    x, y = _farthest_from_boundary(truth)
    return x, y, True


def next_click(prediction: np.ndarray, truth: np.ndarray) -> Click | None:
    """The click correcting the largest error region of ``prediction`` vs ``truth`` (H, W):
    positive inside a missed region, negative inside a false one; None when there is no error."""
    from scipy.ndimage import label

    prediction, truth = _check_pair(prediction, truth)
    best: tuple[int, np.ndarray, bool] | None = None
    for error, positive in ((truth & ~prediction, True), (prediction & ~truth, False)):
        labels, count = label(error)
        if count == 0:
            continue
        sizes = np.bincount(labels.ravel())[1:]
        largest = int(np.argmax(sizes))
        if best is None or sizes[largest] > best[0]:
            best = (int(sizes[largest]), labels == largest + 1, positive)
    if best is None:
        return None
    x, y = _farthest_from_boundary(best[1])
    return x, y, best[2]


Predictor = Callable[[list[Click]], np.ndarray]


def interactive_iou(predict: Predictor, truth: np.ndarray, clicks: int = 5) -> list[float]:
    """IoU after each of ``clicks`` simulated clicks on one object.

    ``predict(clicks_so_far)`` returns an (H, W) bool mask given all clicks so far, each
    (x, y, positive). Once the prediction is exact the remaining entries repeat its IoU.
    """
    if clicks < 1:
        raise InputError(f"clicks must be >= 1, got {clicks}")
    given = [first_click(truth)]
    ious: list[float] = []
    while True:
        mask = np.asarray(predict(list(given)), dtype=bool)
        ious.append(region_similarity(mask, truth))
        if len(ious) == clicks:
            return ious
        click = next_click(mask, truth)
        if click is None:
            return ious + [ious[-1]] * (clicks - len(ious))
        given.append(click)
