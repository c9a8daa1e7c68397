"""Motion-aware mask selection for the streaming predictor (SAMURAI, Yang et al. 2024).

SAM 2 picks, on every tracked frame, the multimask output with the highest predicted IoU: an
appearance score, which a similar-looking distractor or an occluder in front of the object
can win. SAMURAI adds a motion score: a constant-velocity Kalman filter over the object's box
predicts where the object should be, and once the filter has been stable for a few frames the
chosen mask maximises ``w * IoU(predicted box, mask box) + (1 - w) * predicted IoU``. The
filter is corrected with the chosen box while the chosen mask's predicted IoU stays above a
floor, and restarts (no motion score until it is stable again) when it drops below it.

The filter is the one of SORT / ByteTrack: state (cx, cy, a, h, vcx, vcy, va, vh) with a the
box's aspect ratio w / h; process and measurement noise proportional to the box height (a far
object moves fewer pixels). Boxes here are (x0, y0, x1, y1) in low-res mask pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_POS = 1.0 / 20  # position noise per unit of box height
_VEL = 1.0 / 160  # velocity noise per unit of box height


def mask_box(logits: np.ndarray) -> np.ndarray | None:
    """(x0, y0, x1, y1) float64 of the pixels of ``logits`` (h, w) above 0 (x1, y1 exclusive),
    None when no pixel is."""
    ys = np.flatnonzero((logits > 0).any(axis=1))
    if ys.size == 0:
        return None
    xs = np.flatnonzero((logits > 0).any(axis=0))
    return np.array([xs[0], ys[0], xs[-1] + 1, ys[-1] + 1], np.float64)


def box_iou(a: np.ndarray, b: np.ndarray | None) -> float:
    """IoU of two (x0, y0, x1, y1) boxes; 0 when ``b`` is None or either is empty."""
    if b is None:
        return 0.0
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0.0) * max(h, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def _to_xyah(box: np.ndarray) -> np.ndarray:
    w, h = box[2] - box[0], max(box[3] - box[1], 1e-6)
    return np.array([(box[0] + box[2]) / 2, (box[1] + box[3]) / 2, w / h, h], np.float64)


def _to_box(xyah: np.ndarray) -> np.ndarray:
    cx, cy, a, h = xyah[:4]
    w = a * h
    return np.array([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], np.float64)


class BoxKalman:
    """Constant-velocity Kalman filter over one box (SORT's xyah state, 8 numbers)."""

    _F = np.eye(8) + np.eye(8, k=4)  # x' = x + v (one frame)
    _H = np.eye(4, 8)

    def __init__(self, box: np.ndarray) -> None:
        z = _to_xyah(box)
        h = z[3]
        self.mean = np.concatenate([z, np.zeros(4)])
        std = [2 * _POS * h, 2 * _POS * h, 1e-2, 2 * _POS * h]
        std += [10 * _VEL * h, 10 * _VEL * h, 1e-5, 10 * _VEL * h]
        self.cov = np.diag(np.square(std))

    def predict(self) -> np.ndarray:
        """Advance one frame; the predicted box (x0, y0, x1, y1)."""
        h = self.mean[3]
        q = np.square([_POS * h, _POS * h, 1e-2, _POS * h, _VEL * h, _VEL * h, 1e-5, _VEL * h])
        self.mean = self._F @ self.mean
        self.cov = self._F @ self.cov @ self._F.T + np.diag(q)
        return self.box()

    def update(self, box: np.ndarray) -> None:
        """Correct the state with a measured box (x0, y0, x1, y1)."""
        h = self.mean[3]
        r = np.square([_POS * h, _POS * h, 1e-1, _POS * h])
        s = self._H @ self.cov @ self._H.T + np.diag(r)
        gain = np.linalg.solve(s, self._H @ self.cov).T  # cov H^T S^-1 (S symmetric)
        self.mean = self.mean + gain @ (_to_xyah(box) - self._H @ self.mean)
        self.cov = self.cov - gain @ s @ gain.T

    def box(self) -> np.ndarray:
        return _to_box(self.mean)


@dataclass
class MotionState:
    """One object's filter and how many consecutive frames it has been corrected."""

    kalman: BoxKalman | None = None
    stable: int = 0
    last_score: float | None = field(default=None)  # the chosen mask's motion IoU, if scored


def choose_with_motion(
    state: MotionState,
    masks: np.ndarray,
    ious: np.ndarray,
    weight: float,
    warmup: int,
    min_iou: float,
) -> int:
    """Index into ``masks`` (k, h, w) low-res logits with predicted IoUs ``ious`` (k,): the
    best by predicted IoU until the filter has been corrected ``warmup`` frames in a row, then
    the best by ``weight * motion IoU + (1 - weight) * predicted IoU``. Updates ``state``:
    the filter is corrected with the chosen box while its predicted IoU is above ``min_iou``
    (and the mask is not empty); otherwise the run of stable frames restarts from 0."""
    boxes = [mask_box(m) for m in masks]
    state.last_score = None
    if state.kalman is None or state.stable == 0:
        choice = int(np.argmax(ious))
        if boxes[choice] is not None:
            state.kalman = BoxKalman(boxes[choice])
            state.stable = 1
        return choice
    predicted = state.kalman.predict()
    if state.stable < warmup:
        choice = int(np.argmax(ious))
    else:
        motion = np.array([box_iou(predicted, b) for b in boxes])
        choice = int(np.argmax(weight * motion + (1.0 - weight) * np.asarray(ious)))
        state.last_score = float(motion[choice])
    if ious[choice] > min_iou and boxes[choice] is not None:
        state.kalman.update(boxes[choice])
        state.stable += 1
    else:
        state.stable = 0
    return choice
