"""The streaming SAM 2 predictor: memory-bank bookkeeping, mask choice, bounded memory, bad input,
numpy resizing, and the same stream through ONNX Runtime (micro-sized model, random weights)."""

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
    from_bfloat16_bits,
    resize_bilinear,
    to_bfloat16_bits,
)


def test_memory_bank_feeds_follow_sam2_indexing():
    fake = FakeGraphs()
    cfg = StreamConfig(image_size=S, max_obj_ptrs=16, memory_dtype="float32")
    stream = SAM2Stream(fake.set(), cfg)
    stream.start(frame(), {7: Prompt(points=[[10, 20]], labels=[1])})
    for _ in range(20):
        stream.track(frame())
    calls = fake.calls[G.MEMORY_ATTENTION]
    assert len(calls) == 20
    for t, feeds in enumerate(calls, start=1):
        recent = list(range(max(1, t - 6), t))  # frames t-6 .. t-1 (frame 0 is conditioning)
        t_rel = [t - f for f in recent]
        assert list(feeds["mem_tpos_idx"]) == [6] + [r - 1 for r in t_rel]
        # memory frames are identified by the frame number the fake encoder stored in them
        stored = [int(v) for v in feeds["mem_feats"][:, 0, 0, 0]]
        assert stored == [0] + recent
        ptr_frames = [f for f in range(t - 1, max(0, t - 16), -1) if f >= 1]
        want_tpos = np.array([t] + [t - f for f in ptr_frames], np.float32) / np.float32(15)
        np.testing.assert_array_equal(feeds["obj_ptr_tpos"], want_tpos)
        assert feeds["mem_pos"].shape == feeds["mem_feats"].shape
    last = calls[-1]
    assert last["mem_feats"].shape[0] == 7 and last["obj_ptrs"].shape[0] == 16


def test_multimask_choice_stability_fallback_and_pointer_token():
    fake = FakeGraphs()
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S))
    first = stream.start(frame(h=S, w=S), {1: Prompt(points=[[5, 5]], labels=[1])})
    # one point: the best multimask token (iou 0.9 -> token 2, 3 px band) and its pointer
    assert first.masks[1][:, :12].all() and not first.masks[1][:, 12:].any()
    assert fake.calls[G.MEMORY_ENCODER][-1]["binarize"][0] == 1.0
    tracked = stream.track(frame(h=S, w=S))
    assert tracked.masks[1][:, :12].all() and not tracked.masks[1][:, 12:].any()
    assert fake.calls[G.MEMORY_ENCODER][-1]["binarize"][0] == 0.0
    # a box is two points: token 0 when stable (1 px band)
    box = stream.add_object(2, box=[2, 2, 30, 30])
    assert box.masks[2][:, :4].all() and not box.masks[2][:, 4:].any()
    unstable = FakeGraphs(stable=False)
    stream = SAM2Stream(unstable.set(), StreamConfig(image_size=S))
    res = stream.start(frame(h=S, w=S), {1: Prompt(box=[2, 2, 30, 30])})
    assert res.masks[1][:, :12].all() and not res.masks[1][:, 12:].any()
    stream.track(frame(h=S, w=S))
    # the stored pointer of the box frame is token 0's even though token 2's mask was chosen
    ptr = unstable.calls[G.MEMORY_ATTENTION][-1]["obj_ptrs"][0]
    assert ptr[0] == 10 * 1 + 0


def test_absent_object_has_empty_mask_and_comes_back():
    fake = FakeGraphs(scores=[2.0, 1.0, -3.0, -1.0, 4.0])
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S))
    results = [stream.start(frame(), {3: Prompt(points=[[1, 1]], labels=[1])})]
    results += [stream.track(frame()) for _ in range(4)]
    present = [bool(r.masks[3].any()) for r in results]
    assert present == [True, True, False, False, True]
    assert [r.object_scores[3] > 0 for r in results] == present
    absent_logits = fake.calls[G.MEMORY_ENCODER][2]["mask_logits"]
    assert (absent_logits == G.NO_OBJECT_LOGIT).all()
    assert results[2].masks[3].shape == (48, 80) and results[2].masks[3].dtype == bool


def test_correction_replaces_the_frame_memory_and_feeds_back_logits():
    fake = FakeGraphs()
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S))
    stream.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
    for _ in range(3):
        stream.track(frame())
    before = stream.memory_stats()[1]
    stream.add_prompt(1, points=[[40, 30], [10, 10]], labels=[1, 0])
    after = stream.memory_stats()[1]
    assert before == after  # the frame's entry was replaced, not added
    dec = fake.calls[G.MASK_DECODER][-1]
    assert dec["has_mask_input"][0] == 1.0 and dec["mask_input"].max() == 5.0
    assert dec["point_labels"].tolist() == [[1, 0]]
    np.testing.assert_allclose(dec["point_coords"][0, 0], [40 / 80 * S, 30 / 48 * S])
    assert fake.calls[G.MEMORY_ENCODER][-1]["binarize"][0] == 1.0
    assert dec["pix_feat"].flat[0] == 3 + 100  # memory-conditioned features of frame 3


def test_conditioning_frames_are_bounded():
    fake = FakeGraphs()
    cfg = StreamConfig(image_size=S, max_cond_frames=2, corrections_as_conditioning=True)
    stream = SAM2Stream(fake.set(), cfg)
    stream.start(frame(), {1: Prompt(points=[[1, 1]], labels=[1])})
    for _ in range(5):
        stream.track(frame())
        stream.add_prompt(1, points=[[2, 2]], labels=[1])
        assert stream.memory_stats()[1]["cond_frames"] <= 2


def test_bad_input_is_refused_clearly():
    fake = FakeGraphs()
    stream = SAM2Stream(fake.set(), StreamConfig(image_size=S))
    ok = frame()
    with pytest.raises(InputError, match="before start"):
        stream.track(ok)
    with pytest.raises(InputError, match="uint8"):
        stream.start(ok.astype(np.float32), {1: Prompt(points=[[1, 1]], labels=[1])})
    with pytest.raises(InputError, match=r"\(H, W, 3\)"):
        stream.start(ok[..., 0], {1: Prompt(points=[[1, 1]], labels=[1])})
    with pytest.raises(InputError, match="outside the 80x48 frame"):
        stream.start(ok, {1: Prompt(points=[[81, 10]], labels=[1])})
    with pytest.raises(InputError, match="outside"):
        stream.start(ok, {1: Prompt(box=[0, 0, 10, 49])})
    with pytest.raises(InputError, match="mask prompt is empty"):
        stream.start(ok, {1: Prompt(mask=np.zeros((48, 80), bool))})
    with pytest.raises(InputError, match="labels"):
        stream.start(ok, {1: Prompt(points=[[1, 1]], labels=[5])})
    with pytest.raises(InputError, match="empty prompt"):
        stream.start(ok, {1: Prompt()})
    stream.start(ok, {1: Prompt(points=[[1, 1]], labels=[1])})
    with pytest.raises(InputError, match="unknown object id 9"):
        stream.add_prompt(9, points=[[1, 1]], labels=[1])
    with pytest.raises(InputError, match="unknown object id 9"):
        stream.remove_object(9)
    with pytest.raises(InputError, match="already tracked"):
        stream.add_object(1, points=[[1, 1]], labels=[1])
    graphs = fake.set()
    del graphs[G.MASK_PROMPT]
    no_mask = SAM2Stream(graphs, StreamConfig(image_size=S))
    with pytest.raises(InputError, match="mask_prompt"):
        no_mask.start(ok, {1: Prompt(mask=np.ones((48, 80), bool))})
    del graphs[G.MEMORY_ENCODER]
    with pytest.raises(InputError, match="memory_encoder"):
        SAM2Stream(graphs)


@pytest.mark.parametrize(
    ("src", "dst", "antialias"),
    [
        ((16, 16), (48, 80), False),
        ((37, 53), (16, 16), False),
        ((37, 53), (16, 16), True),
        ((120, 200), (64, 64), True),
        ((20, 30), (45, 31), True),
        ((64, 64), (64, 64), True),
    ],
)
def test_numpy_bilinear_matches_torch(src, dst, antialias):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(2, *src)).astype(np.float32) * 10
    want = torch.nn.functional.interpolate(
        torch.from_numpy(x)[None],
        size=dst,
        mode="bilinear",
        align_corners=False,
        antialias=antialias,
    )[0].numpy()
    got = resize_bilinear(x, dst, antialias=antialias)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_bfloat16_storage_rounds_like_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).normal(size=4096).astype(np.float32) * 37
    want = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(from_bfloat16_bits(to_bfloat16_bits(x)), want)


# ---- a real (micro) SAM 2 model on torch and through ONNX Runtime ------------------------------
def micro_model():
    torch = pytest.importorskip("torch")
    from edgekit.models.sam2 import HieraConfig, SAM2Config, SAM2Model

    hiera = HieraConfig(
        embed_dim=16,
        num_heads=1,
        stages=(1, 1, 2, 1),
        global_att_blocks=(3,),
        window_pos_embed_bkg_spatial_size=(7, 7),
    )
    cfg = SAM2Config(
        "micro",
        hiera,
        image_size=128,
        d_model=64,
        mem_dim=16,
        memory_attention_layers=2,
        memory_attention_ffn=128,
        decoder_mlp_dim=128,
    )
    torch.manual_seed(0)
    model = SAM2Model(cfg).eval()
    with torch.no_grad():  # random weights: make the object present so masks are not all empty
        model.sam_mask_decoder.pred_obj_score_head.layers[-1].bias.fill_(2.0)
    return model


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.count_nonzero(a | b)
    return 1.0 if union == 0 else np.count_nonzero(a & b) / union


def moving_disc_clip(n: int, size: int = 96):
    from skimage import data
    from skimage.transform import resize

    bg = (resize(data.astronaut(), (size, size)) * 255).astype(np.uint8)
    tex = (resize(data.coffee(), (size, size)) * 255).astype(np.uint8)
    yy, xx = np.mgrid[:size, :size]
    clip = []
    for t in range(n):
        disc = (xx - 30 - 2 * t) ** 2 + (yy - 40 - t) ** 2 < 15**2
        f = bg.copy()
        f[disc] = tex[disc]
        clip.append(f)
    return clip


def test_long_stream_memory_stays_bounded():
    from edgekit.models.sam2 import torch_graph_set

    model = micro_model()
    stream = SAM2Stream(torch_graph_set(model), StreamConfig(image_size=128))
    clip = moving_disc_clip(10)
    stream.start(clip[0], {1: Prompt(points=[[30, 40]], labels=[1]), 2: Prompt(box=[5, 5, 40, 50])})
    sizes = []
    for t in range(1, 25):
        res = stream.track(clip[t % 10])
        assert res.frame_index == t and set(res.masks) == {1, 2}
        sizes.append(stream.memory_stats())
    assert sizes[0][1] == {
        "cond_frames": 1,
        "recent_frames": 1,
        "pointers": 2,
        "bytes": sizes[0][1]["bytes"],
    }
    for stats in sizes[-8:]:  # from frame 16 on: full and flat
        for obj in stats.values():
            assert (obj["cond_frames"], obj["recent_frames"], obj["pointers"]) == (1, 6, 16)
    assert len({obj["bytes"] for stats in sizes[-8:] for obj in stats.values()}) == 1
    assert sizes[-1][1]["bytes"] > sizes[0][1]["bytes"]


@pytest.fixture(scope="module")
def micro_onnx(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.sam2 import graph_specs

    model = micro_model()
    out = tmp_path_factory.mktemp("sam2_micro")
    files = {
        spec.name: export_onnx(spec, out / f"{spec.name}.onnx", 17) for spec in graph_specs(model)
    }
    return model, files


def test_exported_graphs_match_torch_with_other_dynamic_sizes(micro_onnx):
    from edgekit.models.sam2 import torch_graph_set
    from edgekit.models.sam2.graphs import example_inputs
    from edgekit.segmentation.run import graph_set_from_files

    model, files = micro_onnx
    ort = graph_set_from_files(files)
    ref = torch_graph_set(model)
    examples = example_inputs(model, num_frames=5, num_ptrs=9, num_points=4)
    for name in G.GRAPH_NAMES:
        feeds = {k: v.numpy() for k, v in examples[name].items()}
        want, got = ref[name](feeds), ort[name](feeds)
        G.check_outputs(name, got)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], atol=1e-4, err_msg=f"{name}.{key}")


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_stream_through_exported_graphs_matches_torch(micro_onnx, runtime):
    pytest.importorskip(runtime)
    from edgekit.models.sam2 import torch_graph_set
    from edgekit.segmentation.rollout import rollout_parity
    from edgekit.segmentation.run import graph_set_from_files

    model, files = micro_onnx
    clip = moving_disc_clip(6)
    prompts = {1: Prompt(points=[[30, 40]], labels=[1]), 2: Prompt(mask=clip[0][..., 0] > 128)}
    reference = torch_graph_set(model)
    candidate = graph_set_from_files(files, runtime=runtime)
    parity = rollout_parity(reference, candidate, clip, prompts, StreamConfig(image_size=128))
    assert set(parity.ious) == {1, 2} and len(parity.drift) == len(clip)
    assert parity.min_iou >= 0.99 and max(parity.drift) < 1e-3, parity.to_json()
    # the comparison can fail: masks are not trivial, and a perturbed model drifts away
    areas = np.array(list(parity.reference_area.values()))
    assert ((areas > 0.02) & (areas < 0.98)).all(), areas
    torch = pytest.importorskip("torch")
    perturbed = micro_model()
    with torch.no_grad():  # per channel: a uniform shift would vanish in the next LayerNorm
        bias = perturbed.memory_attention.layers[0].linear2.bias
        bias.add_(0.5 * torch.randn(bias.shape[0], generator=torch.Generator().manual_seed(0)))
    worse = rollout_parity(
        reference, torch_graph_set(perturbed), clip[:4], prompts, StreamConfig(image_size=128)
    )
    assert max(worse.drift) > 1e-2


# ---- inference-time options (off by default: SAM 2's predictor) --------------------------------
