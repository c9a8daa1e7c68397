"""ONNX Runtime transformer graph fusions (``onnxruntime.transformers.optimizer``).

A card states its fusion facts declaratively, e.g. ``ort_fusion = {"model_type": "bert",
"num_heads": 12, "hidden_size": 384}``; any key of ONNX Runtime's ``FusionOptions`` may be
added (``"enable_gelu_approximation": True``). The fused graph holds ONNX Runtime contrib ops
(Attention, SkipLayerNormalization, BiasGelu, EmbedLayerNormalization), so it runs on ONNX
Runtime only; OpenVINO and TensorRT start from the plain fp32 graph.

Two edgekit additions, both measured on all-MiniLM-L6-v2 (ONNX Runtime 1.32, x86, 2 threads):

- ``mask_filter_value`` (default -40): the value fused Attention nodes add to masked scores.
  ONNX Runtime's default -10000 sends every padded key through the CPU exp's underflow path,
  about 20x slower than a normal exp (a 14-token sentence padded to 128: 7.1 -> 4.8 ms).
  exp(-40) < 5e-18, so masked keys still get no weight. None keeps ONNX Runtime's value.
- ``enable_skip_layer_norm: False`` keeps residual Add + LayerNormalization unfused: the CPU
  SkipLayerNormalization kernel is ~3x slower than the pair. ONNX Runtime would fuse them again
  at session start, so the artifact then asks the runtime to disable that session-level fusion
  (``session_config`` in the returned details).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.bundle.policy import DISABLE_OPTIMIZERS_KEY  # the key bundles may carry
from edgekit.errors import ExportError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import onnx

OPTIMIZER_ARGS = ("model_type", "num_heads", "hidden_size", "opt_level")
EDGEKIT_ARGS = ("mask_filter_value",)
DEFAULT_MASK_FILTER_VALUE = -40.0
ATTENTION_OPS = ("Attention", "MultiHeadAttention")


def split_fusion_args(fusion: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a card's ``ort_fusion`` into (optimize_model + edgekit args, FusionOptions flags).

    Raises InputError for a missing ``model_type`` or a key that is neither.
    """
    from onnxruntime.transformers.fusion_options import FusionOptions

    if not isinstance(fusion, dict) or "model_type" not in fusion:
        raise InputError(
            f"ort_fusion must be a dict with at least 'model_type' (e.g. {{'model_type': 'bert', "
            f"'num_heads': 12, 'hidden_size': 384}}), got {fusion!r}"
        )
    known_flags = set(vars(FusionOptions(str(fusion["model_type"]))))
    args = {k: v for k, v in fusion.items() if k in OPTIMIZER_ARGS + EDGEKIT_ARGS}
    flags = {k: v for k, v in fusion.items() if k not in args}
    unknown = sorted(set(flags) - known_flags)
    if unknown:
        raise InputError(
            f"unknown ort_fusion option(s) {unknown}; expected {list(OPTIMIZER_ARGS + EDGEKIT_ARGS)} or "
            f"FusionOptions attributes {sorted(known_flags)}"
        )
    return args, flags


def fuse_transformer(src: Path, dst: Path, fusion: dict[str, Any]) -> dict[str, Any]:
    """Fuse transformer subgraphs of the ONNX file ``src`` into ``dst`` (one self-contained file).

    Returns {"fused": {op type: count, ...} (non-zero only), "model_type", "num_heads",
    "hidden_size", "options": {flag: value}, "mask_filter_value", "session_config": {ONNX
    Runtime session config entries the artifact needs, possibly empty}}. Raises ExportError when nothing was fused: the
    card declares a transformer, so an unfused graph means the exported pattern was not
    recognised (export with eager attention, or set ExportOptions.fuse=False).
    """
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    args, flags = split_fusion_args(fusion)
    options = FusionOptions(str(args["model_type"]))
    for key, value in flags.items():
        setattr(options, key, value)
    try:
        optimized = optimize_model(
            str(src),
            model_type=str(args["model_type"]),
            num_heads=int(args.get("num_heads", 0)),
            hidden_size=int(args.get("hidden_size", 0)),
            optimization_options=options,
            opt_level=int(args.get("opt_level", 0)),  # 0: portable Python fusions only
        )
    except Exception as exc:  # the optimizer raises bare exceptions on unexpected graphs
        raise ExportError(f"ONNX Runtime transformer fusion of {src.name} failed: {exc}") from exc
    stats = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    if not stats:
        raise ExportError(
            f"the card declares ONNX Runtime fusion {fusion} but nothing in {src.name} was fused; "
            "the exported pattern is not one the optimizer knows (export with eager attention) "
            "or the fusion should be switched off (ExportOptions(fuse=False))"
        )
    mask_value = args.get("mask_filter_value", DEFAULT_MASK_FILTER_VALUE)
    if mask_value is not None:
        set_mask_filter_value(optimized.model, float(mask_value))
    session_config = {}
    if flags.get("enable_skip_layer_norm") is False:
        session_config[DISABLE_OPTIMIZERS_KEY] = "SkipLayerNormFusion"
    dst.parent.mkdir(parents=True, exist_ok=True)
    optimized.save_model_to_file(str(dst), use_external_data_format=False)
    return {
        "fused": stats,
        "model_type": args["model_type"],
        "num_heads": int(args.get("num_heads", 0)),
        "hidden_size": int(args.get("hidden_size", 0)),
        "options": flags,
        "mask_filter_value": mask_value,
        "session_config": session_config,
    }


def set_mask_filter_value(model: onnx.ModelProto, value: float) -> int:
    """Set ``mask_filter_value`` on every fused attention node of ``model``; return how many.

    The quantizer copies the attribute when it turns Attention into QAttention.
    """
    import onnx

    count = 0
    for node in model.graph.node:
        if node.domain == "com.microsoft" and node.op_type in ATTENTION_OPS:
            kept = [a for a in node.attribute if a.name != "mask_filter_value"]
            del node.attribute[:]
            node.attribute.extend(kept)
            node.attribute.append(onnx.helper.make_attribute("mask_filter_value", value))
            count += 1
    return count
