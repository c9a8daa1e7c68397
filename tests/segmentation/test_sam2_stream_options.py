"""The streaming predictor's inference-time options over a scripted graph set: memory stride,
memory selection, non-overlap, mask threshold, hole / sprinkle post-processing, bad values."""

from __future__ import annotations

import numpy as np
import pytest
from sam2_fake_graphs import FakeGraphs, S, frame

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.stream import (
    Prompt,
    SAM2Stream,
    StreamConfig,
    confine_to_box,
    fill_holes,
    non_overlapping_logits,
)


def test_memory_stride_feeds_sam2s_strided_frames_and_stays_bounded():
    from edgekit.segmentation.stream import memory_slots

    assert memory_slots(9, 7) == {8: 1, 7: 2, 6: 3, 5: 4, 4: 5, 3: 6}  # stride 1: t - i
    # stride 2 (SAM 2's formula): slot 1 = t-1, slot i >= 2 = ((t-2)//2)*2 - (i-2)*2
    assert memory_slots(9, 7, 2) == {8: 1, 6: 2, 4: 3, 2: 4, 0: 5}
    assert memory_slots(10, 7, 3) == {9: 1, 6: 2, 3: 3, 0: 4}
    fake = FakeGraphs()
    cfg = StreamConfig(image_size=S, max_obj_ptrs=16, memory_dtype="float32", memory_stride=2)
    stream = SAM2Stream(fake.set(), cfg)
    stream.start(frame(), {7: Prompt(points=[[10, 20]], labels=[1])})
    for _ in range(40):
        stream.track(frame())
    for t, feeds in enumerate(fake.calls[G.MEMORY_ATTENTION], start=1):
        want = sorted((f, i) for f, i in memory_slots(t, 7, 2).items() if f >= 1)  # 0: cond
        stored = [int(v) for v in feeds["mem_feats"][:, 0, 0, 0]]
        assert stored == [0] + [f for f, _ in want]
        assert list(feeds["mem_tpos_idx"]) == [6] + [i - 1 for _, i in want]
    assert stream.memory_stats()[7]["recent_frames"] == (7 - 2) * 2 + 1  # the window, bounded


def _stored_frames(feeds) -> list[int]:
    return [int(v) for v in feeds["mem_feats"][:, 0, 0, 0]]


def test_memory_selection_keeps_confident_frames_at_slots_by_rank():
    scores = [2.0, 1.0, -3.0, -1.0, 4.0, 3.0]  # frames 2 and 3: object lost
    runs = {}
    for name, cfg in {
        "sam2": StreamConfig(image_size=S, memory_dtype="float32"),
        "select": StreamConfig(image_size=S, memory_dtype="float32", memory_min_score=0.0),
    }.items():
        fake = FakeGraphs(scores=scores)
        stream = SAM2Stream(fake.set(), cfg)
        stream.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
        for _ in range(5):
            stream.track(frame())
        runs[name] = fake.calls[G.MEMORY_ATTENTION][-1]  # conditioning frame 5
    assert _stored_frames(runs["sam2"]) == [0, 1, 2, 3, 4]
    assert list(runs["sam2"]["mem_tpos_idx"]) == [6, 3, 2, 1, 0]
    # frames 2 and 3 never entered the bank; frame 4 is slot 0, frame 1 slot 1
    assert _stored_frames(runs["select"]) == [0, 1, 4]
    assert list(runs["select"]["mem_tpos_idx"]) == [6, 1, 0]
    np.testing.assert_array_equal(
        runs["select"]["obj_ptr_tpos"], np.array([5, 1, 2], np.float32) / np.float32(15)
    )


def test_memory_selection_by_predicted_iou_keeps_corrections():
    fake = FakeGraphs()  # the chosen multimask token predicts IoU 0.9
    cfg = StreamConfig(image_size=S, memory_min_iou=0.95)
    stream = SAM2Stream(fake.set(), cfg)
    stream.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
    for _ in range(3):
        stream.track(frame())
    assert stream.memory_stats()[1]["recent_frames"] == 0
    assert _stored_frames(fake.calls[G.MEMORY_ATTENTION][-1]) == [0]
    stream.add_prompt(1, points=[[2, 2]], labels=[1])  # a user's correction is always kept
    assert stream.memory_stats()[1]["recent_frames"] == 1
    loose = SAM2Stream(FakeGraphs().set(), StreamConfig(image_size=S, memory_min_iou=0.5))
    loose.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
    for _ in range(3):
        loose.track(frame())
    assert loose.memory_stats()[1]["recent_frames"] == 3


def test_non_overlapping_logits_keep_only_the_highest_object():
    a = np.array([[5.0, -2.0], [3.0, -20.0]], np.float32)
    b = np.array([[4.0, 1.0], [3.0, -30.0]], np.float32)
    out = non_overlapping_logits(np.stack([a, b]))
    np.testing.assert_array_equal(out[0], [[5.0, -10.0], [3.0, -20.0]])  # tie: first object
    np.testing.assert_array_equal(out[1], [[-10.0, 1.0], [-10.0, -30.0]])


def test_non_overlap_options_act_on_outputs_and_memory():
    prompts = {1: Prompt(points=[[1, 1]], labels=[1]), 2: Prompt(points=[[2, 2]], labels=[1])}
    results = {}
    for name, cfg in {
        "sam2": StreamConfig(image_size=S),
        "out": StreamConfig(image_size=S, non_overlap=True),
        "mem": StreamConfig(image_size=S, non_overlap_memory=True),
    }.items():
        fake = FakeGraphs()  # both objects get the same band: object 1 wins every tie
        stream = SAM2Stream(fake.set(), cfg)
        stream.start(frame(h=S, w=S), prompts)
        results[name] = (stream.track(frame(h=S, w=S)), fake)
    sam2, _ = results["sam2"]
    assert sam2.masks[1].any() and sam2.masks[2].any()
    for name in ("out", "mem"):
        res, fake = results[name]
        assert np.array_equal(res.masks[1], sam2.masks[1]) and not res.masks[2].any()
    memory_logits = [c["mask_logits"].max() for c in results["out"][1].calls[G.MEMORY_ENCODER]]
    assert memory_logits[-1] == 5.0  # outputs only: object 2's memory keeps its mask
    memory_logits = [c["mask_logits"].max() for c in results["mem"][1].calls[G.MEMORY_ENCODER]]
    assert memory_logits[-1] <= -5.0  # clamped where object 1 wins


def test_fill_holes_and_sprinkles_like_sam2():
    logits = np.full((12, 12), -4.0, np.float32)
    logits[1:8, 1:8] = 3.0
    logits[4, 4] = -1.0  # a one-pixel hole
    logits[10, 9:11] = 2.0  # a two-pixel sprinkle
    out = fill_holes(logits, 1, 2)
    assert out[4, 4] == np.float32(0.1) and (out[10, 9:11] == np.float32(-0.1)).all()
    assert (out[1:8, 1:8][out[1:8, 1:8] != np.float32(0.1)] == 3.0).all()
    assert (out[logits == -4.0] == -4.0).all()  # the large background is no hole
    np.testing.assert_array_equal(fill_holes(logits, 0, 0), logits)
    assert fill_holes(logits, 1, 0)[10, 9] == 2.0 and fill_holes(logits, 0, 2)[4, 4] == -1.0


def test_mask_threshold_fill_holes_and_single_mask_tracking_in_the_stream():
    def tracked(**options):
        stream = SAM2Stream(FakeGraphs().set(), StreamConfig(image_size=S, **options))
        stream.start(frame(h=S, w=S), {1: Prompt(points=[[1, 1]], labels=[1])})
        return stream.track(frame(h=S, w=S)).masks[1]

    band = tracked()
    assert band[:, :12].all() and not band[:, 12:].any()  # token 2: a 3 px low-res band
    assert not tracked(mask_threshold=6.0).any()  # logits are +-5
    single = tracked(multimask_tracking=False)  # token 0: a 1 px low-res band
    assert single[:, :4].all() and not single[:, 4:].any()
    assert not tracked(remove_sprinkle_area=3 * 16).any()  # the 3 x 16 band is a sprinkle
    assert np.array_equal(tracked(fill_hole_area=3), band)


class FullMaskGraphs(FakeGraphs):
    """Every mask token covers the whole frame: a mask that spills past any box."""

    def mask_decoder(self, feeds):
        out = super().mask_decoder(feeds)
        out["low_res_masks"] = np.full_like(out["low_res_masks"], 5.0)
        return out


def test_confine_to_box_keeps_the_cells_a_box_overlaps():
    low = np.full((16, 16), 5.0, np.float32)  # a 64 px input: 4 px cells
    coords = np.array([[16.0, 8.0], [40.0, 30.0], [20.0, 20.0]], np.float32)
    labels = np.array([G.LABEL_BOX_TOP_LEFT, G.LABEL_BOX_BOTTOM_RIGHT, G.LABEL_POSITIVE])
    out = confine_to_box(low, coords, labels, 64)
    kept = np.argwhere(out == 5.0)
    assert kept.min(axis=0).tolist() == [2, 4] and kept.max(axis=0).tolist() == [7, 9]
    assert (out[out != 5.0] == -5.0).all()
    points_only = confine_to_box(low, coords[2:], labels[2:], 64)
    np.testing.assert_array_equal(points_only, low)  # no box: unchanged


def test_box_clip_confines_a_box_prompts_mask_in_output_and_memory():
    def run(**options):
        fake = FullMaskGraphs()
        stream = SAM2Stream(fake.set(), StreamConfig(image_size=S, **options))
        first = stream.start(frame(h=S, w=S), {1: Prompt(box=[16, 8, 40, 30])})
        second = stream.track(frame(h=S, w=S))
        return first.masks[1], second.masks[1], fake.calls[G.MEMORY_ENCODER][0]["mask_logits"]

    spilled, _, spilled_memory = run()
    assert spilled.all() and (spilled_memory == 5.0).all()  # SAM 2: the mask ignores the box
    first, tracked, memory = run(box_clip=True)
    rows, cols = np.nonzero(first)  # the box's cells: input rows 8-31, columns 16-39
    assert (rows.min(), cols.min(), rows.max(), cols.max()) == (8, 16, 31, 39)
    assert first[8:32, 17:39].all() and first[9:31, 16:40].all()  # bilinear rounds the corners
    assert (memory[0, 0] == 5.0).sum() == 6 * 6 and (memory[0, 0] == -5.0).sum() == 16 * 16 - 36
    assert tracked.all()  # tracked frames are not confined: only the prompt's mask
    with pytest.raises(InputError, match="box_clip"):
        StreamConfig(image_size=S, box_clip="yes")


@pytest.mark.parametrize(
    "bad",
    [
        {"fill_hole_area": -1},
        {"remove_sprinkle_area": 1.5},
        {"memory_min_iou": 1.5},
        {"memory_min_score": float("nan")},
        {"mask_threshold": float("inf")},
        {"memory_stride": 0},
        {"memory_stride": 1.5},
    ],
)
def test_bad_stream_options_are_refused(bad):
    with pytest.raises(InputError, match=next(iter(bad))):
        StreamConfig(image_size=S, **bad)
    with pytest.raises(InputError, match="memory_stride=2 places memory frames by time"):
        StreamConfig(image_size=S, memory_stride=2, memory_min_iou=0.5)
