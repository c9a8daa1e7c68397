"""`edgekit run lens` end to end: the real simulated camera, a real classifier bundle, a log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.lens.controller import paper_grid
from edgekit.lens.run import run_lens

pytestmark = pytest.mark.slow


def test_run_lens_logs_every_decision_and_writes_a_strip(tmp_path: Path) -> None:
    log = tmp_path / "run" / "lens.jsonl"
    decisions = run_lens("sim:seed=4,lighting=dim-room", "photo-cnn", budget_k=6, frames=3, log=log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(decisions) == len(lines) == 3
    grid = {(s.iso, s.shutter_s, s.aperture_f) for s in paper_grid()}
    for row in lines:
        chosen = row["settings"]
        assert (chosen["iso"], chosen["shutter_s"], chosen["aperture_f"]) in grid
        assert row["captures"] == len(row["candidates"]) == len(row["scores"]) <= 6
        # the kept capture is the candidate VisiT scored highest, and the row logs its score
        best = int(np.argmax(row["scores"]))
        assert row["chosen_index"] == row["candidates"][best]
        assert row["score"] == max(row["scores"]) and row["score"] > min(row["scores"])
        assert row["total_s"] >= row["capture_latency_s"] > 0
    strip = log.with_suffix(".png")
    assert strip.read_bytes()[:4] == b"\x89PNG"
    assert {row["decision"] for row in lines} == {"select"}
    assert {row["variant"] for row in lines} == {"top1"}
    flipped = run_lens("sim:seed=4", "photo-cnn", 6, 2, tmp_path / "m.jsonl", variant="top1-flip")
    assert [row["variant"] for row in flipped] == ["top1-flip"] * 2
    for row in flipped:
        assert row["chosen_index"] == row["candidates"][int(np.argmax(row["scores"]))]
        assert row["score"] == max(row["scores"])
    fused = run_lens("sim:seed=4", "photo-cnn", 6, 2, tmp_path / "f.jsonl", decision="fuse")
    assert [row["decision"] for row in fused] == ["fuse", "fuse"]
    with pytest.raises(InputError, match="unknown decision 'vote'; expected one of select, fuse"):
        run_lens("sim", "photo-cnn", frames=1, log=tmp_path / "v.jsonl", decision="vote")


def test_run_lens_logs_the_time_a_late_sensor_costs(tmp_path: Path) -> None:
    """A sensor whose settings arrive 2 frames late at 30 fps: each of the K captures waits 2
    frames, the log's capture time includes them and stays above lens_time_budget's floor."""
    from edgekit.lens.controller import lens_time_budget

    spec = "sim:seed=4,settings_latency=2,frame_interval_ms=33"
    rows = run_lens(spec, "photo-cnn", budget_k=3, frames=2, log=tmp_path / "late.jsonl")
    first, second = rows
    assert first["captures"] == 3 and first["dropped_frames"] == 3 * 2
    assert first["capture_latency_s"] >= lens_time_budget(3, 1 / 0.033, 2)
    assert second["dropped_frames"] >= 2 * 2  # a repeated setting needs no wait
    assert all(row["total_s"] >= row["capture_latency_s"] for row in rows)
    plain = run_lens("sim:seed=4", "photo-cnn", budget_k=3, frames=1, log=tmp_path / "p.jsonl")
    assert plain[0]["dropped_frames"] == 0
    assert plain[0]["capture_latency_s"] < first["capture_latency_s"]


def test_a_camera_without_controls_is_a_clear_error(tmp_path: Path) -> None:
    from skimage.io import imsave

    frames = tmp_path / "frames"
    frames.mkdir()
    imsave(frames / "000.png", np.full((32, 32, 3), 128, np.uint8))
    with pytest.raises(InputError):
        run_lens(f"file:{frames}", "photo-cnn", frames=1, log=tmp_path / "x.jsonl")


def test_model_specs_name_a_recipe() -> None:
    from edgekit.build.cache import parse_model_spec, target_name

    assert parse_model_spec("photo-cnn") == ("photo-cnn",)
    assert parse_model_spec("photo-cnn:sensor-aware") == ("photo-cnn", "sensor-aware")
    assert (
        target_name("photo-cnn", "onnx-int8", "sensor-aware") == "photo-cnn:sensor-aware onnx-int8"
    )
    for bad in ("photo-cnn:", ":x", "photo-cnn:a:b"):
        with pytest.raises(InputError, match="NAME:RECIPE"):
            parse_model_spec(bad)


def test_eval_lens_model_specs_pick_the_bundles_to_bench() -> None:
    from edgekit.lens.bench import BENCH_TARGETS, lens_targets

    assert lens_targets([]) == BENCH_TARGETS
    assert ("photo-vit", "onnx-fp32", "sensor-rendered") in BENCH_TARGETS  # its Lens recipe
    assert ("photo-cnn", "onnx-int8", "sensor-aware") in BENCH_TARGETS
    assert lens_targets(["photo-cnn:sensor-aware", "photo-vit", "photo-vit"]) == (
        ("photo-cnn", "onnx-fp32", "sensor-aware"),
        ("photo-cnn", "onnx-int8", "sensor-aware"),
        ("photo-vit", "onnx-fp32"),
        ("photo-vit", "onnx-int8"),
    )
    with pytest.raises(InputError, match="needs an image classifier"):
        lens_targets(["bingoguard"])
    with pytest.raises(InputError, match="unknown model 'nope'"):
        lens_targets(["nope"])


def test_run_refuses_the_other_pipelines_options() -> None:
    """An option of one pipeline given to the other is a clear error, not silently ignored."""
    from typer.testing import CliRunner

    from edgekit.cli.app import app

    result = CliRunner().invoke(app, ["run", "lens", "--runtime", "x", "--box", "1,1,4,4"])
    assert result.exit_code == 2
    assert "--runtime, --box are not options of the lens pipeline" in result.output
    assert "its options: --out, --k, --variant, --latency-budget, --decision" in result.output
    result = CliRunner().invoke(app, ["run", "sam2-stream", "--k", "3"])
    assert result.exit_code == 2 and "--k is not an option of the sam2-stream" in result.output
    result = CliRunner().invoke(app, ["run", "sam2-stream", "--decision", "fuse"])
    assert result.exit_code == 2 and "--decision is not an option" in result.output
    result = CliRunner().invoke(app, ["run", "nope"])
    assert result.exit_code == 2 and "unknown pipeline 'nope'" in result.output
