"""How frames reach SAM 2's image encoder as Meta's predictors feed it (issue 36), the
conditioning-frame defaults, and what the sam2 and sam2-edge cards stream with.

Meta's video predictor resizes a JPEG frame with PIL's bicubic filter on uint8 (``resize=
"pil-bicubic"``, reproduced here in numpy); its image predictor resizes the float tensor with
torchvision's anti-aliased bilinear Resize (``"bilinear-antialias"``, the default). Parity of the
whole stream with Meta's predictor: tests/models/test_sam2_parity_meta.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from sam2_fake_graphs import FakeGraphs, S, frame

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.arrays import (
    frame_to_input,
    resize_bilinear,
    resize_pil_bicubic,
    resize_pil_bicubic_numpy,
)
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig

# (H, W) -> (oh, ow): up, down, mixed, 1-pixel, and Pillow 13's vertical-first case (the height
# shrinks by more than twice as many pixels as the width), e.g. a portrait frame -> a square
SIZES = [
    ((320, 480), (256, 256)),
    ((320, 480), (1024, 1024)),
    ((1080, 1920), (512, 512)),
    ((1280, 720), (1024, 1024)),
    ((37, 53), (17, 91)),
    ((120, 31), (40, 29)),
    ((7, 9), (1, 1)),
    ((64, 64), (64, 200)),
]


@pytest.mark.parametrize(("src", "dst"), SIZES)
def test_numpy_bicubic_is_bit_exact_with_pillow(src, dst):
    image = pytest.importorskip("PIL.Image")
    x = np.random.default_rng(sum(src + dst)).integers(0, 256, (*src, 3), dtype=np.uint8)
    want = np.asarray(image.fromarray(x).resize(dst[::-1]))  # BICUBIC: Pillow's default
    np.testing.assert_array_equal(resize_pil_bicubic_numpy(x, dst), want)
    np.testing.assert_array_equal(resize_pil_bicubic(x, dst), want)  # Pillow itself when >= 13


def test_numpy_bicubic_matches_pillow_on_a_photo_at_many_sizes():
    image = pytest.importorskip("PIL.Image")
    data = pytest.importorskip("skimage.data")
    photo = data.coffee()  # (400, 600, 3)
    rng = np.random.default_rng(7)
    for _ in range(40):
        h, w = (int(v) for v in rng.integers(8, 400, 2))
        oh, ow = (int(v) for v in rng.integers(1, 700, 2))
        crop = np.ascontiguousarray(photo[:h, :w])
        want = np.asarray(image.fromarray(crop).resize((ow, oh)))
        np.testing.assert_array_equal(
            resize_pil_bicubic_numpy(crop, (oh, ow)), want, err_msg=(h, w)
        )


def test_frame_to_input_by_method():
    image = pytest.importorskip("PIL.Image")
    x = frame(h=96, w=160)
    resized = np.asarray(image.fromarray(x).resize((64, 64)))
    want = np.moveaxis(resized, -1, 0).astype(np.float32) / np.float32(255)  # Meta: x / 255.0
    np.testing.assert_array_equal(frame_to_input(x, 64, "pil-bicubic"), want)
    # the default is what the stream always did (sam2-edge's weights and numbers depend on it)
    old = resize_bilinear(np.moveaxis(x.astype(np.float32) / 255, -1, 0), (64, 64), True)
    np.testing.assert_array_equal(frame_to_input(x, 64), old)
    square = frame(h=64, w=64)  # a frame at the model's size: both are a plain division
    np.testing.assert_array_equal(
        frame_to_input(square, 64, "pil-bicubic"), frame_to_input(square, 64)
    )
    with pytest.raises(InputError, match="unknown resize method"):
        frame_to_input(x, 64, "nearest")


def test_default_resize_is_meta_image_predictors():
    """SAM2Transforms: ToTensor (uint8 / 255), then torchvision's Resize on the float tensor,
    which for a float tensor is torch's anti-aliased bilinear interpolation."""
    torch = pytest.importorskip("torch")
    x = frame(h=96, w=160)
    tensor = torch.from_numpy(x).permute(2, 0, 1).float().div(255)[None]
    want = torch.nn.functional.interpolate(
        tensor, size=(64, 64), mode="bilinear", align_corners=False, antialias=True
    )[0].numpy()
    np.testing.assert_allclose(frame_to_input(x, 64), want, atol=2e-6)


def test_stream_config_resize_and_conditioning_defaults():
    config = StreamConfig(image_size=S)
    assert config.resize == "bilinear-antialias" and config.max_cond_frames is None
    assert StreamConfig(image_size=S, resize="pil-bicubic", max_cond_frames=2).max_cond_frames == 2
    for bad in ({"resize": "bicubic"}, {"max_cond_frames": 0}, {"max_cond_frames": True},
                {"max_cond_frames": 1.5}):  # fmt: skip
        with pytest.raises(InputError, match="bad StreamConfig"):
            StreamConfig(image_size=S, **bad)


def prompted_stream(config: StreamConfig, fake: FakeGraphs, corrections: int) -> SAM2Stream:
    """A stream prompted on frame 0 and corrected by a click on each of the next frames."""
    stream = SAM2Stream(fake.set(), config)
    stream.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
    for _ in range(corrections):
        stream.track(frame())
        stream.add_prompt(1, points=[[2, 2]], labels=[1])
    return stream


def test_all_conditioning_frames_are_kept_by_default():
    """Meta's max_cond_frames_in_attn = -1: the first prompt stays however many follow."""
    fake = FakeGraphs()
    config = StreamConfig(image_size=S, corrections_as_conditioning=True, memory_dtype="float32")
    stream = prompted_stream(config, fake, corrections=6)
    assert stream.memory_stats()[1]["cond_frames"] == 7
    stream.track(frame())
    feeds = fake.calls[G.MEMORY_ATTENTION][-1]
    stored = [int(v) for v in feeds["mem_feats"][:, 0, 0, 0]]  # frame numbers
    assert stored == list(range(7)) and list(feeds["mem_tpos_idx"]) == [6] * 7


def test_bounded_conditioning_frames_become_recent_memory():
    """max_cond_frames = 2: older prompted frames leave the conditioning set and serve as
    recent memory and pointers while recent enough (Meta's unselected conditioning frames)."""
    fake = FakeGraphs()
    config = StreamConfig(
        image_size=S, corrections_as_conditioning=True, memory_dtype="float32", max_cond_frames=2
    )
    stream = prompted_stream(config, fake, corrections=6)
    assert stream.memory_stats()[1]["cond_frames"] == 2
    stream.track(frame())  # frame 7: conditioning frames 5, 6; recent 1..4 (0 is 7 back)
    feeds = fake.calls[G.MEMORY_ATTENTION][-1]
    stored = [int(v) for v in feeds["mem_feats"][:, 0, 0, 0]]
    assert stored == [5, 6, 1, 2, 3, 4]
    assert list(feeds["mem_tpos_idx"]) == [6, 6, 5, 4, 3, 2]  # slot t - 1 - frame
    np.testing.assert_array_equal(  # pointers: 5, 6 as conditioning, then 4 .. 0
        feeds["obj_ptr_tpos"] * 15, np.array([2, 1, 3, 4, 5, 6, 7], np.float32)
    )


def test_cards_stream_with_their_resize_and_conditioning_settings():
    pytest.importorskip("torch")
    from edgekit.models.sam2.card import SAM21Card
    from edgekit.registry import get_card

    official = SAM21Card(random_weights=True, image_size=128)
    config = official.stream_config()
    assert config.resize == "pil-bicubic" and config.max_cond_frames is None
    recorded = official.preprocessing()["stream_config"]
    assert recorded["resize"] == "pil-bicubic" and recorded["max_cond_frames"] is None
    image_like = SAM21Card(random_weights=True, image_size=128, resize="bilinear-antialias")
    assert image_like.stream_config().resize == "bilinear-antialias"
    with pytest.raises(InputError, match="resize"):
        SAM21Card(random_weights=True, resize="bicubic")
    # sam2-edge keeps the resize it is trained and measured with; its bundles record no
    # resize, so they stream as they always did
    edge = get_card("sam2-edge")
    assert edge.stream_config().resize == "bilinear-antialias"
    assert "resize" not in edge.preprocessing()["stream_config"]


def test_sam2_edge_flows_never_hold_more_than_one_conditioning_frame():
    """The unbounded default changes nothing for sam2-edge: its evaluation (a first-frame mask,
    tracking, a mask correction) and the daemon's prompts keep one conditioning frame per
    object (corrections are not conditioning frames), far below the old bound of 4."""
    pytest.importorskip("torch")
    from edgekit.registry import get_card

    config = get_card("sam2-edge").stream_config()
    assert not config.corrections_as_conditioning
    stream = SAM2Stream(FakeGraphs().set(), StreamConfig(**{**vars(config), "image_size": S}))
    mask = np.zeros((48, 80), bool)
    mask[10:20, 10:30] = True
    stream.start(frame(), {1: Prompt(mask=mask), 2: Prompt(points=[[5, 5]], labels=[1])})
    for t in range(8):
        stream.track(frame())
        stream.add_prompt(1 + t % 2, Prompt(mask=mask) if t % 2 else Prompt(box=[1, 1, 20, 20]))
    assert {k: v["cond_frames"] for k, v in stream.memory_stats().items()} == {1: 1, 2: 1}
