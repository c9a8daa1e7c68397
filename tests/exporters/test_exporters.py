"""Exporter round-trips: a user nn.Module (conv + linear, dynamic batch) and a tiny BERT go
through every format available here and are run with the raw SDKs (onnxruntime, openvino,
torch.export) against torch eager. No mocks."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.card import GraphSpec, ModelCard
from edgekit.errors import InputError, MissingDependencyError
from edgekit.exporters import ExportOptions, format_module
from edgekit.exporters.onnx import export_onnx, exporter_used

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


class TinyNet(torch.nn.Module):
    """image (B, 3, 16, 16) float32 -> logits (B, 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(image))), 2)  # (B, 8, 8, 8)
        return self.fc(x.flatten(1))


def images(n: int, seed: int) -> np.ndarray:
    """Smooth, image-like inputs (B, 3, 16, 16) float32 in [0, 1]."""
    rng = np.random.default_rng(seed)
    base = rng.random((n, 3, 4, 4)).astype(np.float32)
    return np.kron(base, np.ones((1, 1, 4, 4), np.float32)) * 0.8 + 0.2 * rng.random(
        (n, 3, 16, 16), dtype=np.float32
    )


class TinyCard(ModelCard):
    name = "tiny-cnn"
    task = "test"

    def __init__(self, module: torch.nn.Module, **options) -> None:
        super().__init__(**options)
        self.module = module

    def graphs(self) -> list[GraphSpec]:
        return [
            GraphSpec(
                "main",
                self.module,
                {"image": torch.from_numpy(images(1, 0))},
                ["logits"],
                {"image": {0: "batch"}, "logits": {0: "batch"}},
            )
        ]

    def calibration_data(self, limit: int = 64) -> dict[str, list[dict[str, np.ndarray]]]:
        return {"main": [{"image": images(2, 100 + i)} for i in range(min(limit, 16))]}


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    torch.manual_seed(0)
    module = TinyNet()
    module.train()  # handed over straight from training: the exporter must not care
    with torch.no_grad():
        module.bn.running_mean.uniform_(-0.2, 0.2)
        module.bn.running_var.uniform_(0.5, 1.5)
    card = TinyCard(module)
    (graph,) = card.graphs()
    work = tmp_path_factory.mktemp("cnn")
    path = export_onnx(graph, work / "main.fp32.onnx", 17)
    assert module.training  # eval only for the export
    module.eval()
    x = images(3, 7)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    return card, graph, path, work, x, ref


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def ops(path: Path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def test_onnx_fp32_roundtrip_dynamic_batch(cnn):
    card, graph, path, work, x, ref = cnn
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["image"]
    assert [o.name for o in model.graph.output] == ["logits"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert exporter_used(path) == "torchscript"
    art = format_module("onnx").export_graph(
        graph, path, work / "fp32", "fp32", card, ExportOptions()
    )
    assert art.files[0].is_file() and art.details["exporter"] == "torchscript"
    np.testing.assert_allclose(ort_run(art.files[0], {"image": x}), ref, atol=1e-4, rtol=1e-4)


def test_dynamo_exporter_roundtrip(cnn, tmp_path):
    card, graph, _, _, x, ref = cnn
    path = export_onnx(graph, tmp_path / "dynamo.onnx", 18, exporter="dynamo")
    assert exporter_used(path) == "dynamo"
    assert [o.name for o in onnx.load(str(path)).graph.output] == ["logits"]
    np.testing.assert_allclose(ort_run(path, {"image": x}), ref, atol=1e-4, rtol=1e-4)


def test_onnx_fp16_keeps_float32_io(cnn):
    card, graph, path, work, x, ref = cnn
    art = format_module("onnx").export_graph(
        graph, path, work / "fp16", "fp16", card, ExportOptions()
    )
    model = onnx.load(str(art.files[0]))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    assert rel_error(ort_run(art.files[0], {"image": x}), ref) < 1e-2


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_onnx_int8_static_qdq(cnn, method):
    card, graph, path, work, x, ref = cnn
    options = ExportOptions(int8_mode="static", calibration_method=method)
    art = format_module("onnx").export_graph(graph, path, work / method, "int8", card, options)
    found = ops(art.files[0])
    assert found["QuantizeLinear"] > 0 and found["DequantizeLinear"] > 0
    info = art.details["int8"]
    assert info["calibration_method"] == method and info["calibration_samples"] == 16
    assert info["per_channel"] and info["nodes_quantized"] >= 2  # conv and linear
    got = ort_run(art.files[0], {"image": x})
    assert rel_error(got, ref) < 0.1
    assert (got.argmax(1) == ref.argmax(1)).mean() >= 2 / 3


def test_int8_weights_use_7_bits_on_x86_without_vnni(cnn):
    """reduce_range defaults to "auto": 7-bit weights for static int8 on x86 CPUs without an
    int8 dot-product instruction (where u8 x s8 kernels saturate int16 sums), 8-bit elsewhere;
    the bundle's details record the choice and where it came from; a bad value is refused."""
    from edgekit.bench.environment import cpu_flags
    from edgekit.exporters.onnx_int8 import reduce_range_default

    assert reduce_range_default(["sse4_2", "avx2", "fma"], "x86_64")
    assert not reduce_range_default(["avx2", "avx512f", "avx512_vnni"], "x86_64")
    assert not reduce_range_default(["avx2", "avx_vnni"], "AMD64")
    assert not reduce_range_default(["avx2", "amx_int8"], "x86_64")
    assert not reduce_range_default(["neon", "asimd"], "aarch64")
    assert not reduce_range_default([], "x86_64")  # flags unknown: keep 8-bit weights
    card, graph, path, work, x, ref = cnn
    options = ExportOptions(int8_mode="static")
    art = format_module("onnx").export_graph(graph, path, work / "auto", "int8", card, options)
    info = art.details["int8"]
    assert info["reduce_range"] == reduce_range_default(cpu_flags())
    assert info["reduce_range_from"].startswith("auto")
    options = ExportOptions(int8_mode="dynamic")  # dynamic int8 keeps 8-bit weights
    art = format_module("onnx").export_graph(graph, path, work / "dyn", "int8", card, options)
    assert art.details["int8"]["reduce_range"] is False
    options = ExportOptions(int8_mode="dynamic", extra={"reduce_range": False})
    art = format_module("onnx").export_graph(graph, path, work / "off", "int8", card, options)
    assert art.details["int8"]["reduce_range"] is False
    assert art.details["int8"]["reduce_range_from"] == "option"
    bad = ExportOptions(int8_mode="dynamic", extra={"reduce_range": "yes"})
    with pytest.raises(InputError, match="reduce_range='yes'"):
        format_module("onnx").export_graph(graph, path, work / "bad", "int8", card, bad)
    # uint8 weights (u8 x u8 kernels) never saturate: full 8 bits, unless asked otherwise
    options = ExportOptions(int8_mode="static", extra={"weight_type": "uint8"})
    art = format_module("onnx").export_graph(graph, path, work / "u8", "int8", card, options)
    assert art.details["int8"]["weight_type"] == "uint8"
    assert art.details["int8"]["reduce_range"] is False
    assert art.details["int8"]["reduce_range_from"] == "auto: uint8 weights do not saturate"
    assert rel_error(ort_run(art.files[0], {"image": x}), ref) < 0.1
    bad = ExportOptions(int8_mode="static", extra={"weight_type": "int4"})
    with pytest.raises(InputError, match="int8 weight type 'int4'"):
        format_module("onnx").export_graph(graph, path, work / "bad4", "int8", card, bad)


class TinyAttention(torch.nn.Module):
    """image (B, 3, 16, 16) -> logits (B, 10): one self-attention over 16 patch tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(48, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        patches = image.unfold(2, 4, 4).unfold(3, 4, 4)  # (B, 3, 4, 4, 4, 4)
        tokens = self.embed(patches.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2))
        q, k, v = self.qkv(tokens).chunk(3, dim=-1)  # (B, 16, 16) each
        attention = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1)
        return self.head((attention @ v).mean(1))


def test_int8_keeps_products_of_two_activations_float_without_vnni(tmp_path, monkeypatch):
    """Where static int8 uses 7-bit weights for lack of VNNI, a MatMul of two activations
    (attention's QK^T and probabilities x V) stays float: no weight range can stop its uint8 x
    uint8 sums from saturating. With VNNI, or with reduce_range set explicitly, it is quantized."""
    from edgekit.exporters import onnx_int8

    torch.manual_seed(0)
    card = TinyCard(TinyAttention().eval())
    card.architecture = "transformer"  # MatMul/Gemm-only static int8, as photo-vit
    (graph,) = card.graphs()
    path = export_onnx(graph, tmp_path / "attn.onnx", 17)
    products = onnx_int8.activation_matmuls(path)
    assert len(products) == 2  # q @ k^T and attention @ v; the Linear layers have weights
    onnx_fmt = format_module("onnx")
    for saturating in (True, False):
        monkeypatch.setattr(onnx_int8, "reduce_range_default", lambda s=saturating: s)
        art = onnx_fmt.export_graph(
            graph, path, tmp_path / str(saturating), "int8", card, ExportOptions()
        )
        info = art.details["int8"]
        assert info["reduce_range"] is saturating
        nodes = onnx.load(str(art.files[0])).graph.node
        dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
        fed = {n.name for n in nodes if n.op_type == "MatMul" and set(n.input) & dequantized}
        if saturating:
            assert sorted(info["float_activation_matmuls"]) == sorted(products)
            assert not fed & set(products) and fed  # the weight MatMuls are still int8
        else:
            assert "float_activation_matmuls" not in info and set(products) <= fed
    explicit = ExportOptions(extra={"reduce_range": True})
    art = onnx_fmt.export_graph(graph, path, tmp_path / "explicit", "int8", card, explicit)
    assert "float_activation_matmuls" not in art.details["int8"]


def test_onnx_int8_dynamic(cnn):
    card, graph, path, work, x, ref = cnn
    art = format_module("onnx").export_graph(
        graph, path, work / "dyn", "int8", card, ExportOptions(int8_mode="dynamic")
    )
    found = ops(art.files[0])
    assert found["DynamicQuantizeLinear"] > 0
    assert found["MatMulInteger"] + found["ConvInteger"] > 0
    assert "calibration_method" not in art.details["int8"]
    assert rel_error(ort_run(art.files[0], {"image": x}), ref) < 0.1


def test_int8_float_nodes_stay_float(cnn):
    """Nodes matching --keep-float regexes are left unquantized by both int8 exporters."""
    card, graph, path, work, x, ref = cnn
    options = ExportOptions(int8_mode="dynamic", float_nodes=("/fc/.*",))
    art = format_module("onnx").export_graph(graph, path, work / "keep", "int8", card, options)
    assert art.details["int8"]["float_nodes"], "the head (/fc/...) is matched"
    assert all(name.startswith("/fc/") for name in art.details["int8"]["float_nodes"])
    found = ops(art.files[0])
    assert found["ConvInteger"] > 0 and found["MatMulInteger"] == 0  # conv int8, head float
    ov_art = format_module("openvino").export_graph(
        graph, path, work / "ov-keep", "int8", card, ExportOptions(float_nodes=("/fc/.*",))
    )
    assert ov_art.details["int8"]["float_nodes"] == ["/fc/.*"]
    assert ExportOptions().int8_float_nodes(card) == card.int8_float_nodes == ()


class BertEmbedder(torch.nn.Module):
    """input_ids, attention_mask int64 (B, S) -> mean-pooled hidden state (B, H)."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class TinyBertCard(TinyCard):
    name = "tiny-bert"
    ort_fusion = {"model_type": "bert", "num_heads": 4, "hidden_size": 64}
    int8_mode = "dynamic"

    def graphs(self) -> list[GraphSpec]:
        ids = torch.randint(5, 100, (1, 12))
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                "encoder",
                self.module,
                {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                ["embedding"],
                {"input_ids": axes, "attention_mask": axes, "embedding": {0: "batch"}},
            )
        ]


def test_tiny_bert_fusion_and_dynamic_int8(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()
    implementation = bert.config._attn_implementation
    card = TinyBertCard(BertEmbedder(bert).eval())
    (graph,) = card.graphs()
    path = export_onnx(graph, tmp_path / "bert.onnx", 17)
    assert bert.config._attn_implementation == implementation  # patch restored
    ids = np.random.default_rng(3).integers(5, 100, (2, 9)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        ref = card.module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    onnx_fmt = format_module("onnx")
    art = onnx_fmt.export_graph(graph, path, tmp_path / "fp32", "fp32", card, ExportOptions())
    fused = ops(art.files[0])
    assert fused["Attention"] == 2 and fused["SkipLayerNormalization"] >= 2
    assert art.details["fusion"]["fused"]["Attention"] == 2
    np.testing.assert_allclose(ort_run(art.files[0], feeds), ref, atol=1e-4, rtol=1e-3)
    # the MiniLM recipe: residual Add + LayerNorm kept apart, with the runtime told not to re-fuse
    card.ort_fusion = {**card.ort_fusion, "enable_skip_layer_norm": False}
    q = onnx_fmt.export_graph(graph, path, tmp_path / "int8", "int8", card, ExportOptions())
    found = ops(q.files[0])
    assert found["QAttention"] == 2 and found["MatMulInteger"] > 0
    assert found["LayerNormalization"] >= 4 and not found["SkipLayerNormalization"]
    assert q.details["int8"]["int8_mode"] == "dynamic"
    config = q.details["ort_session_config"]
    assert config == {"optimization.disable_specified_optimizers": "SkipLayerNormFusion"}
    attention = next(n for n in onnx.load(str(q.files[0])).graph.node if n.op_type == "QAttention")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in attention.attribute}
    assert attrs["mask_filter_value"] == -40.0  # keeps padded keys out of exp's slow path
    so = ort.SessionOptions()
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    session = ort.InferenceSession(str(q.files[0]), so, providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)[0]
    cosine = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cosine.min() > 0.98
    # a card whose int8 measured better unfused (sae-polysemy) skips fusion for int8 only,
    # and --fuse still forces it
    card.ort_fusion_int8 = False
    assert ExportOptions().fuses(card, "fp32") and not ExportOptions().fuses(card, "int8")
    assert ExportOptions(fuse=True).fuses(card, "int8")
    assert not ExportOptions(fuse=False).fuses(card, "fp32")
    plain = onnx_fmt.export_graph(graph, path, tmp_path / "int8u", "int8", card, ExportOptions())
    assert plain.details["fused"] is False and not ops(plain.files[0])["QAttention"]
    assert ops(plain.files[0])["MatMulInteger"] > 0


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_openvino_roundtrip(cnn, precision):
    ov = pytest.importorskip("openvino")
    card, graph, path, work, x, ref = cnn
    options = ExportOptions(calibration_method="minmax")
    art = format_module("openvino").export_graph(graph, path, work / "ov", precision, card, options)
    xml, weights = art.files
    assert xml.suffix == ".xml" and weights.is_file()
    # f32 hint: on AVX512-BF16/AMX CPUs OpenVINO would otherwise compute fp32 IR in bf16
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({"image": x})[compiled.output(0)]
    if precision == "fp32":
        np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    else:
        assert rel_error(got, ref) < (0.02 if precision == "fp16" else 0.1)
    if precision == "int8":
        assert art.details["int8"]["nodes_quantized"] > 0


def test_openvino_finds_products_of_two_activations():
    """On x86 without VNNI the NNCF exporter keeps these float (they saturate int16 sums)."""
    ov = pytest.importorskip("openvino")
    from edgekit.exporters.openvino import activation_matmuls

    ops_ = ov.opset13
    x = ops_.parameter([1, 4, 8], np.float32, name="x")
    weight = ops_.convert(ops_.constant(np.ones((8, 8), np.float16)), np.float32)
    linear = ops_.matmul(x, weight, False, False)  # weight behind a decompression Convert
    linear.set_friendly_name("linear")
    scores = ops_.matmul(linear, x, False, True)  # (1, 4, 4): activation x activation
    scores.set_friendly_name("scores")
    sdpa = ops_.scaled_dot_product_attention(linear, x, x, causal=False)
    sdpa.set_friendly_name("attention")
    model = ov.Model([scores, sdpa], [x])
    assert activation_matmuls(model) == ["attention", "scores"]


def test_torch_program_roundtrip(cnn, tmp_path):
    card, graph, _, _, x, ref = cnn
    art = format_module("torch").export_graph(graph, None, tmp_path, "fp32", card, ExportOptions())
    extra = {"edgekit_io.json": ""}
    program = torch.export.load(str(art.files[0]), extra_files=extra)
    io = json.loads(extra["edgekit_io.json"])
    assert io["inputs"] == [{"name": "image", "dtype": "float32", "shape": ["batch", 3, 16, 16]}]
    assert io["outputs"] == [{"name": "logits", "dtype": "float32", "shape": ["batch", 10]}]
    with torch.no_grad():
        got = program.module()(torch.from_numpy(x)).numpy()  # batch 3; the example had 1
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)


def _has_trt_and_cuda() -> bool:
    return importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="tensorrt installed")
def test_tensorrt_missing_is_one_clear_error():
    with pytest.raises(MissingDependencyError, match=r"tensorrt.*edgekit\[gpu\]"):
        format_module("tensorrt")


@pytest.mark.gpu
@pytest.mark.skipif(not _has_trt_and_cuda(), reason="needs tensorrt and a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_tensorrt_builds_engine(cnn, precision):
    import tensorrt as trt

    card, graph, path, work, x, ref = cnn
    art = format_module("tensorrt").export_graph(
        graph, path, work / "trt", precision, card, ExportOptions()
    )
    assert art.details["tensorrt"] == trt.__version__ and art.details["gpu"]
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(
        art.files[0].read_bytes()
    )
    context = engine.create_execution_context()
    image = torch.from_numpy(x).cuda()
    out = torch.empty((3, 10), device="cuda")
    context.set_input_shape("image", tuple(image.shape))
    context.set_tensor_address("image", image.data_ptr())
    context.set_tensor_address("logits", out.data_ptr())
    assert context.execute_async_v3(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert rel_error(out.cpu().numpy(), ref) < (0.02 if precision == "fp16" else 0.1)


def test_bad_names_are_input_errors(cnn):
    card, graph, path, work, *_ = cnn
    onnx_fmt = format_module("onnx")
    with pytest.raises(InputError, match="fp32, fp16, int8"):
        onnx_fmt.export_graph(graph, path, work / "bad", "int4", card, ExportOptions())
    with pytest.raises(InputError, match="minmax, entropy, percentile"):
        onnx_fmt.export_graph(
            graph, path, work / "bad", "int8", card, ExportOptions(calibration_method="kl")
        )
    with pytest.raises(InputError, match="static, dynamic"):
        onnx_fmt.export_graph(
            graph, path, work / "bad", "int8", card, ExportOptions(int8_mode="qat")
        )
    with pytest.raises(InputError, match="declares no ort_fusion"):
        onnx_fmt.export_graph(graph, path, work / "bad", "fp32", card, ExportOptions(fuse=True))
    with pytest.raises(InputError, match="fp32 only"):
        format_module("torch").export_graph(
            graph, None, work / "bad", "fp16", card, ExportOptions()
        )
    with pytest.raises(InputError, match="openvino exports"):
        format_module("openvino").export_graph(
            graph, path, work / "bad", "int4", card, ExportOptions()
        )
    with pytest.raises(InputError, match="unknown ort_fusion option"):
        from edgekit.exporters.onnx_fusion import split_fusion_args

        split_fusion_args({"model_type": "bert", "enable_warp_drive": True})


def test_quantizer_per_tensor_fallback_lines_are_dropped_only_while_quantizing(caplog):
    """ONNX Runtime's quantizer warns once per 1-D weight (a norm's scale) that per-channel
    axis 1 is out of range and quantizes it per tensor; the exporter drops exactly those lines
    while it quantizes, and every other message (and those lines at any other time) stays."""
    import logging

    from edgekit.exporters.onnx_int8 import quiet_per_tensor_fallback

    fallback = "Axis 1 is out-of-range for weight 'model.blocks.0.norms.0.weight' with rank 1"
    with caplog.at_level(logging.WARNING), quiet_per_tensor_fallback():
        logging.warning(fallback)
        logging.warning("Please consider to run pre-processing before quantization")
    with caplog.at_level(logging.WARNING):
        logging.warning(fallback)
    assert [r.getMessage() for r in caplog.records] == [
        "Please consider to run pre-processing before quantization",
        fallback,
    ]
