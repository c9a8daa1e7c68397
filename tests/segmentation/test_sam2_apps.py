"""sam2-stream end to end: ``edgekit run sam2-stream`` on a synthetic clip and on the simulated
camera (files written, masks tracked), and the real daemon running the sam2-stream pipeline on
a deployed sam2-edge bundle (latest results, prompts over HTTP, masks drawn on /frame.png)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from daemon_proc import DaemonProcess
from typer.testing import CliRunner

from edgekit.cli.app import app
from edgekit.errors import InputError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sam2_bundle() -> Path:
    from edgekit.segmentation.run import sam2_bundle

    return sam2_bundle("sam2-edge").path


def test_run_on_a_synthetic_clip_writes_masks_and_scores(sam2_bundle, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["run", "sam2-stream", "--camera", "clip:heldout:1", "--model", str(sam2_bundle),
         "--frames", "12", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "J&F" in result.output and "FPS" in result.output
    rows = [json.loads(line) for line in (out / "frames.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in rows] == list(range(12))
    # frame 0 is prompted with the true masks: the tracked masks start right on the objects
    assert min(rows[0]["iou"]) > 0.8
    assert np.mean([v for r in rows for v in r["iou"]]) > 0.5
    assert (out / "sheet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "stream.mp4").stat().st_size > 1000


def test_apps_stream_with_the_options_the_bundle_was_verified_with(sam2_bundle, tmp_path):
    """run / bench-stream / the daemon build their predictor from the bundle's recorded
    stream_config (sam2-edge: SAMURAI's settings; SAM 2's FIFO bank when the bundle records
    none); an unknown recorded option is a clear error."""
    from edgekit.bundle.format import Bundle
    from edgekit.registry import get_card
    from edgekit.segmentation.run import bundle_stream_config

    bundle = Bundle.load(sam2_bundle)
    config = bundle_stream_config(bundle)
    assert config == get_card("sam2-edge").stream_config()
    assert (config.memory_min_score, config.memory_min_iou, config.motion_weight) == (
        0.0,
        0.5,
        0.25,
    )
    recorded = bundle.manifest["preprocessing"]["stream_config"]
    recorded.update(memory_min_score=None, memory_min_iou=None, memory_min_motion=None)
    config = bundle_stream_config(bundle)
    assert (config.memory_min_score, config.memory_min_iou) == (None, None)
    bundle.manifest["preprocessing"]["stream_config"]["warp_speed"] = 9
    with pytest.raises(InputError, match=r"stream options \['warp_speed'\]"):
        bundle_stream_config(bundle)


def test_run_on_the_camera_with_a_click(sam2_bundle, tmp_path):
    from edgekit.segmentation.run import parse_prompt, run_sam2_stream

    run = run_sam2_stream(
        "sim:size=96", str(sam2_bundle), 4, tmp_path, prompt=parse_prompt(["48,48"], [], None)
    )
    assert run.frames == 4 and len(run.latency_ms) == 4 and not run.ious
    rows = [json.loads(line) for line in (tmp_path / "frames.jsonl").read_text().splitlines()]
    assert set(rows[0]["objects"]) == {"1"}


def test_bad_prompts_and_sources_are_clear_errors(sam2_bundle, tmp_path):
    from edgekit.segmentation.run import parse_prompt, run_sam2_stream

    with pytest.raises(InputError, match="--point '1;2' must be 2"):
        parse_prompt(["1;2"], [], None)
    with pytest.raises(InputError, match="--box"):
        parse_prompt([], [], "1,2,3")
    with pytest.raises(InputError, match="clip:SPLIT:INDEX"):
        run_sam2_stream("clip:nope:1", str(sam2_bundle), 2, tmp_path)
    with pytest.raises(InputError, match="outside"):
        run_sam2_stream(
            "sim:size=96", str(sam2_bundle), 2, tmp_path, prompt=parse_prompt(["500,5"], [], None)
        )
    photo = tmp_path / "photo-bundle"
    with pytest.raises(InputError, match="not a SAM 2 graph set"):
        from edgekit.lens.bench import bench_bundles

        photo = bench_bundles((("photo-cnn", "onnx-fp32"),))["photo-cnn onnx-fp32"].path
        run_sam2_stream("sim", str(photo), 2, tmp_path)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, sam2_bundle):
    state = tmp_path_factory.mktemp("sam2-daemon") / "state"
    proc = DaemonProcess(
        state, "--bundle", f"sam2-edge={sam2_bundle}", "--pipeline", "sam2-stream",
        "--camera", "sim:size=128,tour_every=1000", "--fps", "15",
    )  # fmt: skip
    proc.start()
    yield proc
    assert proc.stop() in (0, -15), proc.log.read_text()[-2000:]
    log = proc.log.read_text()
    assert "Traceback" not in log, log[-3000:]


def test_daemon_tracks_and_takes_prompts(daemon):
    health = daemon.wait_for(
        lambda h: h["pipelines"]["sam2-stream"]["processed"] >= 5, timeout=120, what="5 frames"
    )
    assert health["pipelines"]["sam2-stream"]["runtime"] == "onnxruntime"
    latest = httpx.get(f"{daemon.url}/pipelines/sam2-stream/latest").json()["latest"]
    result = latest["result"]
    assert set(result["objects"]) == {"1"}  # the automatic centre click
    assert set(result["graph_ms"]) >= {"image_encoder", "mask_decoder"}
    assert latest["frame_timestamp_s"] > 0

    body = {
        "objects": {"2": {"points": [[20, 20]], "labels": [1]}, "3": {"box": [60, 60, 120, 120]}}
    }
    denied = httpx.post(f"{daemon.url}/pipelines/sam2-stream/prompt", json=body)
    assert denied.status_code == 401
    auth = {"Authorization": f"Bearer {daemon.token}"}
    before = result["frame_index"]
    queued = httpx.post(f"{daemon.url}/pipelines/sam2-stream/prompt", json=body, headers=auth)
    assert queued.status_code == 200 and queued.json()["queued"] == [2, 3]

    def prompted(_health: dict) -> bool:
        now = httpx.get(f"{daemon.url}/pipelines/sam2-stream/latest").json()["latest"]["result"]
        return set(now["objects"]) == {"2", "3"}

    daemon.wait_for(prompted, timeout=60, what="the new objects")
    now = httpx.get(f"{daemon.url}/pipelines/sam2-stream/latest").json()["latest"]["result"]
    assert now["frame_index"] <= before + 200  # a reset stream counts frames from the prompt
    bad = httpx.post(
        f"{daemon.url}/pipelines/sam2-stream/prompt",
        json={"objects": {"x": {}}},
        headers=auth,
    )
    assert bad.status_code == 400 and "integers" in bad.text

    png = httpx.get(f"{daemon.url}/frame.png")
    assert png.status_code == 200
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png.content)).convert("RGB"))
    assert min(image.shape[:2]) >= 128  # the 128x128 camera frame with the masks drawn in
    metrics = httpx.get(f"{daemon.url}/metrics").text
    assert 'stage="segment"' in metrics


def test_bench_stream_cli_reports_flat_cost_and_writes_plot(sam2_bundle, tmp_path):
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        app,
        ["bench-stream", str(sam2_bundle), "--runtime", "onnxruntime@cpu", "--frames", "110",
         "--threads", "1", "--out", str(out), "--torch", "sam2-edge", "--runtime", "torch@cpu"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "stream-bench.json").read_text())
    eager, row = report["results"]  # torch@DEVICE places the --torch rows, the rest the bundles'
    assert eager["runtime"] == "torch@cpu" and eager["fps"] > 0 and "error" not in eager
    assert row["runtime"] == "onnxruntime@cpu" and row["frames"] == 110
    assert row["p50_ms"] > 0 and row["fps"] > 0 and 0.2 < row["late_vs_early"] < 5
    assert len(report["latency_ms"]["onnx-fp32 / onnxruntime@cpu"]) == 110
    assert (out / "stream-bench.png").read_bytes()[:4] == b"\x89PNG"
    too_short = CliRunner().invoke(app, ["bench-stream", str(sam2_bundle), "--frames", "20"])
    assert too_short.exit_code != 0
