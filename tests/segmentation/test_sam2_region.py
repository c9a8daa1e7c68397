"""Search regions (edgekit.segmentation.region): window geometry, prompts moved into a window,
and a scripted "bright pixels" graph set on which a small object is lost on the whole frame
and held in its window, while a frame no larger than the input is tracked exactly as before."""

from __future__ import annotations

import numpy as np
import pytest
from sam2_fake_graphs import C, FakeGraphs, H, S, frame

from edgekit.errors import InputError
from edgekit.segmentation.region import (
    Region,
    RegionStream,
    open_stream,
    region_around,
    region_side,
)
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig
from edgekit.segmentation.tracking import box_iou, mask_box


def test_window_side_and_placement():
    # k * sqrt(area), at least twice the longer side, at least the input size
    assert region_side((0, 0, 40, 40), 4.0, 64) == 160
    assert region_side((0, 0, 10, 90), 4.0, 64) == 180  # thin: twice its length
    assert region_side((0, 0, 5, 5), 4.0, 64) == 64  # never enlarged past the input size
    hw = (240, 320)
    assert region_around((160, 120), 100, hw) == Region(110, 70, 100, 100)
    assert region_around((5, 230), 100, hw) == Region(0, 140, 100, 100)  # shifted inside
    assert region_around((50, 50), 500, hw) == Region(0, 0, 320, 240)  # clipped to the frame


def test_crop_paste_and_prompts_round_trip():
    region = Region(30, 20, 64, 48)
    image = frame(120, 160, seed=3)
    np.testing.assert_array_equal(region.crop(image), image[20:68, 30:94])
    inner = np.zeros((48, 64), bool)
    inner[5:9, 10:20] = True
    full = region.paste(inner, (120, 160))
    assert full.sum() == inner.sum() and mask_box(full) == (40.0, 25.0, 50.0, 29.0)
    moved = region.prompt(Prompt(points=[[40, 30]], labels=[1], box=[35, 25, 60, 50]))
    np.testing.assert_array_equal(moved.points, [[10, 10]])
    np.testing.assert_array_equal(moved.box, [5, 5, 30, 30])
    assert region.prompt(Prompt(mask=full)).mask.shape == (48, 64)
    assert region.contains((30, 20, 94, 68)) and not region.contains((29, 20, 60, 40))


class BrightGraphs(FakeGraphs):
    """A "tracker" that segments bright pixels: the encoder block-averages the input's
    brightness to the decoder's low-res grid (4H x 4H); the decoder's logits are that
    brightness minus a half. An object a few pixels wide in a large frame averages away on the
    whole frame's grid and stays bright in a window around it."""

    def image_encoder(self, feeds):
        out = super().image_encoder(feeds)
        gray = feeds["image"][0].mean(axis=0)  # (S, S)
        block = S // (4 * H)
        low = gray.reshape(4 * H, block, 4 * H, block).mean(axis=(1, 3))
        out["feat_s0"] = np.repeat(low[None, None], C // 8, axis=1).astype(np.float32)
        return out

    def mask_decoder(self, feeds):
        out = super().mask_decoder(feeds)
        logits = 40.0 * (feeds["feat_s0"][0, 0] - 0.5)
        out["low_res_masks"] = np.repeat(logits[None, None], 4, axis=1).astype(np.float32)
        return out


def _dot_video(n: int = 12, hw=(240, 320), side: int = 10) -> tuple[np.ndarray, list]:
    """A white square ``side`` px wide moving right and down over a black frame."""
    frames, boxes = np.zeros((n, *hw, 3), np.uint8), []
    for t in range(n):
        x, y = 40 + 12 * t, 60 + 5 * t
        frames[t, y : y + side, x : x + side] = 255
        boxes.append((x, y, x + side, y + side))
    return frames, boxes


def _track(stream, frames, box):
    out = [stream.start(frames[0], {1: Prompt(box=list(box))})]
    out += [stream.track(f) for f in frames[1:]]
    return [r.masks[1] for r in out]


def test_a_small_object_is_held_in_its_window_and_lost_on_the_whole_frame():
    frames, boxes = _dot_video()
    config = StreamConfig(image_size=S, num_maskmem=3, max_obj_ptrs=4)
    whole = _track(SAM2Stream(BrightGraphs().set(), config), frames, boxes[0])
    regional = RegionStream(
        BrightGraphs().set(), StreamConfig(**{**vars(config), "search_region": 4.0})
    )
    held = _track(regional, frames, boxes[0])
    # on the whole frame a 10 px square is 2 x 3 input pixels: nothing on the low-res grid
    assert all(not m.any() for m in whole)
    ious = [box_iou(mask_box(m), b) for m, b in zip(held, boxes, strict=True)]
    assert min(ious[1:]) > 0.5, ious
    # the window (64 px: the input size) moved with the square, never past the frame
    region = regional.regions()[1]
    assert (region.w, region.h) == (S, S)
    x0, y0, x1, y1 = boxes[-1]
    assert region.contains((x0, y0, x1, y1))
    assert regional.frame_index == len(frames) - 1
    assert set(regional.timings) >= {"image_encoder", "mask_decoder"}


def test_a_frame_no_larger_than_the_input_is_tracked_exactly_as_before():
    config = StreamConfig(image_size=S)
    regional_config = StreamConfig(image_size=S, search_region=4.0)
    clip = [frame(48, 60, seed=t) for t in range(6)]
    runs = []
    for stream in (
        SAM2Stream(FakeGraphs().set(), config),
        open_stream(FakeGraphs().set(), regional_config),
    ):
        out = [
            stream.start(
                clip[0], {1: Prompt(box=[5, 5, 30, 40]), 2: Prompt(points=[[50, 20]], labels=[1])}
            )
        ]
        out += [stream.track(f) for f in clip[1:]]
        runs.append(out)
    assert isinstance(open_stream(FakeGraphs().set(), regional_config), RegionStream)
    for a, b in zip(*runs, strict=True):
        for obj in (1, 2):
            np.testing.assert_array_equal(a.masks[obj], b.masks[obj])
            assert a.object_scores[obj] == b.object_scores[obj]


def test_objects_prompts_and_bad_input_in_windows():
    frames, boxes = _dot_video(n=3)
    stream = RegionStream(BrightGraphs().set(), StreamConfig(image_size=S, search_region=4.0))
    with pytest.raises(InputError, match="before start"):
        stream.track(frames[0])
    with pytest.raises(InputError, match="outside"):
        stream.start(frames[0], {1: Prompt(box=[0, 0, 10, 250])})
    stream.start(frames[0], {1: Prompt(box=list(boxes[0]))})
    first = stream.regions()[1]
    # a second object from a mask prompt; a points-only object gets the whole frame
    mask = np.zeros(frames.shape[1:3], bool)
    mask[200:210, 280:290] = True
    stream.add_object(2, Prompt(mask=mask))
    stream.add_object(3, points=[[100, 100]], labels=[1])
    assert stream.regions()[3] == Region(0, 0, 320, 240)
    assert stream.regions()[2].contains((280, 200, 290, 210))
    # a correction outside the window restarts the object there; inside, it stays put
    stream.add_prompt(1, box=[250, 20, 262, 32])
    assert stream.regions()[1] != first and stream.regions()[1].contains((250, 20, 262, 32))
    stream.add_prompt(1, points=[[256, 26]], labels=[1])
    assert sorted(stream.memory_stats()) == [1, 2, 3]
    stream.remove_object(3)
    with pytest.raises(InputError, match="unknown object id 3"):
        stream.remove_object(3)
    with pytest.raises(InputError, match="frame size changed"):
        stream.track(frames[1][:100])
    result = stream.track(frames[1])
    assert result.masks[1].shape == frames.shape[1:3] and sorted(result.masks) == [1, 2]


@pytest.mark.parametrize("bad", [0.5, True, "4", float("nan"), -1])
def test_bad_search_region_is_refused(bad):
    with pytest.raises(InputError, match="search_region"):
        StreamConfig(image_size=S, search_region=bad)
    with pytest.raises(InputError, match="search_region"):
        RegionStream(FakeGraphs().set(), StreamConfig(image_size=S))
