"""Mask rendering: overlay colours and contours, contact sheet, PNG and MP4 files."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from edgekit.errors import InputError
from edgekit.segmentation import render as maskrender


def _clip(t: int = 3, size: int = 40) -> tuple[np.ndarray, np.ndarray]:
    frames = np.full((t, size, size, 3), 100, np.uint8)
    masks = np.zeros((t, 2, size, size), bool)
    for i in range(t):
        masks[i, 0, 5:15, 5 + i : 15 + i] = True
        masks[i, 1, 25:35, 20:30] = True
    return frames, masks


def test_overlay_tints_inside_draws_contour_leaves_outside() -> None:
    frames, masks = _clip()
    out = maskrender.overlay(frames[0], masks[0], [1, 2], labels=False, alpha=0.5)
    assert out.shape == frames[0].shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, 0], frames[0, 0, 0])  # outside every mask
    red = np.array(maskrender.colour(1))
    np.testing.assert_array_equal(out[10, 10], np.floor(0.5 * 100 + 0.5 * red + 0.5))  # fill
    np.testing.assert_array_equal(out[5, 10], red)  # contour (top edge)
    assert not np.array_equal(out[30, 25], out[10, 10])  # another id, another colour


def test_labels_are_drawn_only_with_labels_on() -> None:
    frames, masks = _clip(size=64)
    plain = maskrender.overlay(frames[0], masks[0], [1, 2], labels=False)
    labelled = maskrender.overlay(frames[0], masks[0], [1, 2], scores=[0.9, 0.5])
    assert (plain != labelled).any()


def test_bad_masks_are_refused() -> None:
    frames, masks = _clip()
    with pytest.raises(InputError, match="masks"):
        maskrender.overlay(frames[0], masks[0, :, :20], [1, 2])
    with pytest.raises(InputError, match="uint8"):
        maskrender.overlay(frames[0].astype(np.float32), masks[0], [1, 2])


def test_contact_sheet_tiles_images() -> None:
    images = [np.full((10, 12, 3), v, np.uint8) for v in (50, 150, 250)]
    sheet = maskrender.contact_sheet(images, columns=2, gap=2)
    assert sheet.shape == (2 * 12 + 2, 2 * 14 + 2, 3)
    assert (sheet[2:12, 2:14] == 50).all() and (sheet[14:24, 2:14] == 250).all()


def test_render_clip_writes_pngs_sheet_and_video(tmp_path) -> None:
    frames, masks = _clip(t=4, size=41)  # odd size: the MP4 pads to even
    result = maskrender.render_clip(frames, masks, [1, 2], tmp_path / "out", fps=5)
    assert [p.name for p in result.frames] == [f"frame_{i:04d}.png" for i in range(4)]
    first = np.asarray(Image.open(result.frames[0]).convert("RGB"))
    np.testing.assert_array_equal(first, maskrender.overlay(frames[0], masks[0], [1, 2]))
    assert Image.open(result.sheet).size[0] > 41
    try:
        import av
    except ImportError:
        assert result.video is None and "av" in result.notes[0]
        return
    assert result.video is not None and result.video.stat().st_size > 0
    with av.open(str(result.video)) as container:
        decoded = list(container.decode(video=0))
    assert len(decoded) == 4 and decoded[0].width == 42
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic writes leave no temp files
