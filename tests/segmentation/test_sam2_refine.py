"""Image-guided refinement of the streaming predictor's output masks (StreamConfig.refine_radius):
the colour guided filter against a per-window ridge regression, edge snapping, the crop, the
stream (outputs only), bad values."""

from __future__ import annotations

import numpy as np
import pytest
from sam2_fake_graphs import FakeGraphs, S

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.arrays import guided_filter, refine_mask, resize_bilinear
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig


def _reference_guided_filter(guide, p, r, eps):
    """He et al.'s filter written per window: ridge fit of p on the colours in every
    (2r+1)^2 window (indices clamped at the border), then each pixel averages the fits of
    the windows that contain it."""
    _, h, w = guide.shape
    fits = np.zeros((h, w, 4))
    for y in range(h):
        for x in range(w):
            ys = np.clip(np.arange(y - r, y + r + 1), 0, h - 1)
            xs = np.clip(np.arange(x - r, x + r + 1), 0, w - 1)
            colours = guide[:, ys[:, None], xs[None, :]].reshape(3, -1)  # (3, n)
            values = p[ys[:, None], xs[None, :]].reshape(-1)
            centred = colours - colours.mean(1, keepdims=True)
            sigma = centred @ centred.T / values.size
            a = np.linalg.solve(sigma + eps * np.eye(3), centred @ values / values.size)
            fits[y, x] = [*a, values.mean() - a @ colours.mean(1)]
    out = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            ys = np.clip(np.arange(y - r, y + r + 1), 0, h - 1)
            xs = np.clip(np.arange(x - r, x + r + 1), 0, w - 1)
            mean_fit = fits[ys[:, None], xs[None, :]].reshape(-1, 4).mean(0)
            out[y, x] = mean_fit[:3] @ guide[:, y, x] + mean_fit[3]
    return out


def test_guided_filter_is_the_per_window_ridge_fit():
    rng = np.random.default_rng(3)
    guide, p = rng.random((3, 11, 13)), rng.random((11, 13))
    for r, eps in ((1, 1e-2), (2, 1e-4)):
        want = _reference_guided_filter(guide, p, r, eps)
        np.testing.assert_allclose(guided_filter(guide, p, r, eps), want, atol=1e-9)
    flat = np.full((11, 13), 0.3)  # a flat map stays flat whatever the image
    np.testing.assert_allclose(guided_filter(guide, flat, 2, 1e-4), flat, atol=1e-12)


def _star_scene(size=64):
    """A five-pointed colour star on a noisy background: (3, S, S) guide in [0, 1], its true
    mask, and logits at a quarter of the size that see it only as a blur (area-pooled)."""
    yy, xx = np.mgrid[:size, :size] + 0.5
    angle, dist = np.arctan2(yy - 30.2, xx - 33.7), np.hypot(yy - 30.2, xx - 33.7)
    truth = dist < 11 + 2 * np.cos(5 * angle)
    rng = np.random.default_rng(0)
    guide = np.where(truth, 0.8, 0.2)[None] * np.array([1.0, 0.6, 0.3])[:, None, None]
    guide = np.clip(guide + rng.normal(0, 0.02, guide.shape), 0, 1).astype(np.float32)
    share = truth.reshape(size // 4, 4, size // 4, 4).mean((1, 3))
    low = (16.0 * (share - 0.5) + rng.normal(0, 0.5, share.shape)).astype(np.float32)
    return guide, truth, low


def _iou(a, b):
    return (a & b).sum() / (a | b).sum()


def test_refinement_moves_a_coarse_mask_onto_the_colour_edge():
    guide, truth, low = _star_scene()
    plain = resize_bilinear(low, truth.shape) > 0
    refined = refine_mask(low, guide, 4, 1e-3) > 0
    assert _iou(plain, truth) < 0.9
    assert _iou(refined, truth) > 0.99
    # the threshold is a logit, as mask_threshold: the filtered probability minus its sigmoid
    shift = refine_mask(low, guide, 4, 1e-3, threshold=2.0) - refine_mask(low, guide, 4, 1e-3)
    np.testing.assert_allclose(shift, 0.5 - 1 / (1 + np.exp(-2.0)), atol=1e-6)


def test_only_the_box_around_the_object_is_filtered():
    guide, _, low = _star_scene()
    up = resize_bilinear(low, guide.shape[1:])
    whole = guided_filter(
        guide.astype(np.float64), 1 / (1 + np.exp(-up.astype(np.float64))), 4, 1e-3
    )
    out = refine_mask(low, guide, 4, 1e-3)
    np.testing.assert_array_equal(out > 0, whole > 0.5)
    assert out[0, 0] == np.float32(-0.5)  # outside the box: -sigmoid(threshold)
    empty = refine_mask(np.full((16, 16), -9.0, np.float32), guide, 4, 1e-3)
    assert empty.shape == (S, S) and (empty == np.float32(-0.5)).all()


def _two_colour_frame(edge: int) -> np.ndarray:
    out = np.zeros((S, S, 3), np.uint8)
    out[:, :edge] = (200, 40, 40)
    out[:, edge:] = (30, 60, 190)
    return out


@pytest.mark.parametrize("edge", [11, 13])
def test_the_stream_snaps_output_masks_to_edges_and_leaves_memory_alone(edge):
    runs = {}
    for radius in (0, 2):
        fake = FakeGraphs()
        config = StreamConfig(image_size=S, refine_radius=radius, refine_eps=1e-3)
        stream = SAM2Stream(fake.set(), config)
        stream.start(_two_colour_frame(edge), {1: Prompt(points=[[1, 1]], labels=[1])})
        runs[radius] = stream.track(_two_colour_frame(edge)), fake
    (plain, fake0), (refined, fake2) = runs[0], runs[2]
    assert plain.masks[1].sum(1).tolist() == [12] * S  # the fake's 3 px low-res band
    assert refined.masks[1].sum(1).tolist() == [edge] * S  # moved onto the colour edge
    assert refined.masks[1][:, :edge].all()
    np.testing.assert_array_equal(refined.low_res_logits[1], plain.low_res_logits[1])
    for a, b in zip(fake0.calls[G.MEMORY_ENCODER], fake2.calls[G.MEMORY_ENCODER], strict=True):
        np.testing.assert_array_equal(a["mask_logits"], b["mask_logits"])


def test_refinement_follows_the_frame_size_and_hidden_objects_stay_empty():
    fake = FakeGraphs(scores=[1.0, -2.0])
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S, refine_radius=2))
    big = np.repeat(np.repeat(_two_colour_frame(13), 2, 0), 3, 1)  # (128, 192)
    first = stream.start(big, {1: Prompt(points=[[1, 1]], labels=[1])})
    assert first.masks[1].shape == (2 * S, 3 * S)
    widths = first.masks[1].sum(1)  # the band refined at 64 px, then upsampled 3x
    assert (widths == widths[0]).all() and 3 * 12 < widths[0] <= 3 * 13
    assert not stream.track(big).masks[1].any()  # object score -2: hidden


@pytest.mark.parametrize(
    "bad",
    [{"refine_radius": -1}, {"refine_radius": 2.5}, {"refine_eps": 0.0}, {"refine_eps": np.nan}],
)
def test_bad_refinement_values_are_refused(bad):
    with pytest.raises(InputError, match=next(iter(bad))):
        StreamConfig(image_size=S, **bad)


@pytest.mark.parametrize(
    ("shape", "radius", "dtype"),
    [((13, 40, 33), 12, np.float32), ((5, 7), 3, np.float64), ((4, 4), 6, np.float32)],
)
@pytest.mark.parametrize("impl", ["box_mean", "box_mean_numpy"])
def test_box_mean_is_scipys_uniform_filter_with_nearest_edges(shape, radius, dtype, impl) -> None:
    """box_mean and its numpy form (what a lean install without scipy runs) equal scipy's
    filter, windows wider than the image included."""
    from scipy.ndimage import uniform_filter

    from edgekit.segmentation import arrays

    box_mean = getattr(arrays, impl)

    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    k = 2 * radius + 1
    ref = uniform_filter(x, size=(1,) * (x.ndim - 2) + (k, k), mode="nearest")
    got = box_mean(x, radius)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_allclose(got, ref, atol=1e-6 if dtype == np.float32 else 1e-12)
