"""End-to-end through the real CLI in a subprocess: export, verify, selftest, bench, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "user_model.py"


def edgekit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("edgekit", path=os.path.dirname(sys.executable)) or "edgekit"
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def test_help_is_fast_and_lists_commands() -> None:
    started = time.perf_counter()
    out = edgekit("--help")
    assert out.returncode == 0
    for command in ("models", "export", "verify", "selftest", "bench", "runtimes", "train", "eval"):
        assert command in out.stdout
    assert time.perf_counter() - started < 10  # generous: this is a smoke check, not a benchmark


def test_models_lists_the_registry() -> None:
    out = edgekit("models")
    assert out.returncode == 0, out.stderr
    assert "minilm" in out.stdout and "photo-cnn" in out.stdout


def test_runtimes_names_what_to_install_verbatim() -> None:
    out = edgekit("runtimes")
    assert out.returncode == 0, out.stderr
    assert "onnxruntime" in out.stdout and "cpu" in out.stdout
    text = " ".join(out.stdout.split())
    try:
        import tensorrt  # noqa: F401
    except ImportError:  # the hint keeps its brackets (rich markup must not eat "[gpu]")
        assert "edgekit[gpu]" in text.replace("│ ", "").replace(" │", ""), out.stdout


@pytest.fixture(scope="module")
def user_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "user-onnx"
    res = edgekit(
        "export",
        f"{FIXTURE}:make",
        "--input-shape",
        "x=1x3x32x32",
        "--to",
        "onnx",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr + res.stdout
    return out


def test_export_user_module_then_verify_and_selftest(user_bundle: Path) -> None:
    manifest = json.loads((user_bundle / "bundle.json").read_text())
    assert manifest["source"]["card"] == "module" and manifest["report"]["passed"] is True
    assert manifest["graphs"]["main"]["inputs"][0]["shape"] == ["batch", 3, 32, 32]
    res = edgekit("verify", str(user_bundle))
    assert res.returncode == 0, res.stderr + res.stdout
    assert "PASS" in res.stdout
    res = edgekit("selftest", str(user_bundle))
    assert res.returncode == 0 and "ok main/output" in res.stdout


def test_corrupt_bundle_is_a_clear_error(user_bundle: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(user_bundle, broken)
    graph = next((broken / "graphs").glob("*.onnx"))
    graph.write_bytes(graph.read_bytes()[:-10])
    res = edgekit("selftest", str(broken))
    assert res.returncode == 2
    assert "wrong sha256" in res.stderr and "Traceback" not in res.stderr


def test_bad_inputs_give_one_clear_error(tmp_path: Path) -> None:
    res = edgekit("export", "no-such-model")
    assert res.returncode == 2 and "unknown model 'no-such-model'" in res.stderr
    res = edgekit(
        "export", f"{FIXTURE}:make", "--input-shape", "x=1xthreex32", "--out", str(tmp_path / "x")
    )
    assert res.returncode == 2 and "x=1xthreex32" in res.stderr
    res = edgekit("export", f"{FIXTURE}:make", "--input-shape", "x=1x3x32x32", "--to", "coreml")
    assert res.returncode == 2 and "unknown export format 'coreml'" in res.stderr
    res = edgekit("verify", str(tmp_path / "missing"))
    assert res.returncode == 2 and "bundle.json is missing" in res.stderr
    res = edgekit("eval", "sam2-edge", "--model", "photo-cnn")  # --model is eval lens's
    assert res.returncode == 2 and "--model picks the classifiers" in res.stderr
    variant = edgekit("eval", "lens", "--variant", "top1-mirror")
    assert variant.returncode == 2 and "unknown VisiT variant 'top1-mirror'" in variant.stderr
    assert "top1-flip" in variant.stderr  # the message lists the variants
    other = edgekit("eval", "sam2-edge", "--variant", "top1-flip")
    assert other.returncode == 2 and "--variant picks the VisiT of `edgekit eval lens`" in (
        other.stderr
    )
    calib = edgekit("eval", "lens", "--calib-per-class", "0")
    assert calib.returncode == 2 and "--calib-per-class is 0; it needs at least 1" in calib.stderr
    scenes = edgekit("eval", "sam2-edge", "--test-per-class", "8")
    assert scenes.returncode == 2 and "are options of `edgekit eval lens`" in scenes.stderr
    for out in (res, variant, other, calib, scenes):
        assert "Traceback" not in out.stderr


def test_tensorrt_without_gpu_is_one_clear_error(tmp_path: Path) -> None:
    try:
        import tensorrt  # noqa: F401

        pytest.skip("tensorrt is installed here; the GPU test covers it")
    except ImportError:
        pass
    res = edgekit(
        "export",
        f"{FIXTURE}:make",
        "--input-shape",
        "x=1x3x32x32",
        "--to",
        "tensorrt",
        "--precision",
        "fp16",
        "--out",
        str(tmp_path / "trt"),
    )
    assert res.returncode == 2
    assert (
        "tensorrt" in res.stderr and "edgekit[gpu]" in res.stderr and "Traceback" not in res.stderr
    )
    assert not (tmp_path / "trt").exists()


def _resign(bundle: Path) -> None:
    """Recompute bundle.json checksums, as an attacker or a buggy tool that edits files would."""
    from edgekit.bundle import sha256_file

    manifest = json.loads((bundle / "bundle.json").read_text())
    manifest["files"] = {rel: sha256_file(bundle / rel) for rel in manifest["files"]}
    (bundle / "bundle.json").write_text(json.dumps(manifest))


def test_verify_fails_with_exit_1_when_the_artifact_disagrees(
    user_bundle: Path, tmp_path: Path
) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    tampered = tmp_path / "tampered"
    shutil.copytree(user_bundle, tampered)
    graph = next((tampered / "graphs").glob("*.onnx"))
    model = onnx.load(graph)
    first = model.graph.initializer[0]
    first.CopyFrom(
        numpy_helper.from_array(numpy_helper.to_array(first) * np.float32(1.5), first.name)
    )
    onnx.save(model, graph)
    _resign(tampered)
    res = edgekit("verify", str(tampered))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED" in res.stderr and "violations" in res.stderr
    assert "FAIL" in res.stdout  # the table is printed before the verdict


def test_bench_cli_writes_json_and_plot(user_bundle: Path, tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    res = edgekit("bench", str(user_bundle), "--runtime", "onnxruntime", "--runtime", "openvino",
                  "--iterations", "5", "--warmup", "1", "--threads", "1",
                  "--json", str(out_json), "--plot", str(out_png))  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out_json.read_text())
    assert [r["runtime"] for r in report["results"]] == ["onnxruntime", "openvino"]
    assert all(r["status"] == "ok" for r in report["results"])
    assert report["environment"]["cpu"] and out_png.read_bytes()[:4] == b"\x89PNG"


def test_negative_budget_is_refused(user_bundle: Path) -> None:
    res = edgekit("verify", str(user_bundle), "--budget", "-0.5")
    assert res.returncode == 2 and "relative drop in [0, 1)" in res.stderr
