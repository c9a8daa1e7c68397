"""Parity of edgekit's SAM 2.1 with Meta's code (PyPI ``sam2`` 1.1.0, random weights).

The models (Meta's hiera-tiny at image size 256 with adjusted random weights, the same weights in
edgekit's), the clip, the prompts and the per-frame bars are tests/models/sam2_meta_helpers.py's
(see its docstring, with the install line); without Meta's ``sam2`` this module is skipped.

Components are compared tensor by tensor (box prompts there). Whole streams run on the clip of
real-size JPEG frames, read by Meta's video predictor from the folder and given to edgekit's
stream as decoded frames, with a corrective click mid-stream. Every frame of every object must
pass both bars: max |logit difference| at frame size and mask IoU, on two weight seeds, on torch
and through ONNX Runtime; negative controls (a shorter memory bank, a missing correction, a wrong
pointer count or normalisation, the anti-aliased bilinear resize) must fail them on both seeds.
(Float32 instead of bfloat16 memory moves the logits by only 6e-5 to 1e-4 here: too close to the
logit bar to serve as a control.) tests/models/test_sam2_meta_streams.py adds memory stride,
bounded conditioning frames and an object that leaves the frame and comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from sam2_meta_helpers import (  # noqa: E402 - skips this module without Meta's sam2
    CONFIGS,
    CORRECTIONS,
    H,
    S,
    T,
    W,
    assert_parity,
    build_pair,
    frame_parity,
    iou,
    memo_graphs,
    meta_predict,
    passes,
    photo_clip,
    run_stream,
    stream_prompts,
)

# isort: split
# (Meta's sam2 only after the helpers, whose import skips this module without it)
from sam2.build_sam import build_sam2  # noqa: E402

from edgekit.models.sam2 import SAM2Model, sam2_config, torch_graph_set  # noqa: E402
from edgekit.segmentation import graphs as G  # noqa: E402

SEEDS = (0, 1)  # random weights the whole-stream bars and their controls are checked on


@pytest.mark.parametrize("size", ["small", "base_plus", "large"])
def test_state_dict_keys_and_shapes_equal_meta(size):
    meta = build_sam2(CONFIGS[size], None, device="cpu", apply_postprocessing=False)
    want = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    del meta
    with torch.device("meta"):
        mine = SAM2Model(sam2_config(size))
    got = {k: tuple(v.shape) for k, v in mine.state_dict().items()}
    assert sorted(set(want) ^ set(got)) == []
    assert got == want


pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


@pytest.fixture(scope="module")
def models():
    """Meta's tiny video predictor and edgekit's tiny model with the same weights (seed 0)."""
    return build_pair(0)


def normalised(image: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (image - mean) / std


def close(got, want, atol: float) -> None:
    torch.testing.assert_close(
        torch.as_tensor(np.asarray(got)), torch.as_tensor(np.asarray(want)), atol=atol, rtol=1e-4
    )


@pytest.fixture(scope="module")
def features(models):
    meta, mine = models
    image = torch.rand(1, 3, S, S, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        backbone = meta.forward_image(normalised(image))
    out = torch_graph_set(mine)[G.IMAGE_ENCODER]({"image": image.numpy()})
    return backbone, out


def test_image_encoder_parity(models, features):
    meta, _ = models
    backbone, out = features
    close(out["image_embed"], backbone["backbone_fpn"][2], 1e-5)
    close(out["feat_s0"], backbone["backbone_fpn"][0], 1e-5)
    close(out["feat_s1"], backbone["backbone_fpn"][1], 1e-5)
    close(out["image_pos"], backbone["vision_pos_enc"][2], 1e-6)
    nomem = backbone["backbone_fpn"][2] + meta.no_mem_embed.detach().reshape(1, -1, 1, 1)
    close(out["image_embed_nomem"], nomem, 1e-5)


def test_mask_decoder_parity(models, features):
    meta, mine = models
    backbone, out = features
    decoder = torch_graph_set(mine)[G.MASK_DECODER]
    pix = backbone["backbone_fpn"][2]
    high_res = [backbone["backbone_fpn"][0], backbone["backbone_fpn"][1]]
    coords = torch.tensor([[[60.0, 70.0]]])
    labels = torch.tensor([[1]], dtype=torch.int32)
    with torch.inference_mode():
        heads = meta._forward_sam_heads(
            pix, {"point_coords": coords, "point_labels": labels}, None, high_res, True
        )
    multimasks, _, ious, _, _, obj_ptr, score = heads
    feeds = {
        "pix_feat": pix.numpy(),
        "feat_s0": out["feat_s0"],
        "feat_s1": out["feat_s1"],
        "point_coords": coords.numpy(),
        "point_labels": labels.numpy().astype(np.int64),
        "mask_input": np.zeros((1, 1, S // 4, S // 4), np.float32),
        "has_mask_input": np.zeros(1, np.float32),
    }
    got = decoder(feeds)
    close(got["object_score_logits"], score, 1e-4)
    present = float(score) > 0
    masks = got["low_res_masks"][:, 1:] if present else np.full_like(multimasks, -1024.0)
    close(masks, multimasks, 1e-3)
    close(got["iou_pred"][:, 1:], ious, 1e-4)
    best = 1 + int(np.argmax(got["iou_pred"][0, 1:]))
    close(got["obj_ptrs"][:, best], obj_ptr, 1e-4)

    # a box (labels 2, 3) with a dense mask prompt: all four tokens against Meta's decoder
    box = torch.tensor([[[30.0, 40.0], [200.0, 220.0]]])
    box_labels = torch.tensor([[2, 3]], dtype=torch.int32)
    mask_logits = torch.randn(1, 1, S // 4, S // 4, generator=torch.Generator().manual_seed(2)) * 5
    with torch.inference_mode():
        sparse, dense = meta.sam_prompt_encoder((box, box_labels), None, mask_logits)
        want_masks, want_iou, tokens, want_score = meta.sam_mask_decoder.predict_masks(
            pix, meta.sam_prompt_encoder.get_dense_pe(), sparse, dense, False, high_res
        )
        want_ptrs = meta.obj_ptr_proj(tokens)
        if float(want_score) <= 0:
            want_ptrs = want_ptrs * 0 + meta.no_obj_ptr
    feeds.update(
        point_coords=box.numpy(),
        point_labels=box_labels.numpy().astype(np.int64),
        mask_input=mask_logits.numpy(),
        has_mask_input=np.ones(1, np.float32),
    )
    got = decoder(feeds)
    close(got["low_res_masks"], want_masks, 1e-3)
    close(got["iou_pred"], want_iou, 1e-4)
    close(got["obj_ptrs"], want_ptrs, 1e-4)
    close(got["object_score_logits"], want_score, 1e-4)


@pytest.mark.parametrize(("binarize", "score"), [(True, 3.0), (False, 3.0), (False, -2.0)])
def test_memory_encoder_parity(models, features, binarize, score):
    meta, mine = models
    backbone, _ = features
    embed = backbone["backbone_fpn"][2]
    low = torch.randn(1, 1, S // 4, S // 4, generator=torch.Generator().manual_seed(3)) * 4
    high = torch.nn.functional.interpolate(low, size=(S, S), mode="bilinear", align_corners=False)
    with torch.inference_mode():
        feats, pos = meta._encode_new_memory(
            [embed.flatten(2).permute(2, 0, 1)],
            [(S // 16, S // 16)],
            high,
            torch.tensor([[score]]),
            is_mask_from_pts=binarize,
        )
    got = torch_graph_set(mine)[G.MEMORY_ENCODER](
        {
            "image_embed": embed.numpy(),
            "mask_logits": low.numpy(),
            "binarize": np.array([float(binarize)], np.float32),
            "object_score_logits": np.array([[score]], np.float32),
        }
    )
    close(got["mem_feats"], feats, 1e-4)
    close(got["mem_pos"], pos[0], 1e-6)


def test_memory_attention_with_rope_parity(models, features):
    """Frame 9 attends to conditioning frame 0, recent frames 3..8 and pointers of frames 0..8."""
    meta, mine = models
    backbone, out = features
    h = S // 16
    g = torch.Generator().manual_seed(4)
    mem_pos = torch.randn(1, 64, h, h, generator=g)

    def entry():
        return {
            "maskmem_features": torch.randn(1, 64, h, h, generator=g),
            "maskmem_pos_enc": [mem_pos],
            "obj_ptr": torch.randn(1, 256, generator=g),
        }

    cond = {0: entry()}
    recent = {t: entry() for t in range(1, 9)}
    embed = backbone["backbone_fpn"][2]
    with torch.inference_mode():
        want = meta._prepare_memory_conditioned_features(
            frame_idx=9,
            is_init_cond_frame=False,
            current_vision_feats=[embed.flatten(2).permute(2, 0, 1)],
            current_vision_pos_embeds=[backbone["vision_pos_enc"][2].flatten(2).permute(2, 0, 1)],
            feat_sizes=[(h, h)],
            output_dict={"cond_frame_outputs": cond, "non_cond_frame_outputs": recent},
            num_frames=20,
        )
    frames = [cond[0]] + [recent[t] for t in range(3, 9)]  # recent: the last 6, oldest first
    ptr_frames = [cond[0]] + [recent[t] for t in range(8, 0, -1)]  # newest first
    feeds = {
        "image_embed": embed.numpy(),
        "image_pos": out["image_pos"],
        "mem_feats": torch.cat([e["maskmem_features"] for e in frames]).numpy(),
        "mem_pos": mem_pos.expand(len(frames), -1, -1, -1).numpy(),
        "mem_tpos_idx": np.array([6, 5, 4, 3, 2, 1, 0], np.int64),
        "obj_ptrs": torch.cat([e["obj_ptr"] for e in ptr_frames]).numpy(),
        "obj_ptr_tpos": np.array([9, 1, 2, 3, 4, 5, 6, 7, 8], np.float32) / np.float32(15),
    }
    got = torch_graph_set(mine)[G.MEMORY_ATTENTION](feeds)
    close(got["pix_feat"], want, 1e-4)


# ---- whole streams on real-size frames -----------------------------------------------------
@pytest.fixture(scope="module", params=SEEDS, ids=lambda seed: f"seed{seed}")
def reference(request, models, tmp_path_factory):
    """Per weight seed: edgekit's torch graphs, the clip and Meta's run on it."""
    meta, mine = models if request.param == 0 else build_pair(request.param)
    folder = tmp_path_factory.mktemp(f"sam2_clip_seed{request.param}")
    frames = photo_clip(folder)
    meta_run = meta_predict(meta, folder, stream_prompts(), CORRECTIONS)
    return {"meta": meta, "model": mine, "graphs": memo_graphs(mine), "frames": frames,
            "folder": folder, "meta_run": meta_run}  # fmt: skip


def test_frames_reach_the_encoder_as_meta_loads_them(reference):
    """resize="pil-bicubic": the encoder's input is bit-exactly what Meta's video predictor
    loads from the JPEG folder (after its ImageNet normalisation, done here inside the graph);
    the anti-aliased bilinear resize is not."""
    from edgekit.segmentation.arrays import frame_to_input

    meta, frames = reference["meta"], reference["frames"]
    assert frames[0].shape == (H, W, 3)
    with torch.inference_mode():
        loaded = meta.init_state(str(reference["folder"]))["images"]  # (T, 3, S, S)
    for t, frame in enumerate(frames):
        for method, equal in (("pil-bicubic", True), ("bilinear-antialias", False)):
            got = normalised(torch.from_numpy(frame_to_input(frame, S, method))[None])[0]
            assert torch.equal(got, loaded[t]) is equal, (t, method)


def assert_meaningful(meta_run) -> None:
    """The check can fail: masks are neither empty nor full, they change over the clip and
    with the correction."""
    tracked, corrected = meta_run
    fg = np.array([[np.mean(tracked[t][k] > 0) for k in range(3)] for t in range(T)])
    assert ((fg > 0.01) & (fg < 0.99)).all(), f"trivial masks in the reference: {fg}"
    assert iou(tracked[1][0] > 0, tracked[T - 1][0] > 0) < 0.99, "masks do not evolve"
    assert iou(corrected[4][0] > 0, tracked[4][0] > 0) < 0.99, "the correction changed nothing"


def test_stream_parity_with_meta_on_real_size_frames(reference):
    assert_meaningful(reference["meta_run"])
    results, corrected = run_stream(
        reference["graphs"], reference["frames"], stream_prompts(), CORRECTIONS,
        resize="pil-bicubic",
    )  # fmt: skip
    assert_parity(frame_parity(reference["meta_run"], results, corrected))


CONTROLS = {
    "num_maskmem=5": {"num_maskmem": 5},  # a memory bank of 4 recent frames, not 6
    "no correction": {},  # the click on frame 4 left out
    "max_obj_ptrs=4": {"max_obj_ptrs": 4},  # 3 pointers of recent frames, not all 8
    "max_obj_ptrs=16": {"max_obj_ptrs": 16},  # pointer distances normalised as for a live stream
    "bilinear resize": {"resize": "bilinear-antialias"},  # the default: Meta's image predictor's
}


@pytest.mark.parametrize("control", list(CONTROLS))
def test_the_bars_fail_a_wrong_stream(reference, control):
    """Negative controls, on each weight seed: a wrong stream fails the per-frame bars."""
    config = {"resize": "pil-bicubic", **CONTROLS[control]}
    corrections = [] if control == "no correction" else CORRECTIONS
    results, corrected = run_stream(
        reference["graphs"], reference["frames"], stream_prompts((1,)), corrections, **config
    )
    if control == "no correction":  # compare frame 4 with Meta's corrected mask as well
        corrected = {4: results[4]}
    assert not passes(frame_parity(reference["meta_run"], results, corrected))


@pytest.mark.slow
def test_stream_parity_with_meta_through_onnx_runtime(reference, tmp_path):
    """The same stream through the graphs exported to ONNX, on ONNX Runtime."""
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.sam2 import graph_specs
    from edgekit.segmentation.run import graph_set_from_files

    specs = graph_specs(reference["model"])
    files = {spec.name: export_onnx(spec, tmp_path / f"{spec.name}.onnx", 17) for spec in specs}
    results, corrected = run_stream(
        graph_set_from_files(files, threads=1), reference["frames"], stream_prompts(),
        CORRECTIONS, resize="pil-bicubic",
    )  # fmt: skip
    assert_parity(frame_parity(reference["meta_run"], results, corrected))
