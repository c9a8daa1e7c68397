"""Conformance suite: every runtime in ``edgekit.runtimes.RUNTIMES`` honours the Session contract.

One small torch model with two inputs and two outputs and a dynamic batch axis is exported once
per module to ONNX, OpenVINO IR, a torch.export ``.pt2`` and, where TensorRT and a GPU exist, a
TensorRT engine. Each runtime loads its format and must agree with torch eager; a runtime whose
SDK is missing here skips with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from edgekit.errors import BundleError, DeviceUnavailableError, InputError, MissingDependencyError
from edgekit.runtimes import RUNTIMES, RuntimeOptions, Session, available_runtimes, get_runtime
from edgekit.tensorspec import TensorSpec

ATOL = 1e-4
INPUTS = [
    TensorSpec("image", "float32", ("batch", 3, 16, 16)),
    TensorSpec("vec", "float32", ("batch", 8)),
]
OUTPUTS = [
    TensorSpec("logits", "float32", ("batch", 5)),
    TensorSpec("feat", "float32", ("batch", 4)),
]
ARTIFACT = {
    "torch": "model.pt2",
    "onnxruntime": "model.onnx",
    "openvino": "model.xml",
    "tensorrt": "model.engine",
}


class TwoInTwoOut(nn.Module):
    """image (B, 3, 16, 16), vec (B, 8) float32 -> logits (B, 5), feat (B, 4) float32."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(8, 4)
        self.head = nn.Linear(4, 5)

    def forward(self, image: torch.Tensor, vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = self.conv(image).mean(dim=(2, 3))  # (B, 4)
        gate = torch.relu(self.fc(vec))  # (B, 4)
        return self.head(pooled + gate), pooled * gate


def make_feeds(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),
        "vec": rng.standard_normal((batch, 8)).astype(np.float32),
    }


def eager(model: nn.Module, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.no_grad():
        logits, feat = model(torch.from_numpy(feeds["image"]), torch.from_numpy(feeds["vec"]))
    return {"logits": logits.numpy(), "feat": feat.numpy()}


def build_tensorrt_engine(onnx_path: Path, out: Path) -> Path:
    """fp32 engine (TF32 off) with a batch profile 1..4; only called where TensorRT + a GPU exist."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(onnx_path.read_bytes()), [
        parser.get_error(i) for i in range(parser.num_errors)
    ]
    config = builder.create_builder_config()
    if hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    profile = builder.create_optimization_profile()
    for spec in INPUTS:
        rest = tuple(spec.shape[1:])
        profile.set_shape(spec.name, (1, *rest), (2, *rest), (4, *rest))
    config.add_optimization_profile(profile)
    out.write_bytes(bytes(builder.build_serialized_network(network, config)))
    return out


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return TwoInTwoOut().eval()


@pytest.fixture(scope="module")
def artifacts(model: nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """model.onnx, model.xml/.bin, model.pt2 (+ model.engine where TensorRT runs) in one folder."""
    import openvino as ov

    out = tmp_path_factory.mktemp("runtime-conformance")
    example = tuple(torch.from_numpy(a) for a in make_feeds(2).values())
    batch = torch.export.Dim("batch", min=1, max=1024)
    dynamic = {"image": {0: batch}, "vec": {0: batch}}
    torch.onnx.export(
        model,
        example,
        str(out / "model.onnx"),
        input_names=[s.name for s in INPUTS],
        output_names=[s.name for s in OUTPUTS],
        dynamic_shapes=dynamic,
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    # save_model compresses weights to fp16 unless told not to: that alone breaks fp32 parity
    ov.save_model(ov.convert_model(out / "model.onnx"), out / "model.xml", compress_to_fp16=False)
    program = torch.export.export(model, example, dynamic_shapes=dynamic)
    io_json = json.dumps(
        {"inputs": [s.to_json() for s in INPUTS], "outputs": [s.to_json() for s in OUTPUTS]}
    )
    torch.export.save(program, out / "model.pt2", extra_files={"edgekit_io.json": io_json})
    torch.export.save(program, out / "bare.pt2")
    if available_runtimes()["tensorrt"] is None and get_runtime("tensorrt").devices():
        build_tensorrt_engine(out / "model.onnx", out / "model.engine")
    return out


def usable_runtime(name: str):
    try:
        return get_runtime(name)
    except MissingDependencyError as exc:
        pytest.skip(f"{name}: {exc}")


def default_device(runtime) -> str:
    devices = runtime.devices()
    if not devices:
        pytest.skip(f"{runtime.name} has no usable device here")
    return "cpu" if "cpu" in devices else devices[0]


@pytest.fixture(scope="module", params=list(RUNTIMES))
def runtime_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def session(runtime_name: str, artifacts: Path) -> Session:
    runtime = usable_runtime(runtime_name)
    return runtime.load(artifacts / ARTIFACT[runtime_name], default_device(runtime))


def test_io_names_dtypes_and_dynamic_batch(session: Session) -> None:
    inputs, outputs = session.io()
    for got, want in zip((inputs, outputs), (INPUTS, OUTPUTS), strict=True):
        assert [s.name for s in got] == [s.name for s in want]
        assert [s.dtype for s in got] == [s.dtype for s in want]
        for g, w in zip(got, want, strict=True):
            assert isinstance(g.shape[0], str), f"{g.describe()}: batch axis should be dynamic"
            assert tuple(g.shape[1:]) == tuple(w.shape[1:])


@pytest.mark.parametrize("batch", [1, 3])
def test_outputs_match_torch_eager(session: Session, model: nn.Module, batch: int) -> None:
    feeds = make_feeds(batch, seed=batch)
    got, want = session.run(feeds), eager(model, feeds)
    assert list(got) == ["logits", "feat"]
    for name, ref in want.items():
        assert got[name].shape == ref.shape and got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], ref, atol=ATOL, rtol=0, err_msg=name)


def _bad_feeds() -> dict[str, tuple[dict[str, np.ndarray], str]]:
    good = make_feeds(2)
    return {
        "missing": ({"image": good["image"]}, "vec"),
        "unknown": ({**good, "extra": good["vec"]}, "extra"),
        "dtype": ({**good, "image": good["image"].astype(np.float64)}, "image"),
        "rank": ({**good, "vec": good["vec"][0]}, "vec"),
        "shape": ({**good, "image": good["image"][:, :, :8, :8]}, "image"),
    }


@pytest.mark.parametrize("case", list(_bad_feeds()))
def test_wrong_feed_is_an_input_error(session: Session, case: str) -> None:
    feeds, named = _bad_feeds()[case]
    with pytest.raises(InputError) as info:
        session.run(feeds)
    message = str(info.value)
    assert f"'{named}'" in message or named in message
    spec = {s.name: s for s in session.inputs}.get(named, session.inputs[0])
    assert spec.describe() in message, message


def test_threads_option_is_accepted(runtime_name: str, artifacts: Path, model: nn.Module) -> None:
    runtime = usable_runtime(runtime_name)
    sess = runtime.load(
        artifacts / ARTIFACT[runtime_name], default_device(runtime), RuntimeOptions(threads=1)
    )
    feeds = make_feeds(2)
    np.testing.assert_allclose(
        sess.run(feeds)["logits"], eager(model, feeds)["logits"], atol=ATOL, rtol=0
    )


def test_repeated_runs_are_identical_and_not_aliased(session: Session) -> None:
    feeds = make_feeds(2, seed=7)
    first = session.run(feeds)
    kept = {k: v.copy() for k, v in first.items()}
    session.run(make_feeds(2, seed=8))
    second = session.run(feeds)
    for name in kept:
        np.testing.assert_array_equal(
            first[name], kept[name], err_msg=f"{name} overwritten by a later run"
        )
        np.testing.assert_array_equal(second[name], kept[name])


def test_devices_and_versions(runtime_name: str) -> None:
    runtime = usable_runtime(runtime_name)
    devices = runtime.devices()
    if runtime_name == "tensorrt":
        assert "cpu" not in devices
    else:
        assert "cpu" in devices
    assert runtime.versions() and all(runtime.versions().values())


def test_unknown_device_is_unavailable(runtime_name: str, artifacts: Path) -> None:
    runtime = usable_runtime(runtime_name)
    with pytest.raises(DeviceUnavailableError, match="no-such-device"):
        runtime.load(artifacts / ARTIFACT[runtime_name], "no-such-device")


def test_unreadable_artifact_is_a_bundle_error(runtime_name: str, tmp_path: Path) -> None:
    runtime = usable_runtime(runtime_name)
    device = default_device(runtime)
    bad = tmp_path / ARTIFACT[runtime_name]
    with pytest.raises(BundleError):
        runtime.load(bad, device)  # missing file
    bad.write_bytes(b"not a model")
    bad.with_suffix(".bin").write_bytes(b"")
    with pytest.raises(BundleError):
        runtime.load(bad, device)


def test_tensorrt_missing_is_one_clear_error() -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorrt is installed here")
    import edgekit.runtimes.tensorrt  # noqa: F401 - the module itself imports without tensorrt

    with pytest.raises(MissingDependencyError) as info:
        get_runtime("tensorrt")
    assert info.value.package == "tensorrt" and "edgekit[gpu]" in str(info.value)
    assert available_runtimes()["tensorrt"] == str(info.value)


def test_a_backend_whose_sdk_is_missing_is_one_clear_error(monkeypatch) -> None:
    import sys

    from edgekit import runtimes

    # A machine without OpenVINO (e.g. a GPU box with only onnxruntime-gpu): its SDK's import
    # fails, and every other runtime still lists.
    monkeypatch.setitem(sys.modules, "openvino", None)
    monkeypatch.delitem(sys.modules, "edgekit.runtimes.openvino", raising=False)
    monkeypatch.setattr(runtimes, "_CACHE", {})
    with pytest.raises(MissingDependencyError) as info:
        get_runtime("openvino")
    assert info.value.package == "openvino" and "pip install openvino" in str(info.value)
    status = available_runtimes()
    assert status["openvino"] == str(info.value) and status["onnxruntime"] is None


def test_from_module_is_the_eager_reference(model: nn.Module) -> None:
    from edgekit.runtimes.torch import TorchRuntime

    sess = TorchRuntime.from_module(model, INPUTS, OUTPUTS, options=RuntimeOptions(threads=1))
    assert sess.io() == (INPUTS, OUTPUTS) and sess.runtime == "torch"
    feeds = make_feeds(3)
    got, want = sess.run(feeds), eager(model, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    with pytest.raises(InputError, match="vec"):
        sess.run({"image": feeds["image"]})


class DictOut(nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"double": x * 2, "neg": -x}


def test_from_module_maps_dicts_single_tensors_and_counts() -> None:
    from edgekit.runtimes.torch import TorchRuntime

    x_spec = [TensorSpec("x", "float32", ("batch", 2))]
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    outs = [
        TensorSpec("neg", "float32", ("batch", 2)),
        TensorSpec("double", "float32", ("batch", 2)),
    ]
    got = TorchRuntime.from_module(DictOut(), x_spec, outs).run({"x": x})
    np.testing.assert_array_equal(got["neg"], -x)
    np.testing.assert_array_equal(got["double"], 2 * x)
    single = TorchRuntime.from_module(nn.Identity(), x_spec, outs[:1]).run({"x": x[::-1]})
    np.testing.assert_array_equal(single["neg"], x[::-1])
    with pytest.raises(InputError, match="expected 2"):
        TorchRuntime.from_module(nn.Identity(), x_spec, outs).run({"x": x})
    with pytest.raises(DeviceUnavailableError):
        TorchRuntime.from_module(nn.Identity(), x_spec, outs, device="no-such-device")


def test_pt2_without_io_file_gets_specs_from_its_signature(
    artifacts: Path, model: nn.Module
) -> None:
    sess = get_runtime("torch").load(artifacts / "bare.pt2")
    inputs, outputs = sess.io()
    assert [s.dtype for s in inputs] == ["float32", "float32"] and len(outputs) == 2
    assert isinstance(inputs[0].shape[0], str) and inputs[0].shape[1:] == (3, 16, 16)
    feeds = dict(zip([s.name for s in inputs], make_feeds(1).values(), strict=True))
    got = list(sess.run(feeds).values())
    np.testing.assert_allclose(got[0], eager(model, make_feeds(1))["logits"], atol=ATOL, rtol=0)


def test_openvino_loads_onnx_and_pins_fp32(artifacts: Path, model: nn.Module) -> None:
    from edgekit.runtimes.openvino import compile_config

    runtime = usable_runtime("openvino")
    sess = runtime.load(artifacts / "model.onnx", "cpu", RuntimeOptions(threads=1))
    assert [s.name for s in sess.outputs] == ["logits", "feat"]
    feeds = make_feeds(2)
    np.testing.assert_allclose(
        sess.run(feeds)["feat"], eager(model, feeds)["feat"], atol=ATOL, rtol=0
    )
    config = compile_config("cpu", RuntimeOptions(threads=2, extra={"hint": "THROUGHPUT"}))
    assert config == {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": 2,
    }
    assert (
        compile_config("cpu", RuntimeOptions(extra={"INFERENCE_PRECISION_HINT": "bf16"}))[
            "INFERENCE_PRECISION_HINT"
        ]
        == "bf16"
    )
    with pytest.raises(InputError, match="unknown OpenVINO option"):
        compile_config("cpu", RuntimeOptions(extra={"providers": ["x"]}))


def test_onnxruntime_extra_options(artifacts: Path) -> None:
    runtime = usable_runtime("onnxruntime")
    extra = {
        "providers": ["CPUExecutionProvider"],
        "graph_optimization_level": "basic",
        "session_config": {"session.intra_op.allow_spinning": "0"},
    }
    sess = runtime.load(artifacts / "model.onnx", "cpu", RuntimeOptions(threads=1, extra=extra))
    assert sess.providers == ["CPUExecutionProvider"]
    assert sess.run(make_feeds(1))["logits"].shape == (1, 5)
    with pytest.raises(InputError, match="graph_optimization_level"):
        runtime.load(
            artifacts / "model.onnx",
            "cpu",
            RuntimeOptions(extra={"graph_optimization_level": "max"}),
        )
