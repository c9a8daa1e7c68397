"""ONNX int8: static QDQ (calibrated on the card's real data) or dynamic quantization.

Mode and calibration come from ``ExportOptions`` first, then the card's declarations
(``card.int8_mode``, ``card.calibration_method``). Static quantization writes QDQ pairs
(QuantizeLinear / DequantizeLinear, uint8 activations, int8 weights, per-channel weights by
default) that ONNX Runtime fuses into integer kernels; dynamic quantization stores int8
weights and quantizes activations at run time (MatMulInteger, QAttention, ...), which needs
no calibration data and suits transformers on CPUs with VNNI.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import ExportError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.card import GraphSpec, ModelCard
    from edgekit.exporters.base import ExportOptions

INT8_MODES = ("static", "dynamic")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
TRANSFORMER_STATIC_OPS = ("MatMul", "Gemm")
INTEGER_OPS = (
    "MatMulInteger", "ConvInteger", "QAttention", "QEmbedLayerNormalization", "QGemm",
    "QLinearMatMul", "QLinearConv", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM",
)  # fmt: skip


def is_transformer(card: ModelCard) -> bool:
    """True when the card declares a transformer (ORT fusion args or ``architecture``)."""
    return bool(card.ort_fusion) or getattr(card, "architecture", "") == "transformer"


def resolve_int8_mode(card: ModelCard, options: ExportOptions) -> str:
    """The int8 mode to use: options first, then the card; InputError on an unknown name."""
    mode = str(options.int8_mode or card.int8_mode).lower()
    if mode not in INT8_MODES:
        raise InputError(f"unknown int8 mode '{mode}'; expected one of {', '.join(INT8_MODES)}")
    return mode


def resolve_calibration_method(card: ModelCard, options: ExportOptions) -> str:
    """The calibration method name: options first, then the card; InputError when unknown."""
    method = str(options.calibration_method or card.calibration_method).lower()
    if method not in CALIBRATION_METHODS:
        raise InputError(
            f"unknown calibration method '{method}'; expected one of "
            f"{', '.join(CALIBRATION_METHODS)}"
        )
    return method


def calibration_feeds(graph: GraphSpec, card: ModelCard, limit: int) -> list[dict[str, np.ndarray]]:
    """The card's calibration feeds for ``graph``, checked against the graph's input names.

    Each feed maps every input name to a numpy array, e.g. {"image": (1, 3, H, W) float32}.
    """
    data = card.calibration_data(limit)
    if graph.name not in data or not data[graph.name]:
        raise InputError(
            f"card '{card.name}' has no calibration data for graph '{graph.name}' "
            f"(calibration_data() returned graphs {sorted(data)})"
        )
    names = list(graph.example_inputs)
    feeds = []
    for i, feed in enumerate(data[graph.name][:limit]):
        missing = [n for n in names if n not in feed]
        if missing:
            raise InputError(
                f"calibration feed {i} of graph '{graph.name}' lacks input(s) {missing}; "
                f"expected {names}"
            )
        feeds.append({n: np.ascontiguousarray(feed[n]) for n in names})
    return feeds


class FeedReader:
    """An onnxruntime CalibrationDataReader over a list of feed dicts (name -> numpy array)."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self.feeds = feeds
        self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self.feeds)


def preprocess(src: Path, dst: Path, fused: bool) -> bool:
    """quant_pre_process: shape inference (symbolic, knows contrib ops) and, for plain graphs,
    ONNX Runtime's basic optimisations (constant folding, Conv+BatchNorm). True when it ran.

    A fused graph keeps its contrib ops as they are (no optimisation pass), but still gets
    symbolic shapes so every tensor has a type for the quantizer.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    try:
        quant_pre_process(
            str(src), str(dst), skip_optimization=fused, skip_onnx_shape=fused, auto_merge=True
        )
    except Exception:  # symbolic shape inference gives up on some graphs; quantize as exported
        shutil.copyfile(src, dst)
        return False
    return True


def float_nodes(
    src: Path, patterns: tuple[str, ...], given: list[str] | None = None
) -> list[str] | None:
    """Node names of ``src`` kept in floating point: ``given`` plus every node whose name
    fully matches one of the regexes ``patterns``; None when there are none."""
    import re

    import onnx

    names = list(given or [])
    if patterns:
        compiled = [re.compile(p) for p in patterns]
        graph = onnx.load(str(src), load_external_data=False).graph
        for node in graph.node:
            if any(p.fullmatch(node.name) for p in compiled):
                names.append(node.name)
                if node.op_type == "Gemm":  # quantize_dynamic first rewrites Gemm as
                    names.append(f"{node.name}_MatMul")  # <name>_MatMul + <name>_Add
    return names or None


def activation_matmuls(src: Path) -> list[str]:
    """Names of the MatMul nodes of ``src`` whose two inputs are both computed (neither an
    initializer nor a Constant's output): attention's QK^T and probabilities x V."""
    import onnx

    graph = onnx.load(str(src), load_external_data=False).graph
    constant = {i.name for i in graph.initializer}
    constant |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    return [
        n.name
        for n in graph.node
        if n.op_type == "MatMul" and not any(i in constant for i in n.input)
    ]


# x86 int8 dot-product instructions. Without one, ONNX Runtime's u8 x s8 kernels add pairs of
# products into int16 with saturation (vpmaddubsw), which 8-bit weights can overflow.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def reduce_range_default(flags: list[str] | None = None, machine: str | None = None) -> bool:
    """Whether int8 weights should use 7 bits on this machine (``reduce_range``): True on an
    x86 CPU whose feature ``flags`` (bench.environment.cpu_flags(); read when None) show no VNNI / AMX
    instruction; False elsewhere, and where the flags cannot be read."""
    import platform

    from edgekit.bench.environment import cpu_flags

    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64", "x86", "i686"):
        return False
    flags = cpu_flags() if flags is None else flags
    return bool(flags) and not set(flags) & set(VNNI_FLAGS)


WEIGHT_TYPES = ("int8", "uint8")


def weight_format(extra: dict[str, Any], mode: str) -> tuple[str, bool, str]:
    """(weight type, reduce_range, where the choice came from) for ``options.extra`` and the
    int8 ``mode``.

    ``extra["weight_type"]``: "int8" (default; u8 x s8 kernels, the fastest on x86) or "uint8"
    (u8 x u8 kernels, which widen before adding and never saturate; 8-bit weights, no
    reduce_range). ``extra["reduce_range"]``: true, false or "auto" (default): 7-bit int8
    weights for **static** int8 on x86 without VNNI (``reduce_range_default``), where u8 x s8
    sums saturate: on an AVX2-only EPYC it lifted photo-cnn's top-1 agreement from 0.89 to
    pass, while dynamic quantization lost with it (sae-polysemy's decision flips 0.128 with
    8-bit weights, 0.138 with 7-bit)."""
    weight = extra.get("weight_type", "int8")
    if weight not in WEIGHT_TYPES:
        raise InputError(
            f"int8 weight type {weight!r} (--int8-weights / option weight_type): expected one "
            f"of {', '.join(WEIGHT_TYPES)} "
            "(uint8: u8 x u8 kernels that never saturate, slower on x86)"
        )
    chosen = extra.get("reduce_range", "auto")
    if chosen != "auto" and not isinstance(chosen, bool):
        raise InputError(
            f"int8 option reduce_range={chosen!r}: expected true, false or 'auto' (7-bit "
            "weights on x86 CPUs without VNNI)"
        )
    if chosen != "auto":
        return weight, chosen, "option"
    if weight == "uint8":
        return weight, False, "auto: uint8 weights do not saturate"
    on = mode == "static" and reduce_range_default()
    return weight, on, "auto: x86 without VNNI, 7-bit weights" if on else "auto: 8-bit weights"


def quantize_int8(
    src: Path, dst: Path, graph: GraphSpec, card: ModelCard, options: ExportOptions, *, fused: bool
) -> dict[str, Any]:
    """Quantize the fp32 ONNX file ``src`` to int8 at ``dst``; return what was done.

    ``options.extra`` may hold "weight_type" and "reduce_range" (``weight_format``; a bundle
    is verified on the machine that builds it, so the defaults follow the building CPU),
    "op_types_to_quantize" and "nodes_to_exclude" (lists of names). Static quantization of a
    transformer quantizes only MatMul/Gemm by default: calibrated ranges on the residual
    stream, layer norms and the additive attention mask (~-3.4e38) wreck the embedding
    (all-MiniLM-L6-v2: cosine to fp32 0.32 with every op quantized, 0.93 MatMul-only).
    """
    import onnx
    from onnxruntime.quantization import QuantType

    mode = resolve_int8_mode(card, options)
    method = resolve_calibration_method(card, options) if mode == "static" else None
    extra = options.extra
    op_types = extra.get("op_types_to_quantize")
    if op_types is None and mode == "static" and is_transformer(card):
        op_types = list(TRANSFORMER_STATIC_OPS)
    weight, reduce_range, reduce_range_from = weight_format(extra, mode)
    common: dict[str, Any] = {
        "per_channel": bool(options.per_channel),
        "reduce_range": reduce_range,
        "weight_type": QuantType.QUInt8 if weight == "uint8" else QuantType.QInt8,
        "op_types_to_quantize": op_types,
        "nodes_to_exclude": float_nodes(
            src, options.int8_float_nodes(card), extra.get("nodes_to_exclude")
        ),
        "extra_options": {"DefaultTensorType": onnx.TensorProto.FLOAT},
    }
    details: dict[str, Any] = {
        "int8_mode": mode,
        "per_channel": common["per_channel"],
        "reduce_range": common["reduce_range"],
        "reduce_range_from": reduce_range_from,
        "weight_type": weight,
        "op_types": op_types or "all",
    }
    with tempfile.TemporaryDirectory(prefix="edgekit-int8-") as tmp:
        pre = Path(tmp) / "pre.onnx"
        details["preprocessed"] = preprocess(src, pre, fused)
        common["nodes_to_exclude"] = float_nodes(
            pre, options.int8_float_nodes(card), extra.get("nodes_to_exclude")
        )
        if mode == "static" and reduce_range_from.startswith("auto") and reduce_range_default():
            # On x86 without VNNI no weight range keeps a product of two uint8 activations from
            # saturating u8 x s8 sums, and with u8 x u8 kernels (weight_type uint8) quantizing
            # it still cost agreement (photo-vit max prob error 0.05 float, 0.14 int8): keep
            # those float there, as the NNCF exporter does
            details["float_activation_matmuls"] = activation_matmuls(pre)
            common["nodes_to_exclude"] = [
                *(common["nodes_to_exclude"] or []),
                *details["float_activation_matmuls"],
            ] or None
        details["float_nodes"] = common["nodes_to_exclude"] or []
        try:
            if mode == "static":
                details.update(_quantize_static(pre, dst, graph, card, options, method, common))
            else:
                _quantize_dynamic(pre, dst, common)
        except (InputError, ExportError):
            raise
        except Exception as exc:
            raise ExportError(
                f"int8 {mode} quantization of graph '{graph.name}' failed: {exc}"
            ) from exc
    details.update(quantized_nodes(dst))
    return details


# ONNX Runtime's quantizer logs this (on the root logger) for every 1-D weight, such as a
# LayerNorm scale, when per-channel quantization asks for axis 1; it then quantizes that weight
# per tensor, which is what a 1-D weight needs. One line per norm layer buries the export's output.
_PER_TENSOR_FALLBACK = re.compile(r"Axis \d+ is out-of-range for weight '.*' with rank 1")


class _DropPerTensorFallback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _PER_TENSOR_FALLBACK.search(record.getMessage())


@contextmanager
def quiet_per_tensor_fallback() -> Iterator[None]:
    """While quantizing, drop ONNX Runtime's per-tensor fallback warnings for 1-D weights (only
    those: every other message of the quantizer still reaches the log)."""
    root, drop = logging.getLogger(), _DropPerTensorFallback()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def _quantize_static(
    src: Path,
    dst: Path,
    graph: GraphSpec,
    card: ModelCard,
    options: ExportOptions,
    method: str | None,
    common: dict[str, Any],
) -> dict[str, Any]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }
    feeds = calibration_feeds(graph, card, options.calibration_size)
    with quiet_per_tensor_fallback():
        quantize_static(
            str(src),
            str(dst),
            FeedReader(feeds),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            calibrate_method=methods[str(method)],
            **common,
        )
    return {
        "format": "QDQ",
        "activation_type": "uint8",
        "calibration_method": method,
        "calibration_samples": len(feeds),
    }


def _quantize_dynamic(src: Path, dst: Path, common: dict[str, Any]) -> None:
    from onnxruntime.quantization import quantize_dynamic

    with quiet_per_tensor_fallback():
        quantize_dynamic(str(src), str(dst), **common)


def quantized_nodes(path: Path) -> dict[str, Any]:
    """Count what quantization produced in the ONNX file at ``path``.

    Returns {"nodes_quantized": float ops fed by a DequantizeLinear (static QDQ) plus integer
    ops (dynamic), "quant_ops": {op type: count} for Q/DQ and integer op types}.
    """
    import onnx

    nodes = onnx.load(str(path), load_external_data=False).graph.node
    counts = Counter(n.op_type for n in nodes)
    dq_outputs = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
    wrapped = sum(
        1
        for n in nodes
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
        and any(i in dq_outputs for i in n.input)
    )
    quant_types = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear") + INTEGER_OPS
    integer = sum(counts[t] for t in INTEGER_OPS)
    return {
        "nodes_quantized": wrapped + integer,
        "quant_ops": {t: counts[t] for t in quant_types if counts[t]},
    }
