"""The "openvino" target: OpenVINO IR (model.xml + model.bin) in fp32, fp16, bf16 or NNCF int8.

fp32/fp16 convert the plain fp32 ONNX graph (fp16 compresses the weights; edgekit's OpenVINO
runtime computes in f32 on CPU and GPU). bf16 keeps the fp32 IR and records that the graph runs
with OpenVINO's bf16 inference precision (``INFERENCE_PRECISION_HINT=bf16``): matrix products
and convolutions in bfloat16 with float32 accumulation, on CPUs with native bf16 arithmetic
(AVX-512 BF16 or AMX) only; elsewhere loading it is one clear error. int8 runs NNCF
post-training quantization on the card's calibration feeds; transformers get NNCF's transformer
scheme (ModelType.TRANSFORMER, which keeps sensitive ops such as softmax and layer norms in
float).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.errors import ExportError, InputError, MissingDependencyError
from edgekit.exporters.base import Artifact, ExportOptions

try:
    import openvino as ov
except ImportError as exc:  # pragma: no cover - openvino is a core dependency
    raise MissingDependencyError("OpenVINO export", "openvino") from exc

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.card import GraphSpec, ModelCard

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
# card.calibration_method -> NNCF activation range estimator (NNCF has no "entropy" estimator;
# its histogram estimator is the closest distribution-aware choice).
RANGE_ESTIMATORS = {"minmax": "MINMAX", "percentile": "MEAN_QUANTILE", "entropy": "HISTOGRAM"}


def export_graph(
    graph: GraphSpec,
    onnx_path: Path | None,
    out_dir: Path,
    precision: str,
    card: ModelCard,
    options: ExportOptions,
) -> Artifact:
    """Convert the fp32 ONNX file of ``graph`` to OpenVINO IR at ``precision``.

    Returns an Artifact whose files are [<graph>.xml, <graph>.bin]; I/O names and dynamic
    dims are those of the ONNX graph, e.g. image f32 [?,3,64,64] -> logits f32 [?,10].
    """
    if precision not in PRECISIONS:
        raise InputError(f"openvino exports {', '.join(PRECISIONS)}, not '{precision}'")
    if onnx_path is None or not Path(onnx_path).is_file():
        raise InputError(
            f"openvino export needs the fp32 ONNX file of '{graph.name}', got {onnx_path}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        model = ov.convert_model(str(onnx_path))
    except Exception as exc:
        raise ExportError(f"OpenVINO could not convert {Path(onnx_path).name}: {exc}") from exc
    details: dict[str, Any] = {
        "openvino": ov.get_version(),
        "compress_to_fp16": precision == "fp16",
    }
    if precision == "bf16":
        details["inference_precision"] = "bf16"
    if precision == "int8":
        model, nncf_details = quantize_nncf(model, graph, card, options)
        details["int8"] = nncf_details
    model.set_rt_info(card.name, ["edgekit", "model"])
    model.set_rt_info(graph.name, ["edgekit", "graph"])
    model.set_rt_info(precision, ["edgekit", "precision"])
    suffix = "" if precision == "fp32" else f".{precision}"
    xml = out_dir / f"{graph.name}{suffix}.xml"
    ov.save_model(model, str(xml), compress_to_fp16=precision == "fp16")
    return Artifact(graph.name, [xml, xml.with_suffix(".bin")], "openvino", precision, details)


def quantize_nncf(
    model: ov.Model, graph: GraphSpec, card: ModelCard, options: ExportOptions
) -> tuple[ov.Model, dict[str, Any]]:
    """NNCF post-training int8 quantization of ``model`` on the card's calibration feeds."""
    try:
        import nncf
        from nncf.quantization.advanced_parameters import (
            AdvancedQuantizationParameters,
            AdvancedSmoothQuantParameters,
            OverflowFix,
        )
        from nncf.quantization.range_estimator import RangeEstimatorParametersSet
    except ImportError as exc:
        raise MissingDependencyError("OpenVINO int8 export", "nncf") from exc
    from edgekit.exporters.onnx_int8 import (
        calibration_feeds,
        is_transformer,
        reduce_range_default,
        resolve_calibration_method,
    )

    method = resolve_calibration_method(card, options)
    feeds = calibration_feeds(graph, card, options.calibration_size)
    transformer = is_transformer(card)
    estimator = RANGE_ESTIMATORS[method]
    # SmoothQuant (NNCF's default for transformers) cost photo-vit 27 points of top-1 agreement
    # (0.733 vs 0.998 without it); cards that measured this declare nncf_smooth_quant = False.
    smooth = (
        {}
        if card.nncf_smooth_quant
        else {"smooth_quant_alphas": AdvancedSmoothQuantParameters(matmul=-1)}
    )
    # 7-bit weights on x86 without VNNI / AMX, where int8 kernels saturate int16 sums (the ONNX
    # Runtime exporter's reduce_range rule); NNCF's default fixes only the first layer.
    saturating = reduce_range_default()
    overflow = OverflowFix.ENABLE if saturating else OverflowFix.FIRST_LAYER
    # The overflow fix only narrows weights: a product of two activations (attention's QK^T and
    # probabilities x V) still saturates there, so such CPUs keep those in float (photo-vit:
    # top-1 agreement 0.9875 -> 0.996, max prob error 0.29 -> 0.06 on an AVX2-only EPYC).
    float_matmuls = activation_matmuls(model) if saturating and transformer else []
    advanced = AdvancedQuantizationParameters(
        activations_range_estimator_params=getattr(RangeEstimatorParametersSet, estimator),
        overflow_fix=overflow,
        **smooth,
    )
    try:
        quantized = nncf.quantize(
            model,
            nncf.Dataset(feeds),
            model_type=nncf.ModelType.TRANSFORMER if transformer else None,
            subset_size=len(feeds),
            # Fast bias correction cost photo-cnn 3 points of top-1 agreement (0.968 vs 0.999
            # with the full algorithm); transformers keep NNCF's default.
            fast_bias_correction=transformer,
            advanced_parameters=advanced,
            ignored_scope=nncf.IgnoredScope(
                names=float_matmuls,
                patterns=list(options.int8_float_nodes(card)),
                validate=False,
            ),
        )
    except Exception as exc:
        raise ExportError(f"NNCF int8 quantization of graph '{graph.name}' failed: {exc}") from exc
    fake_quantize = sum(1 for op in quantized.get_ops() if op.get_type_name() == "FakeQuantize")
    return quantized, {
        "tool": f"nncf {nncf.__version__}",
        "float_nodes": list(options.int8_float_nodes(card)),
        "model_type": "transformer" if transformer else "default",
        "calibration_method": method,
        "range_estimator": estimator,
        "overflow_fix": overflow.value,
        "float_activation_matmuls": float_matmuls,
        "calibration_samples": len(feeds),
        "nodes_quantized": fake_quantize,
    }


def activation_matmuls(model: ov.Model) -> list[str]:
    """Names of the products of two activations in ``model``, sorted: MatMuls with no constant
    input (attention's QK^T and probabilities x V) and the ScaledDotProductAttention ops that
    OpenVINO's converter fuses such a pair into."""
    names = []
    for op in model.get_ops():
        kind = op.get_type_name()
        if kind == "ScaledDotProductAttention":
            names.append(op.get_friendly_name())
        elif kind == "MatMul":
            sources = [port.get_source_output().get_node() for port in op.inputs()]
            if not any(_is_constant(node) for node in sources):
                names.append(op.get_friendly_name())
    return sorted(names)


def _is_constant(node: Any) -> bool:
    """A Constant, possibly behind Convert (decompression) nodes."""
    while node.get_type_name() == "Convert":
        node = node.input(0).get_source_output().get_node()
    return node.get_type_name() == "Constant"
