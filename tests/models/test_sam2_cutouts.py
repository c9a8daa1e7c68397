"""The ``train-cutout`` clips (models/sam2_edge/cutouts.py): objects are regions of real photos
(irregular outlines, the photo's own pixels), masks stay exact, clips are reproducible, and the
lighting drift changes pixels, never masks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.models.sam2_edge import clips as C
from edgekit.models.sam2_edge.cutouts import CutoutShapes, _grow


def _solidity(mask: np.ndarray) -> float:
    from skimage.morphology import convex_hull_image

    return float(mask.sum() / convex_hull_image(mask).sum())


def test_cutout_clips_are_reproducible_and_their_objects_irregular():
    clips = [C.make_clip("train-cutout", i, frames=6) for i in range(10)]
    again = C.make_clip("train-cutout", 3, frames=6)
    assert np.array_equal(again.frames, clips[3].frames)
    assert np.array_equal(again.masks, clips[3].masks)
    first = [c.masks[0, 0] for c in clips if c.masks[0, 0].sum() > 200]
    solidity = [_solidity(m) for m in first]
    # discs, ellipses and star polygons of the other splits are nearly convex
    assert min(solidity) < 0.85 and np.median(solidity) < 0.95, solidity
    assert all(c.split == "train-cutout" for c in clips)


def test_an_object_shows_its_photo_pixels():
    rng = np.random.default_rng(5)
    shapes = CutoutShapes(rng, ("astronaut",), avoid="")
    outline, texture = shapes(40.0)
    photo = C.load_background("astronaut")
    assert texture.shape == (C.TEXTURE_SIZE, C.TEXTURE_SIZE, 3)
    # the texture is a window of the photo itself (no colour shift)
    hits = np.argwhere(np.all(np.abs(photo - texture[0, 0]) < 1e-6, axis=-1))
    assert len(hits) and any(
        np.allclose(photo[y : y + 8, x : x + 8], texture[:8, :8])
        for y, x in hits[:50]
        if y + 8 <= photo.shape[0] and x + 8 <= photo.shape[1]
    )
    span = outline.max(axis=0) - outline.min(axis=0)  # every pixel within 40 px of the seed
    assert (span <= 2 * 40.0 + 2).all() and (span > 10).all()


def test_regions_grow_from_whole_superpixels_within_the_radius():
    labels = np.repeat(np.arange(10), 10)[None, :].repeat(20, axis=0)  # 10 vertical stripes
    region = _grow(labels, (10, 50), radius=30.0, area=400, rng=np.random.default_rng(0))
    assert region is not None and region.sum() >= 400
    # stripes 3..6 lie wholly within 30 px of the seed (stripe 2's far corner is 31.6 px away)
    assert set(np.unique(labels[region])) <= {3, 4, 5, 6}
    assert all(labels[region].tolist().count(s) in (0, 200) for s in range(10))  # whole stripes
    assert _grow(labels, (10, 50), radius=5.0, area=10, rng=np.random.default_rng(0)) is None


def test_relight_changes_pixels_not_shapes():
    clip = C.make_clip("train", 0, frames=6)
    shapes = CutoutShapes(np.random.default_rng(2), C.TRAIN_PHOTOS, avoid="")
    lit = shapes.relight(clip.frames)
    assert lit.shape == clip.frames.shape and lit.dtype == np.uint8
    assert np.abs(lit.astype(int) - clip.frames).mean() > 2.0


def test_training_splits_include_cutouts():
    from edgekit.models.sam2_edge.card import SAM2EdgeCard

    config = SAM2EdgeCard(recipe="cutout").train_config()
    assert config.split == "train-cutout" and config.init is not None
    with pytest.raises(InputError, match="held-out split is never trained on"):
        SAM2EdgeCard(split="heldout").train_config()


def test_occluder_clips_hide_the_object_behind_another_object():
    """``train-occluder``: the occlusion is by a second cut-out object passing in front (no
    bar), the first object is visible at both ends and hidden for a stretch in between, and the
    pixels it had just before it vanished are the occluder's while it is hidden."""
    for index in (3, 8):
        clip = C.make_clip("train-occluder", index, frames=24, case="occlusion")
        hidden = clip.hidden[:, 0]
        assert not hidden[0] and not hidden[-1] and hidden.sum() >= 3, hidden
        assert len(clip.object_ids) >= 2 and not clip.hidden[:, 1].all()
        gone = int(np.flatnonzero(hidden)[0])
        last_seen = clip.masks[gone - 1, 0]
        covered = clip.masks[gone, 1][last_seen].mean()  # the occluder's share of those pixels
        assert covered > 0.5, covered
        again = C.make_clip("train-occluder", index, frames=24, case="occlusion")
        assert np.array_equal(again.masks, clip.masks)
    # the other cases are the cutout split's own, drawn from its own seed
    linear = C.make_clip("train-occluder", 5, frames=6, case="linear")
    assert linear.split == "train-occluder" and len(linear.object_ids) in (1, 2)


def test_occluder_recipe_continues_mix_long_on_occluder_clips():
    from edgekit.models.sam2_edge.card import RECIPES, SAM2EdgeCard

    config = SAM2EdgeCard(recipe="occluder").train_config()
    assert config.split == "train-occluder" and config.mix_split == "train"
    assert config.init == RECIPES["mix-long"]
    assert config.case_weights[C.CASES.index("occlusion")] == max(config.case_weights)


def test_twin_clips_keep_a_double_in_view_while_the_object_is_gone():
    """``train-twin``: an exit or occlusion clip adds a last object that is the first's double
    (the same outline and texture, so the same colours), in front of the rest and visible on
    every frame, including those where the first one has no pixel; other cases are unchanged."""
    for case in ("exit", "occlusion"):
        for index in (0, 1):
            clip = C.make_clip("train-twin", index, frames=32, case=case)
            first, twin = clip.hidden[:, 0], clip.hidden[:, -1]
            assert first.any() and not first[0] and not twin.any(), (case, index)
            pixels = [clip.frames[0][clip.masks[0, k]] for k in (0, -1)]  # same lighting
            means = [p.reshape(-1, 3).astype(float).mean(0) for p in pixels]
            assert np.abs(means[0] - means[1]).max() < 40, means  # the double looks alike
            again = C.make_clip("train-twin", index, frames=32, case=case)
            assert np.array_equal(again.frames, clip.frames)
    linear = C.make_clip("train-twin", 5, frames=6, case="linear")
    assert len(linear.object_ids) in (1, 2)


def test_twin_recipe_continues_the_occluder_stage_and_the_blend_blends_the_two():
    from edgekit.models.sam2_edge.card import BLEND_RECIPE, RECIPES, SAM2EdgeCard

    config = SAM2EdgeCard(recipe="twin").train_config()
    occluder = RECIPES["occluder"]
    assert config.split == "train-twin" and config.mix_split == "train"
    assert config.init == occluder and config.wise == 1.0
    assert config.clip_offset > occluder.clip_offset + occluder.steps * 4
    assert replace(config, wise=0.5) == BLEND_RECIPE == RECIPES["blend"]


def test_a_twin_is_the_same_outline_and_texture_on_a_path_inside_the_frame():
    rng = np.random.default_rng(0)
    outline = np.array([[-10.0, -6.0], [12.0, -5.0], [9.0, 8.0], [-8.0, 7.0]])
    texture = rng.random((8, 8, 3)).astype(np.float32)
    frames = 20
    original = C._Object(
        outline, texture, np.zeros((frames, 2)), np.linspace(1.5, 1.0, frames), np.zeros(frames)
    )
    twin = C._twin(rng, 128, frames, original)
    assert twin.outline is outline and twin.texture is texture
    assert np.all(twin.scales == 1.5)  # the original's size when it is prompted
    assert twin.centres.min() >= 12 * 1.5 and twin.centres.max() <= 128 - 12 * 1.5


def _median_speed(clip: C.Clip, k: int) -> float:
    """Median distance (pixels) the centre of object k's mask moves between visible frames."""
    centres = [np.argwhere(m).mean(0) if m.any() else None for m in clip.masks[:, k]]
    pairs = zip(centres[:-1], centres[1:], strict=True)
    steps = [np.linalg.norm(b - a) for a, b in pairs if a is not None and b is not None]
    return float(np.median(steps))


def test_fast_clips_move_several_times_faster_than_the_occluder_clips():
    """``train-fast`` is ``train-occluder`` under FAST motion: drifting objects keep their speed
    all the way (bouncing off the borders), the background pans further, and the clips stay
    exact and reproducible."""
    fast = [C.make_clip("train-fast", i, frames=24, case="linear") for i in range(4)]
    calm = [C.make_clip("train-occluder", i, frames=24, case="linear") for i in range(4)]
    fast_speed = np.median([_median_speed(c, 0) for c in fast])
    calm_speed = np.median([_median_speed(c, 0) for c in calm])
    assert fast_speed > 2.5 * calm_speed and fast_speed >= 3.0, (fast_speed, calm_speed)
    assert all(not c.hidden[:, 0].any() for c in fast)  # bounced back, never out of the frame
    again = C.make_clip("train-fast", 2, frames=24, case="linear")
    assert np.array_equal(again.frames, fast[2].frames)
    assert np.array_equal(again.masks, fast[2].masks)


def test_bounce_folds_a_path_into_the_frame_at_full_speed():
    path = np.stack([np.arange(0.0, 50.0, 5.0), np.full(10, 7.0)], 1)
    folded = C._bounce(path, 10.0, 30.0)
    assert folded.min() >= 10.0 and folded.max() <= 30.0
    assert np.allclose(np.abs(np.diff(folded[2:, 0])), 5.0)  # inside: same speed, no stops
    assert folded[:, 1].tolist() == [13.0] * 10  # below lo: reflected (10 + (10 - 7))
    assert np.all(C._bounce(path, 20.0, 20.0) == 20.0)


def test_the_default_is_the_fast_stage_continuing_the_blend():
    from edgekit.models.sam2_edge.card import BLEND_RECIPE, DEFAULT_RECIPE, SAM2EdgeCard

    config = SAM2EdgeCard(recipe="fast").train_config()
    assert config == DEFAULT_RECIPE == SAM2EdgeCard().train_config()
    assert config.split == "train-fast" and config.mix_split == "train"
    assert config.init == BLEND_RECIPE and config.wise == 1.0
    assert config.clip_offset >= BLEND_RECIPE.clip_offset + BLEND_RECIPE.steps * 4
    blend = SAM2EdgeCard(recipe="fast-blend").train_config()
    assert blend == replace(config, wise=0.5)
