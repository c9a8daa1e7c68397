"""The device half of ``edgekit demo``: start, deploy, run, bench, stop — on the real daemon."""

from __future__ import annotations

import json

import pytest

from edgekit.console import wide_console

pytestmark = pytest.mark.slow


def test_demo_daemon_loop(tmp_path):
    from edgekit.cli.demo_daemon import run_daemon_loop
    from edgekit.lens.bench import bench_bundles

    cnn = str(bench_bundles((("photo-cnn", "onnx-int8"),))["photo-cnn onnx-int8"].path)
    summary = run_daemon_loop(
        {"photo-cnn": cnn}, "lens,classify", tmp_path, wide_console(), seconds=3,
        bench_bundles=(cnn,), threads=1,
    )  # fmt: skip
    assert summary["stopped_cleanly"] and summary["bench_failed"] == 0
    assert summary["frames_saved"] >= 2
    assert all(
        p["processed"] > 0 and p["errors"] == 0 for p in summary["health"]["pipelines"].values()
    )
    report = json.loads((tmp_path / "devices-bench.json").read_text())
    assert {r["device"].split("/")[0] for r in report["results"]} == {"local", summary["address"]}
    assert all(r["status"] == "ok" for r in report["results"])
    lines = (tmp_path / "daemon-results.jsonl").read_text().splitlines()
    assert any(json.loads(line)["latest"] for line in lines)
    assert (tmp_path / "daemon-frames" / "frame-000.png").read_bytes()[:4] == b"\x89PNG"
