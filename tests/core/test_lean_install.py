"""The lean device install: ``pip install 'edgekit[sim]'`` (no torch, no export toolchain) in a
fresh venv loads, self-tests, serves, streams, scores and benches bundles exported by the full
install, end to end through the real daemon; build-side commands say which extra they need.

The venv is built from the package index (pip's cache makes it quick after the first time);
where the index cannot be reached the module is skipped with that reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import httpx
import numpy as np
import pytest
from daemon_proc import DaemonProcess

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_MARKERS = ("No matching distribution", "Could not fetch", "NewConnectionError", "Errno -3")


def _run(*cmd: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
    )


@pytest.fixture(scope="module")
def lean(tmp_path_factory) -> Path:
    """A fresh venv with ``edgekit[sim]`` only (editable, so it runs this checkout): its bin/."""
    home = tmp_path_factory.mktemp("lean") / "venv"
    venv.EnvBuilder(with_pip=True).create(home)
    bin_dir = home / "bin"
    pip = [
        str(bin_dir / "python"),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    # the base dependencies plus the simulated camera's (scikit-image for its photos)
    done = _run(*pip, "-e", f"{ROOT}[sim]")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(marker in output for marker in OFFLINE_MARKERS):
            pytest.skip(f"the package index is not reachable: {output.strip().splitlines()[-1]}")
        raise AssertionError(f"pip install edgekit[sim] failed:\n{output[-3000:]}")
    return bin_dir


def test_the_lean_install_has_no_build_side(lean: Path) -> None:
    for module in ("torch", "onnx", "openvino", "transformers", "matplotlib", "sklearn"):
        done = _run(str(lean / "python"), "-c", f"import {module}")
        assert done.returncode != 0, f"{module} is installed in the lean venv"
    imports = "import edgekit.daemon.app, edgekit.runtimes.onnxruntime, edgekit.text_scorer"
    assert _run(str(lean / "python"), "-c", imports).returncode == 0
    assert _run(str(lean / "edgekit"), "--help").returncode == 0
    runtimes = _run(str(lean / "edgekit"), "runtimes")
    assert runtimes.returncode == 0 and "onnxruntime" in runtimes.stdout


@pytest.mark.parametrize("command", [["export", "minilm"], ["train", "photo-cnn"], ["demo"]])
def test_build_side_commands_name_the_extra_in_one_line(lean: Path, command: list[str]) -> None:
    done = _run(str(lean / "edgekit"), *command)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'edgekit[export]'" in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.fixture(scope="module")
def bundles() -> dict[str, Path]:
    """Bundles exported by the full install (this venv), cached like the other daemon tests."""
    from edgekit.lens.bench import bench_bundles
    from edgekit.segmentation.run import sam2_bundle

    built = bench_bundles((("photo-cnn", "onnx-int8"), ("bingoguard", "onnx-int8")))
    return {
        "photo-cnn": built["photo-cnn onnx-int8"].path,
        "bingoguard": built["bingoguard onnx-int8"].path,
        "sam2-edge": sam2_bundle("sam2-edge").path,
    }


def test_the_lean_daemon_serves_streams_and_scores_deployed_bundles(lean, bundles, tmp_path):
    daemon = DaemonProcess(
        tmp_path / "state", "--camera", "sim", "--pipeline", "classify,sam2-stream",
        "--bundle", f"sam2-edge={bundles['sam2-edge']}",
        "--bundle", f"photo-cnn={bundles['photo-cnn']}", "--fps", "20",
        python=str(lean / "python"),
    )  # fmt: skip
    daemon.start()
    try:
        with daemon.client() as client:
            # a new version over HTTP: checksums, self-test on the device, then the swap
            deployed = client.deploy(bundles["photo-cnn"], "photo-cnn")
            assert deployed["check"]["passed"], deployed
            client.deploy(bundles["bingoguard"], "bingoguard")
            scored = client.score("bingoguard", texts=["The capital of France is Paris."])
        assert scored["unsafe"] == [False]
        health = daemon.wait_for(
            lambda h: all(p["processed"] >= 3 for p in h["pipelines"].values()),
            timeout=120,
            what="3 frames through classify and sam2-stream",
        )
        assert health["pipelines"]["classify"]["runtime"] == "onnxruntime"
        assert health["pipelines"]["sam2-stream"]["runtime"] == "onnxruntime"
        latest = httpx.get(f"{daemon.url}/pipelines/sam2-stream/latest").json()["latest"]
        assert latest["result"]["objects"], latest
        classify = httpx.get(f"{daemon.url}/pipelines/classify/latest").json()["latest"]
        assert 0 < classify["result"]["prob"] <= 1
    finally:
        daemon.stop_clean()


def test_the_lean_install_benches_a_bundle(lean, bundles, tmp_path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PATH": f"{lean}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = _run(
        str(lean / "edgekit"), "bench", str(bundles["photo-cnn"]), "--iterations", "20",
        "--warmup", "2", "--out", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    packages = report["environment"]["packages"]
    assert "onnxruntime" in packages and "torch" not in packages  # measured in the lean venv
    (row,) = report["results"]
    assert row["status"] == "ok" and row["runtime"] == "onnxruntime" and row["iterations"] == 20


def test_the_lean_set_resolves_to_wheels_for_the_named_devices(tmp_path) -> None:
    """Raspberry Pi 5 and Jetson (aarch64) and x86-64: binary wheels exist for every base
    requirement (resolved by pip for that platform, without the hardware)."""
    out = tmp_path / "platforms.json"
    done = _run(sys.executable, str(ROOT / "scripts/check_lean_platforms.py"), "--json", str(out))
    if done.returncode == 3:
        pytest.skip(f"the package index is not reachable: {done.stdout.strip()[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    platforms = json.loads(out.read_text())["platforms"]
    assert len(platforms) == 3 and all(row["ok"] for row in platforms.values())
    for row in platforms.values():
        assert row["onnxruntime"] and "torch" not in row["versions"]


def test_visit_resizes_without_scikit_image_close_to_it(monkeypatch) -> None:
    """The lean install has no scikit-image: captures of another size than the classifier's
    are resized by the numpy antialiased bilinear instead, close to scikit-image's on a real
    photo (a camera frame of 480 x 480 down to 64 x 64)."""
    from skimage import data

    from edgekit.lens.visit import default_preprocess

    frames = data.astronaut()[None, :480, :480]  # (1, 480, 480, 3) uint8, a real photo
    with_skimage = default_preprocess(frames, (64, 64))
    monkeypatch.setitem(sys.modules, "skimage.transform", None)  # import now fails
    without = default_preprocess(frames, (64, 64))
    assert without.shape == with_skimage.shape == (1, 3, 64, 64) and without.dtype == np.float32
    diff = np.abs(without - with_skimage)
    assert diff.mean() < 0.005 and diff.max() < 0.05, (diff.mean(), diff.max())
    assert not np.array_equal(without, with_skimage)  # the fallback really ran
