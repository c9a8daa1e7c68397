"""``edgekit bench-stream --meta``: Meta's SAM2VideoPredictor beside edgekit on the same weights.

The clip is a pan over a real photograph; the report's agreement columns must be able to show a
disagreement (a shifted mask) and must show parity for edgekit's torch and ONNX Runtime graphs
(the bars of tests/models/test_sam2_parity_meta.py). Timings are reported, never asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.segmentation import meta_compare as M


def test_pan_frames_are_a_moving_window_on_a_real_photo():
    frames = M.pan_frames(160)
    assert frames.shape == (160, *M.FRAME_HW, 3) and frames.dtype == np.uint8
    steps = [np.abs(frames[t + 1].astype(int) - frames[t]).mean() for t in range(159)]
    assert min(steps) > 1.0  # every frame moves
    assert frames.std() > 30  # a photograph, not a flat image
    # the window turns back at the photo's edge instead of running off it
    assert M._bounce(0, 10) == 0 and M._bounce(10, 10) == 10 and M._bounce(13, 10) == 7
    assert M._bounce(20, 10) == 0


def test_agreement_reports_a_disagreement():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(4, 32, 48)).astype(np.float32)
    same = M.agreement(reference.copy(), reference)
    assert same == {"worst_iou": 1.0, "mean_iou": 1.0, "max_abs_logit": 0.0}
    shifted = reference.copy()
    shifted[2] = np.roll(reference[2], 5, axis=1)
    moved = M.agreement(shifted, reference)
    assert moved["worst_iou"] < 0.6 and 0.6 < moved["mean_iou"] < 1.0
    assert moved["max_abs_logit"] > 1.0
    shifted[0] = 0.0  # frame 0 is the prompted frame: not part of the tracked frames
    assert M.agreement(shifted, reference)["worst_iou"] == moved["worst_iou"]


def test_only_the_sam2_card_and_enough_frames():
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="sam2 card"):
        M.compare_with_meta(get_card("photo-cnn"))
    card = get_card("sam2", random_weights=True, image_size=128)
    with pytest.raises(InputError, match=f"at least {M.MIN_FRAMES} frames"):
        M.compare_with_meta(card, frames=8)


@pytest.mark.slow
def test_side_by_side_with_meta_keeps_parity(tmp_path):
    pytest.importorskip("sam2.build_sam", reason="Meta's sam2 is a test dependency")
    from edgekit.registry import get_card

    card = get_card("sam2", random_weights=True, image_size=128)
    report = M.compare_with_meta(
        card, frames=M.MIN_FRAMES, threads=1, progress=False, runtimes=("onnxruntime",)
    )
    rows = {r["runtime"]: r for r in report["results"]}
    assert [r["target"] for r in report["results"]] == [
        "Meta SAM2VideoPredictor", "sam2 (torch)", "sam2 onnx fp32"
    ]  # fmt: skip
    assert report["full_from"] == 8 and report["image_size"] == 128
    for runtime in ("onnxruntime",):
        assert rows[runtime]["worst_iou"] >= 0.999
        assert rows[runtime]["max_abs_logit"] <= 5e-5
    torch_row = report["results"][1]
    assert torch_row["worst_iou"] >= 0.999 and torch_row["max_abs_logit"] <= 5e-5
    for row in report["results"]:
        assert len(row["latency_ms"]) == M.MIN_FRAMES and row["speedup"] > 0
    # the object is tracked, not empty or everywhere: agreement on nothing would prove nothing
    assert 0.02 < report["results"][0]["mask_fraction"] < 0.9


def test_cli_meta_refuses_runtime_flags():
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    result = CliRunner().invoke(app, ["bench-stream", "--meta", "--runtime", "onnxruntime"])
    assert result.exit_code != 0
    assert "--meta picks its runtimes" in result.output


def test_frame_gflops_counts_the_attention_products():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from edgekit.models.sam2.graphs import example_inputs, graph_modules
    from edgekit.registry import get_card

    card = get_card("sam2", random_weights=True, image_size=128)
    counted = M.frame_gflops(card)
    config = card.stream_config()
    model = card.model()
    inputs = example_inputs(model, config.num_maskmem, config.max_obj_ptrs, num_points=1)
    with torch.inference_mode(), FlopCounterMode(display=False) as fused:
        graph_modules(model)["memory_attention"](*inputs["memory_attention"].values())
    tokens = (128 // 16) ** 2
    keys = config.num_maskmem * tokens + config.max_obj_ptrs * 4  # a pointer is 4 tokens of 64
    layers, width = model.config.memory_attention_layers, 256
    attention = layers * 2 * 2 * tokens * (tokens + keys) * width  # QK^T and AV, self + cross
    assert counted["memory_attention"] * 1e9 - fused.get_total_flops() == pytest.approx(attention)
    assert counted["image_encoder"] > counted["mask_decoder"] > 0
