"""Fault tests on the real daemon process: camera disconnects, a pipeline raising on frames,
a crash in the middle of a deploy, and a 10,000-frame soak with flat memory."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from daemon_proc import DaemonProcess

from edgekit.daemon.metrics import parse_prometheus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cnn_bundle():
    from edgekit.lens.bench import bench_bundles

    return bench_bundles((("photo-cnn", "onnx-int8"),))["photo-cnn onnx-int8"].path


def test_camera_disconnect_reconnect_and_bad_frames(tmp_path, cnn_bundle):
    # the sim camera drops off every 25 captures and sends a wrong-format frame every 7th
    proc = DaemonProcess(
        tmp_path / "state", "--camera", "sim:fail_after=25,glitch_every=7",
        "--bundle", f"photo-cnn={cnn_bundle}", "--pipeline", "classify", "--fps", "0",
    )  # fmt: skip
    proc.start()
    try:
        health = proc.wait_for(
            lambda h: h["camera"]["reconnects"] >= 3 and h["pipelines"]["classify"]["errors"] >= 3,
            what="reconnects and refused frames",
        )
        status = health["pipelines"]["classify"]
        assert status["state"] == "running" and status["processed"] > 20
        assert "(H, W, 3) uint8" in status["last_error"]
        m = parse_prometheus(httpx.get(f"{proc.url}/metrics").text)
        assert m["edgekit_camera_reconnects_total"] >= 3
        assert m['edgekit_pipeline_errors_total{pipeline="classify"}'] >= 3
        before = status["processed"]
        proc.wait_for(lambda h: h["pipelines"]["classify"]["processed"] > before + 20, what="more")
    finally:
        proc.stop()


def test_crash_mid_deploy_keeps_the_old_bundle(tmp_path, cnn_bundle):
    state = tmp_path / "state"
    proc = DaemonProcess(state, "--bundle", f"photo-cnn={cnn_bundle}", "--pipeline", "classify")
    proc.start()
    serving = httpx.get(f"{proc.url}/bundles/photo-cnn").json()["current"]
    # a deploy in flight: headers and part of the archive sent, then the daemon dies
    sock = socket.create_connection(("127.0.0.1", proc.port))
    sock.sendall(
        (
            f"PUT /bundles/photo-cnn HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {proc.token}\r\n"
            "Content-Length: 500000\r\n\r\n"
        ).encode()
        + b"\0" * 20000
    )
    time.sleep(0.5)
    proc.kill()
    sock.close()
    # and what a crash between unpack and swap would leave: an unreferenced version, staging
    versions = state / "bundles" / "photo-cnn" / "versions"
    (versions / "20990101T000000-deadbeef").mkdir()
    (versions / ".20990101T000000-cafe.staging").mkdir()
    restarted = DaemonProcess(state, "--pipeline", "classify", port=proc.port).start()
    try:
        assert httpx.get(f"{restarted.url}/bundles/photo-cnn").json()["current"] == serving
        assert sorted(p.name for p in versions.iterdir()) == [serving]
        assert not list((state / "uploads").iterdir())
        assert "leftovers of an interrupted deploy" in restarted.log.read_text()
        restarted.wait_for(lambda h: h["pipelines"]["classify"]["processed"] > 3, what="serving")
    finally:
        restarted.stop()


def test_soak_10000_frames_flat_rss(tmp_path, cnn_bundle):
    proc = DaemonProcess(
        tmp_path / "state", "--camera", "sim:size=32", "--bundle", f"photo-cnn={cnn_bundle}",
        "--pipeline", "classify", "--fps", "0",
    )  # fmt: skip
    proc.start()
    try:
        rss = {}
        for mark in (2000, 10000):
            proc.wait_for(lambda h, m=mark: h["frames"] >= m, timeout=300, what=f"{mark} frames")
            rss[mark] = parse_prometheus(httpx.get(f"{proc.url}/metrics").text)["edgekit_rss_bytes"]
        health = proc.health()
        status = health["pipelines"]["classify"]
        assert status["errors"] == 0 and status["processed"] + status["dropped"] >= 9000
        growth_mb = (rss[10000] - rss[2000]) / 2**20
        assert growth_mb < 8.0, f"RSS grew {growth_mb:.1f} MB from frame 2000 to 10000"
    finally:
        proc.stop()


def test_oversized_archive_is_refused(tmp_path, cnn_bundle):
    from edgekit.bundle.archive import pack

    proc = DaemonProcess(
        tmp_path / "state", "--pipeline", "", "--max-upload-mb", "0.01"
    ).start()  # 10 KiB limit; the bundle archive is larger
    try:
        data = pack(cnn_bundle, tmp_path / "b.tar").read_bytes()
        assert len(data) > 10 * 1024
        headers = {"Authorization": f"Bearer {proc.token}"}
        r = httpx.put(f"{proc.url}/bundles/cnn", content=data, headers=headers)
        assert r.status_code == 413 and "over" in r.json()["detail"]

        def chunks():  # no Content-Length: the limit is enforced while streaming
            for i in range(0, len(data), 4096):
                yield data[i : i + 4096]

        r = httpx.put(f"{proc.url}/bundles/cnn", content=chunks(), headers=headers)
        assert r.status_code == 413
        assert httpx.get(f"{proc.url}/bundles/cnn").status_code == 404
        assert not list((tmp_path / "state" / "uploads").iterdir())
    finally:
        proc.stop()
