"""OpenVINO's bf16 precision: the fp32 IR run with bf16 inference precision where the CPU has
native bf16 arithmetic, one clear error where it has not, and no other format exporting it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_exporters import TinyCard, TinyNet, images, rel_error

from edgekit.errors import InputError
from edgekit.exporters import ExportOptions, format_module
from edgekit.exporters.onnx import export_onnx


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """The exporter tests' conv + linear net: (card, graph, fp32 ONNX path, work dir, inputs,
    torch outputs)."""
    torch.manual_seed(0)
    module = TinyNet().eval()
    card = TinyCard(module)
    (graph,) = card.graphs()
    work = tmp_path_factory.mktemp("bf16")
    path = export_onnx(graph, work / "main.fp32.onnx", 17)
    x = images(3, 7)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    return card, graph, path, work, x, ref


def test_openvino_bf16_runs_in_bf16_where_the_cpu_has_it(cnn):
    """A bf16 graph keeps the fp32 IR; edgekit's runtime loads it with OpenVINO's bf16
    inference precision, which runs where the CPU has native bf16 and is refused elsewhere."""
    ov = pytest.importorskip("openvino")
    from edgekit.bundle.format import GraphEntry
    from edgekit.bundle.runtime import runtime_options
    from edgekit.errors import DeviceUnavailableError
    from edgekit.runtimes import get_runtime

    card, graph, path, work, x, ref = cnn
    art = format_module("openvino").export_graph(
        graph, path, work / "ov-bf16", "bf16", card, ExportOptions()
    )
    xml = art.files[0]
    assert xml.name == "main.bf16.xml" and art.details["inference_precision"] == "bf16"
    entry = GraphEntry("main", [xml.name], "openvino", "bf16", [], [])
    options = runtime_options(entry, "openvino", 1, {"config": {"NUM_STREAMS": 1}})
    assert options.extra["config"] == {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": 1}
    fp32_entry = GraphEntry("main", [xml.name], "openvino", "fp32", [], [])
    assert "config" not in runtime_options(fp32_entry, "openvino", 1).extra
    runtime = get_runtime("openvino")
    if "BF16" not in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        with pytest.raises(DeviceUnavailableError, match="no native bf16 arithmetic"):
            runtime.load(xml, "cpu", options)
        return
    got = runtime.load(xml, "cpu", options).run({"image": x})["logits"]
    error = rel_error(got, ref)
    assert 0 < error < 0.02  # bf16 arithmetic: not the fp32 result, close to it
    fp32 = runtime.load(xml, "cpu", runtime_options(fp32_entry, "openvino", 1))
    np.testing.assert_allclose(fp32.run({"image": x})["logits"], ref, atol=1e-4, rtol=1e-4)


def test_openvino_bf16_is_refused_on_a_cpu_without_native_bf16(cnn, monkeypatch):
    pytest.importorskip("openvino")
    from edgekit.errors import DeviceUnavailableError
    from edgekit.runtimes import RuntimeOptions, get_runtime

    card, graph, path, work, x, _ = cnn
    art = format_module("openvino").export_graph(
        graph, path, work / "ov-b", "bf16", card, ExportOptions()
    )
    runtime = get_runtime("openvino")
    real = runtime._core.get_property

    def capabilities(device, name):  # an AVX2-only CPU's answer
        if name == "OPTIMIZATION_CAPABILITIES":
            return ["WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]
        return real(device, name)

    monkeypatch.setattr(runtime._core, "get_property", capabilities)
    bf16 = RuntimeOptions(1, {"config": {"INFERENCE_PRECISION_HINT": "bf16"}})
    with pytest.raises(DeviceUnavailableError, match="no native bf16 arithmetic.*fp32 or int8"):
        runtime.load(art.files[0], "cpu", bf16)
    runtime.load(art.files[0], "cpu", RuntimeOptions(1)).run({"image": x})  # f32 still loads


def test_bf16_is_an_openvino_precision_only(cnn):
    from edgekit.exporters.base import Target

    card, graph, path, work, _, _ = cnn
    assert Target.parse("openvino-bf16") == Target("openvino", "bf16")
    for fmt in ("onnx", "torch"):
        assert "bf16" not in format_module(fmt).PRECISIONS
    with pytest.raises(InputError, match="onnx exports fp32, fp16, int8, not 'bf16'"):
        format_module("onnx").export_graph(graph, path, work / "x", "bf16", card, ExportOptions())
