"""The benchmark engine on a tiny hand-built ONNX bundle: rows, batching, failures, JSON, table, PNG.

Real sessions, real subprocesses, no mocks; no timing assertions (speed targets live in
benchmarks, never in tests).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "edgekit.runtimes.onnxruntime", reason="the onnxruntime backend is not importable here"
)

from conftest import make_tiny_bundle  # noqa: E402

from edgekit.bench.engine import (  # noqa: E402
    BenchConfig,
    BenchTarget,
    batch_feeds,
    bench_bundle,
    bench_many,
    bench_session,
    bench_torch_eager,
    expand_targets,
    overhead,
)
from edgekit.bench.environment import environment  # noqa: E402
from edgekit.bench.plots import plot_report  # noqa: E402
from edgekit.bench.tables import load_report, print_report, write_report  # noqa: E402
from edgekit.errors import InputError  # noqa: E402
from edgekit.tensorspec import TensorSpec  # noqa: E402

FEW = BenchConfig(warmup=2, iterations=15, threads=1)
ROW_KEYS = {
    "label", "status", "error", "model", "target", "graph", "runtime", "runtime_versions",
    "device", "threads", "batch", "inputs", "size_mb", "load_ms", "first_run_ms", "latency_ms",
    "throughput_items_s", "iterations", "warmup", "measured_s", "samples_ms", "peak_rss_mb",
}  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("bench")
    return make_tiny_bundle(work / "tiny-onnx", work)


def _check_row(row: dict, batch: int, iterations: int) -> None:
    assert row["status"] == "ok", row.get("error")
    assert set(row) >= ROW_KEYS, ROW_KEYS - set(row)
    lat = row["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    assert row["iterations"] == iterations == len(row["samples_ms"])
    assert row["throughput_items_s"] == pytest.approx(batch / (lat["mean"] / 1e3))
    assert row["inputs"]["x"]["shape"] == [batch, 4]
    assert row["first_run_ms"] > 0 and row["load_ms"] > 0 and row["peak_rss_mb"] > 0
    assert row["model"] == "tiny" and row["target"] == "onnx-fp32" and row["graph"] == "main"


def test_bundle_row_in_a_fresh_subprocess(mlp_bundle: Path) -> None:
    row = bench_bundle(mlp_bundle, "onnxruntime", FEW)
    _check_row(row, batch=1, iterations=15)
    assert row["isolated"] is True and row["pid"] != os.getpid()
    assert row["runtime"] == "onnxruntime" and "onnxruntime" in row["runtime_versions"]
    assert row["size_mb"] == pytest.approx((mlp_bundle / "graphs/tiny.onnx").stat().st_size / 1e6)
    assert row["threads"] == 1


def test_batch_tiling_uses_the_golden_rows() -> None:
    golden = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "state": np.ones((4, 2))}
    specs = [TensorSpec("x", "float32", ("batch", 2)), TensorSpec("state", "float64", (4, 2))]
    tiled = batch_feeds(golden, specs, 7)
    assert tiled["x"][:, 0].tolist() == [0, 2, 4, 0, 2, 4, 0]
    assert tiled["state"] is golden["state"]
    assert batch_feeds(golden, specs, 2)["x"].tolist() == golden["x"][:2].tolist()
    with pytest.raises(InputError, match="no input has a dynamic batch axis"):
        batch_feeds({"s": golden["state"]}, specs[1:], 2)


def test_batch_and_duration_in_process(mlp_bundle: Path) -> None:
    row = bench_bundle(
        mlp_bundle, config=BenchConfig(warmup=1, iterations=10, batch=5), isolate=False
    )
    _check_row(row, batch=5, iterations=10)
    assert row["runtime"] == "onnxruntime"  # the format's default runtime

    from edgekit.bundle.format import Bundle

    bundle = Bundle.load(mlp_bundle)
    session = bundle.session(runtime="onnxruntime", threads=1)
    feeds = batch_feeds(bundle.golden()[0], bundle.graph().inputs, 1)
    timed = bench_session(session, feeds, BenchConfig(warmup=0, iterations=None, duration_s=0.05))
    assert timed["iterations"] >= 1 and timed["measured_s"] > 0


def test_failing_targets_do_not_stop_the_others(mlp_bundle: Path, tmp_path: Path) -> None:
    targets = [
        BenchTarget(bundle=str(mlp_bundle), runtime="onnxruntime"),
        BenchTarget(bundle=str(mlp_bundle), runtime="torch"),  # cannot load the onnx format
        BenchTarget(bundle=str(tmp_path / "no-such-bundle")),
    ]
    report = bench_many(targets, FEW, progress=False)
    ok, wrong_runtime, missing = report["results"]
    _check_row(ok, batch=1, iterations=15)
    assert wrong_runtime["status"] == "failed" and "runtime 'torch'" in wrong_runtime["error"]
    assert wrong_runtime["model"] == "tiny" and wrong_runtime["runtime"] == "torch"
    assert missing["status"] == "failed" and "bundle.json is missing" in missing["error"]
    assert report["environment"]["cpu"]["model"] and report["config"]["iterations"] == 15

    path = write_report(report, tmp_path / "out" / "bench.json")
    assert load_report(path) == json.loads(json.dumps(report))
    assert not list(path.parent.glob(".bench.json.*"))  # atomic write left no temp file

    from rich.console import Console

    console = Console(record=True, width=200)
    print_report(load_report(path), console=console)
    text = console.export_text()
    for needle in ("Peak RSS (MB)", "onnx-fp32", "onnxruntime", "FAILED [1]", "FAILED [2]"):
        assert needle in text
    assert "bundle.json is missing" in text

    png = plot_report(report, tmp_path / "out" / "bench.png")
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000


def test_timeout_is_a_failure_row(mlp_bundle: Path) -> None:
    config = BenchConfig(warmup=0, iterations=1, timeout_s=0.01)
    row = bench_bundle(mlp_bundle, "onnxruntime", config)
    assert row["status"] == "failed" and "timed out" in row["error"]


def test_extra_results_are_merged(mlp_bundle: Path, tmp_path: Path) -> None:
    peer = {
        "environment": {"cpu": {"model": "peer"}},
        "results": [{"model": "peer", "status": "ok"}],
    }
    path = write_report(peer, tmp_path / "peer.json")
    report = bench_many([], FEW, progress=False, extra_results=[path])
    assert report["results"] == [{"model": "peer", "status": "ok", "source": str(path)}]
    assert report["peer_environments"][str(path)]["cpu"]["model"] == "peer"
    with pytest.raises(InputError, match="no 'results' list"):
        load_report(write_report({"rows": []}, tmp_path / "bad.json"))


def test_expand_targets(mlp_bundle: Path) -> None:
    both = expand_targets([str(mlp_bundle)], ["onnxruntime", "openvino"])
    assert [(t.runtime, t.graph) for t in both] == [("onnxruntime", "main"), ("openvino", "main")]
    only = expand_targets([str(mlp_bundle)], ["openvino", "torch"])
    assert [t.runtime for t in only] == ["openvino"]
    assert [t.runtime for t in expand_targets([str(mlp_bundle)])] == [None]
    with pytest.raises(InputError, match="neither a bundle directory nor a model"):
        expand_targets(["definitely-not-a-model"])


def test_runtime_device_specs_put_cpu_and_gpu_rows_in_one_table(mlp_bundle: Path) -> None:
    from edgekit.runtimes import parse_runtime_spec

    assert parse_runtime_spec("onnxruntime@cuda") == ("onnxruntime", "cuda")
    assert parse_runtime_spec("openvino") == ("openvino", None)
    with pytest.raises(InputError, match="RUNTIME\\[@DEVICE\\]"):
        parse_runtime_spec("onnx@cuda")
    with pytest.raises(InputError, match="no device after '@'"):
        parse_runtime_spec("onnxruntime@")

    targets = expand_targets([str(mlp_bundle)], ["onnxruntime@cpu", "onnxruntime@cuda"])
    assert [(t.runtime, t.device) for t in targets] == [
        ("onnxruntime", "cpu"),
        ("onnxruntime", "cuda"),
    ]
    assert targets[1].describe().endswith("on onnxruntime@cuda")
    report = bench_many(targets, FEW, progress=False, isolate=False)
    cpu, gpu = report["results"]
    _check_row(cpu, batch=1, iterations=15)
    assert cpu["device"] == "cpu" and gpu["device"] == "cuda"
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():  # a GPU build: a real row
        assert gpu["status"] == "ok", gpu["error"]
    else:  # a CPU build: one clear error naming the device and what is available
        assert gpu["status"] == "failed" and "DeviceUnavailableError" in gpu["error"]
        assert "'cuda' is not available here" in gpu["error"] and "cpu" in gpu["error"]


def test_a_provider_fallback_is_an_error_not_a_cpu_row() -> None:
    from edgekit.errors import DeviceUnavailableError
    from edgekit.runtimes.onnxruntime import check_provider_attached, device_providers

    cuda, cpu = device_providers("cuda")  # fp32 stays fp32: TF32 off unless asked for
    assert cuda == ("CUDAExecutionProvider", {"use_tf32": "0"}) and cpu == "CPUExecutionProvider"
    trt, cuda_opt_in, _ = device_providers("tensorrt", {"use_tf32": 1})
    assert trt == "TensorrtExecutionProvider" and cuda_opt_in[1] == {"use_tf32": "1"}
    assert device_providers("cpu") == ["CPUExecutionProvider"]

    asked = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    check_provider_attached("cuda", asked, asked)
    check_provider_attached("cpu", ["CPUExecutionProvider"], ["CPUExecutionProvider"])
    with pytest.raises(DeviceUnavailableError, match="could not attach CUDAExecutionProvider"):
        check_provider_attached("cuda", asked, ["CPUExecutionProvider"])


def test_tensorrt_ep_is_a_device_only_where_tensorrt_loads(monkeypatch) -> None:
    import onnxruntime as ort

    from edgekit.runtimes import onnxruntime as ort_backend

    gpu_build = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: gpu_build)
    monkeypatch.setattr(ort_backend, "tensorrt_libraries_present", lambda: False)
    assert ort_backend.OnnxRuntime().devices() == ["cpu", "cuda"]
    monkeypatch.setattr(ort_backend, "tensorrt_libraries_present", lambda: True)
    assert ort_backend.OnnxRuntime().devices() == ["cpu", "cuda", "tensorrt"]


def test_torch_eager_row_of_a_registered_card(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from edgekit import registry
    from edgekit.card import GraphSpec, ModelCard

    # The registry is restored after this test, so no other test sees the tiny card.
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))

    @registry.register
    class BenchTinyCard(ModelCard):
        name = "bench-test-tiny"
        task = "test"

        def graphs(self) -> list[GraphSpec]:
            module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
            example = {"x": torch.zeros(1, 8)}
            return [
                GraphSpec("main", module, example, ["y"], {"x": {0: "batch"}, "y": {0: "batch"}})
            ]

        def golden_inputs(self) -> dict[str, dict[str, np.ndarray]]:
            return {"main": {"x": np.linspace(0, 1, 16, dtype=np.float32).reshape(2, 8)}}

    row = bench_torch_eager(
        "bench-test-tiny", BenchConfig(warmup=1, iterations=5, batch=3), isolate=False
    )
    assert row["status"] == "ok", row["error"]
    cpu_spec = expand_targets(["bench-test-tiny"], ["torch@cpu", "onnxruntime@cuda"])
    assert [(t.card, t.device) for t in cpu_spec] == [("bench-test-tiny", "cpu")]
    assert row["runtime"] == "torch" and row["target"] == "torch-eager-fp32"
    assert row["inputs"]["x"]["shape"] == [3, 8] and row["size_mb"] == pytest.approx(36 * 4 / 1e6)


def test_reference_runners_read_every_spec_before_a_shared_model_moves(monkeypatch) -> None:
    import torch

    from edgekit.build.verify import reference_runners
    from edgekit.card import GraphSpec, ModelCard
    from edgekit.runtimes.torch import TorchRuntime

    shared = torch.nn.Linear(4, 4)  # two graphs over one model, as SAM 2's graph set

    class Head(torch.nn.Module):
        def __init__(self, scale: float) -> None:
            super().__init__()
            self.body, self.scale = shared, scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x) * self.scale

    class SharedCard(ModelCard):
        name = "bench-test-shared"
        task = "test"

        def graphs(self) -> list[GraphSpec]:
            example = {"x": torch.zeros(1, 4)}
            return [GraphSpec(n, Head(s), example, ["y"]) for n, s in (("a", 1.0), ("b", 2.0))]

    def to_another_device(module, inputs, outputs, device="cpu", options=None):
        module.to("meta")  # what a session on a GPU does to the model both graphs share
        return (module, inputs, outputs, device)

    monkeypatch.setattr(TorchRuntime, "from_module", staticmethod(to_another_device))
    runners = reference_runners(SharedCard(), "cuda")
    assert set(runners) == {"a", "b"} and all(r[3] == "cuda" for r in runners.values())
    assert [s.name for s in runners["b"][1]] == ["x"]


def test_wrapper_overhead_is_reported(mlp_bundle: Path) -> None:
    result = overhead(mlp_bundle, threads=1, iterations=30, warmup=3)
    assert result["edgekit_ms"]["p50"] > 0 and result["bare_ms"]["p50"] > 0
    assert result["ratio_p50"] == pytest.approx(
        result["edgekit_ms"]["p50"] / result["bare_ms"]["p50"]
    )
    assert result["threads"] == 1 and result["providers"] == ["CPUExecutionProvider"]


def test_config_and_environment() -> None:
    with pytest.raises(InputError):
        BenchConfig(iterations=None)
    with pytest.raises(InputError):
        BenchConfig(batch=0)
    assert BenchConfig.from_json({"warmup": 3, "unknown": 1}).warmup == 3
    env = environment()
    assert env["cpu"]["model"] and isinstance(env["cpu"]["flags"], list)
    assert "numpy" in env["packages"] and env["python"]["version"]
    json.dumps(env)
