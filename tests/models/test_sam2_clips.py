"""Synthetic tracking clips: deterministic, exact masks, every motion case, disjoint photos."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.models.sam2_edge import clip_render, clips

SIZE = 96  # small clips keep these tests fast; the generator scales with size


def test_same_arguments_give_identical_clips_and_seeds_differ() -> None:
    a = clips.make_clip("train", 3, frames=6, size=SIZE)
    b = clips.make_clip("train", 3, frames=6, size=SIZE)
    np.testing.assert_array_equal(a.frames, b.frames)
    np.testing.assert_array_equal(a.masks, b.masks)
    other = clips.make_clip("heldout", 3, frames=6, size=SIZE)
    assert not np.array_equal(a.frames, other.frames)


def test_shapes_and_dtypes() -> None:
    clip = clips.make_clip("train", 0, frames=5)
    t, k = clip.masks.shape[:2]
    assert clip.frames.shape == (5, 256, 256, 3) and clip.frames.dtype == np.uint8
    assert clip.masks.shape == (5, k, 256, 256) and clip.masks.dtype == bool
    assert t == 5 and clip.object_ids == tuple(range(1, k + 1))


@pytest.mark.parametrize("index", range(5))
def test_masks_are_exactly_the_visible_pixels(index: int) -> None:
    clip = clips.make_clip("train", index, frames=8, size=SIZE, flat=True)
    for k in range(clip.masks.shape[1]):
        colour = np.array(clip_render.FLAT_COLOURS[k % 3], np.uint8)
        painted = (clip.frames == colour).all(axis=-1)
        np.testing.assert_array_equal(clip.masks[:, k], painted)
    assert clip.masks.sum(axis=1).max() <= 1  # visible parts never overlap


def test_every_motion_case_happens() -> None:
    frames = 12
    by_case = {c.case: c for c in clips.clip_set("heldout", 5, frames=frames, size=SIZE)}
    assert set(by_case) == set(clips.CASES)
    for clip in by_case.values():
        assert clip.masks[0].any(axis=(1, 2)).all(), "every object is visible when prompted"
    for case in ("occlusion", "exit"):
        hidden = by_case[case].hidden  # (T, K)
        assert (hidden.any(axis=0) & ~hidden[-1]).any(), f"{case}: hidden, then back"
    scale = by_case["scale"]
    areas = scale.masks.sum(axis=(2, 3))[:, 0].astype(float)
    assert max(areas[0] / areas[-1], areas[-1] / areas[0]) > 1.8
    crossing = by_case["crossing"].masks
    assert crossing.shape[1] == 2
    centres = [np.argwhere(crossing[t, k]).mean(0) for t in (0, frames - 1) for k in range(2)]
    assert np.linalg.norm(centres[0] - centres[2]) > SIZE * 0.3  # they travel across
    linear = by_case["linear"].masks[:, 0]
    path = np.array([np.argwhere(m).mean(0) for m in linear])
    steps = np.diff(path, axis=0)
    assert np.allclose(steps, steps.mean(0), atol=2.0)  # constant velocity


def test_occlusion_bar_hides_the_object_completely() -> None:
    clip = clips.make_clip("train", 3, frames=12, size=SIZE, flat=True)
    assert clip.case == "occlusion"
    white = (clip.frames == 255).all(-1)
    full_rows = white.all(axis=2).any(axis=1) | white.all(axis=1).any(axis=1)  # a full-size bar
    assert full_rows.all()
    assert clip.hidden.any()


def test_heldout_backgrounds_are_disjoint_from_training() -> None:
    assert not set(clips.HELDOUT_PHOTOS) & set(clips.TRAIN_PHOTOS)
    train = {c.background for c in clips.clip_set("train", 30, frames=3, size=48)}
    heldout = {c.background for c in clips.clip_set("heldout", 30, frames=3, size=48)}
    assert train <= set(clips.TRAIN_PHOTOS) and heldout <= set(clips.HELDOUT_PHOTOS)
    assert len(heldout) >= 3 and not train & heldout


def test_wide_training_split_adds_photos_never_held_out_and_turns_backgrounds() -> None:
    """``train-wide`` draws from the training photos plus WIDE_PHOTOS (none held out), loads
    each extra photo from its package, and turns each background by a flip / transposition."""
    assert not set(clips.WIDE_PHOTOS) & set(clips.HELDOUT_PHOTOS + clips.TRAIN_PHOTOS)
    for name in clips.WIDE_PHOTOS:
        photo = clips.load_background(name)
        assert photo.ndim == 3 and photo.shape[2] == 3 and min(photo.shape[:2]) == 320
        assert photo.dtype == np.float32 and photo.min() >= 0.0 and photo.max() <= 1.0
        assert photo.std() > 0.05  # a real picture, not a blank
    wide = clips.clip_set("train-wide", 40, frames=3, size=48)
    used = {c.background for c in wide}
    assert used <= set(clips.TRAIN_PHOTOS + clips.WIDE_PHOTOS) and used & set(clips.WIDE_PHOTOS)
    again = clips.make_clip("train-wide", 5, frames=3, size=48)
    np.testing.assert_array_equal(wide[5].frames, again.frames)  # deterministic like the others
    photo = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    turned = {clips._turned(photo, np.random.default_rng(s)).tobytes() for s in range(64)}
    assert len(turned) == 8  # all eight flips / transpositions occur


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InputError, match="split"):
        clips.make_clip("test", 0)
    with pytest.raises(InputError, match="motion case"):
        clips.make_clip("train", 0, case="teleport")
    with pytest.raises(InputError, match="frames"):
        clips.make_clip("train", 0, frames=2)
