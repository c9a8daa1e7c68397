"""SAMURAI's motion-aware mask selection: the box Kalman filter, the choice among multimask
outputs, and the predictor options over a scripted graph set whose tracked object moves while
a static distractor wins on predicted IoU."""

from __future__ import annotations

import numpy as np
import pytest
from sam2_fake_graphs import FakeGraphs, S, frame

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.motion import (
    BoxKalman,
    MotionState,
    box_iou,
    choose_with_motion,
    mask_box,
)
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig

L = 16  # the fake decoder's low-res side (4 x its 4 x 4 embedding)


def _square(x: int, y: int, side: int = 4) -> np.ndarray:
    logits = np.full((L, L), -5.0, np.float32)
    logits[y : y + side, x : x + side] = 5.0
    return logits


def test_mask_box_and_box_iou():
    assert mask_box(np.full((L, L), -1.0)) is None
    np.testing.assert_array_equal(mask_box(_square(3, 5)), [3, 5, 7, 9])
    a = np.array([0.0, 0.0, 4.0, 4.0])
    assert box_iou(a, a) == 1.0
    assert box_iou(a, np.array([2.0, 0.0, 6.0, 4.0])) == pytest.approx(8 / 24)
    assert box_iou(a, np.array([5.0, 5.0, 6.0, 6.0])) == 0.0
    assert box_iou(a, None) == 0.0


def test_kalman_learns_the_velocity_of_a_moving_box():
    boxes = [np.array([10.0 + 2 * t, 20.0 + t, 30.0 + 2 * t, 60.0 + t]) for t in range(16)]
    kalman = BoxKalman(boxes[0])
    for box in boxes[1:12]:
        kalman.predict()
        kalman.update(box)
    predicted = kalman.predict()  # frame 12
    # the filter extrapolates the motion; holding the last box still lags two frames' motion
    assert box_iou(predicted, boxes[12]) > 0.95
    assert box_iou(predicted, boxes[12]) > box_iou(boxes[11], boxes[12]) + 0.03
    np.testing.assert_allclose(kalman.mean[4:6], [2.0, 1.0], atol=0.2)


def test_choice_by_iou_until_stable_then_by_motion():
    state = MotionState()
    for t in range(6):  # the object (candidate 0) moves right; candidate 1 stays
        masks = np.stack([_square(t, 6), _square(11, 0), np.full((L, L), -5.0)])
        assert choose_with_motion(state, masks, np.array([0.8, 0.5, 0.1]), 0.5, 3, 0.3) == 0
    assert state.stable == 6
    masks = np.stack([_square(6, 6), _square(11, 0), np.full((L, L), -5.0)])
    ious = np.array([0.8, 0.9, 0.1])  # the distractor now wins on predicted IoU alone
    assert choose_with_motion(MotionState(), masks, ious, 0.5, 3, 0.3) == 1  # no motion yet
    assert choose_with_motion(state, masks, ious, 0.5, 3, 0.3) == 0
    assert state.last_score is not None and state.last_score > 0.8
    assert choose_with_motion(state, masks, np.array([0.1, 0.2, 0.25]), 0.5, 3, 0.3) == 0
    assert state.stable == 0  # the chosen mask's predicted IoU fell under the floor: restart
    assert choose_with_motion(state, masks, ious, 0.5, 3, 0.3) == 1 and state.stable == 1


class MovingObject(FakeGraphs):
    """Token 1: the tracked object, a square moving one low-res pixel right per frame; token 2:
    a static distractor whose predicted IoU beats the object's from frame 6 on."""

    def mask_decoder(self, feeds):
        out = super().mask_decoder(feeds)
        t = self.frame
        masks = np.full((1, 4, L, L), -5.0, np.float32)
        masks[0, 0] = masks[0, 1] = _square(min(t, L - 4), 6)
        masks[0, 2] = _square(11, 0)
        iou = [0.8, 0.8, 0.9 if t >= 6 else 0.5, 0.1]
        return out | {"low_res_masks": masks, "iou_pred": np.array([iou], np.float32)}


def _track(frames: int = 10, **options) -> tuple[list[np.ndarray], MovingObject]:
    fake = MovingObject()
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S, memory_dtype="float32", **options))
    stream.start(frame(64, 64), {1: Prompt(box=[0, 24, 16, 40])})
    lows = [stream.track(frame(64, 64)).low_res_logits[1] for _ in range(frames)]
    return lows, fake


def test_motion_keeps_the_moving_object_where_sam2_jumps_to_the_distractor():
    sam2, _ = _track()
    motion, _ = _track(motion_weight=0.5, motion_warmup=3)
    zero, _ = _track(motion_weight=0.0, motion_warmup=3)
    distractor = mask_box(_square(11, 0))
    assert all(np.array_equal(mask_box(low), distractor) for low in sam2[5:])  # frames 6..10
    for t, low in enumerate(motion, start=1):  # the object on every frame
        np.testing.assert_array_equal(mask_box(low), mask_box(_square(min(t, L - 4), 6)))
    for a, b in zip(sam2, zero, strict=True):  # weight 0: SAM 2's choice exactly
        np.testing.assert_array_equal(a, b)


def test_memory_selection_by_motion_keeps_off_track_frames_out_of_the_bank():
    _, fake = _track(motion_weight=0.0, motion_warmup=3, memory_min_motion=0.5)
    stored = [int(v) for v in fake.calls[G.MEMORY_ATTENTION][-1]["mem_feats"][:, 0, 0, 0]]
    # frame 6, where the chosen mask jumped off the object's track onto the distractor, is left
    # out (the filter, corrected with the chosen box, then swings after the distractor: later
    # frames pass or not as its prediction overshoots)
    assert stored[:6] == [0, 1, 2, 3, 4, 5] and 6 not in stored
    _, fake = _track(motion_weight=0.0, motion_warmup=3)
    assert 6 in [int(v) for v in fake.calls[G.MEMORY_ATTENTION][-1]["mem_feats"][:, 0, 0, 0]]


@pytest.mark.parametrize(
    "bad",
    [
        {"motion_weight": 1.5},
        {"motion_weight": "high"},
        {"motion_min_iou": None},
        {"motion_warmup": 0},
        {"memory_min_motion": -0.1},
    ],
)
def test_bad_motion_options_are_refused(bad):
    with pytest.raises(InputError, match=next(iter(bad))):
        StreamConfig(image_size=S, **bad)
    with pytest.raises(InputError, match="needs multimask_tracking"):
        StreamConfig(image_size=S, motion_weight=0.25, multimask_tracking=False)
