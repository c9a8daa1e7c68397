"""torch -> ONNX export, and the "onnx" target format (fp32, fp16, int8).

``export_onnx`` is the common first step of every non-torch target. It uses the TorchScript
exporter (``dynamo=False``) first: on torch 2.13 it exports transformers BERT models and CNNs
with dynamic axes into the graph patterns ONNX Runtime's transformer optimizer recognises
(the dynamo exporter's BERT graph fuses no Attention, and it names an internal value
"embedding", colliding with a graph output of that name). The dynamo exporter is the fallback
for modules the tracer cannot handle. The result is one self-contained, checked file.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.errors import ExportError, InputError
from edgekit.exporters.base import Artifact, ExportOptions
from edgekit.exporters.patches import export_patches

if TYPE_CHECKING:  # pragma: no cover
    import onnx

    from edgekit.card import GraphSpec, ModelCard
    from edgekit.tensorspec import TensorSpec

PRECISIONS = ("fp32", "fp16", "int8")
EXPORTERS = ("torchscript", "dynamo")
EXPORTER_KEY = "edgekit.onnx_exporter"


def export_onnx(graph: GraphSpec, path: Path, opset: int, *, exporter: str = "auto") -> Path:
    """Export ``graph.module`` to the ONNX file ``path`` and return ``path``.

    Graph inputs are named after ``graph.example_inputs`` (in forward-argument order), outputs
    after ``graph.output_names``; axes in ``graph.dynamic_axes`` become named dynamic dims, e.g.
    input_ids int64 ("batch", "sequence") -> embedding float32 ("batch", 384).
    ``exporter`` is "torchscript", "dynamo" or "auto" (TorchScript, then dynamo on failure).
    Raises ExportError naming each exporter's failure.
    """
    if exporter not in (*EXPORTERS, "auto"):
        raise InputError(
            f"unknown ONNX exporter '{exporter}'; expected auto, {', '.join(EXPORTERS)}"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with export_patches(graph.module):
        inputs, outputs = graph.io_specs()
    exporters = {"torchscript": _export_torchscript, "dynamo": _export_dynamo}
    failures = []
    for name in EXPORTERS if exporter == "auto" else (exporter,):
        try:
            model = exporters[name](graph, path, opset)
        except Exception as exc:  # exporters raise many types; report them all together
            failures.append(f"{name} exporter: {type(exc).__name__}: {exc}")
            continue
        _finish(model, path, name, inputs, outputs)
        return path
    raise ExportError(f"could not export graph '{graph.name}' to ONNX; " + " | ".join(failures))


def _export_torchscript(graph: GraphSpec, path: Path, opset: int) -> onnx.ModelProto:
    import onnx
    import torch

    with export_patches(graph.module), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation and tracer notices
        torch.onnx.export(
            graph.module,
            tuple(graph.example_inputs.values()),
            str(path),
            input_names=list(graph.example_inputs),
            output_names=list(graph.output_names),
            dynamic_axes={k: dict(v) for k, v in graph.dynamic_axes.items()},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    return onnx.load(str(path))


def _export_dynamo(graph: GraphSpec, path: Path, opset: int) -> onnx.ModelProto:
    import torch

    dynamic = torch.export.Dim.DYNAMIC
    shapes = tuple(
        {axis: dynamic for axis in graph.dynamic_axes.get(name, {})} or None
        for name in graph.example_inputs
    )
    with export_patches(graph.module, dynamic=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            graph.module,
            tuple(graph.example_inputs.values()),
            input_names=list(graph.example_inputs),
            dynamic_shapes=shapes,
            opset_version=opset,
            dynamo=True,
            optimize=True,
            verbose=False,
        )
    model = program.model_proto
    rename_outputs(model, list(graph.output_names))
    return model


def rename_outputs(model: onnx.ModelProto, names: list[str]) -> None:
    """Give the graph outputs ``names`` in order, moving aside any internal value already so named.

    The dynamo exporter names values after torch ops ("embedding" for nn.Embedding), so asking it
    for an output called "embedding" produces an invalid graph with two producers of one name.
    """
    graph = model.graph
    if len(graph.output) != len(names):
        raise ExportError(f"the exported graph has {len(graph.output)} outputs, expected {names}")
    used = {o for n in graph.node for o in n.output} | {v.name for v in graph.input}
    used |= {t.name for t in graph.initializer}
    for output, new in zip(list(graph.output), names, strict=True):
        if output.name == new:
            continue
        if new in used:
            spare = f"{new}__internal"
            while spare in used:
                spare += "_"
            _rename_value(graph, new, spare)
            used.add(spare)
        _rename_value(graph, output.name, new)
        used.add(new)


def _rename_value(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if x == old else x for x in node.input]
        node.output[:] = [new if x == old else x for x in node.output]
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.name == old:
            value.name = new


def _finish(
    model: onnx.ModelProto,
    path: Path,
    exporter: str,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
) -> None:
    """Name the dynamic dims as declared, record the exporter, save one file and check it."""
    import onnx

    for values, specs in ((model.graph.input, inputs), (model.graph.output, outputs)):
        by_name = {v.name: v for v in values}
        for spec in specs:
            value = by_name.get(spec.name)
            if value is None:
                raise ExportError(f"exported graph lacks '{spec.name}'; it has {list(by_name)}")
            dims = value.type.tensor_type.shape.dim
            for dim, want in zip(dims, spec.shape, strict=False):
                if isinstance(want, str):
                    dim.dim_param = want
    kept = [p for p in model.metadata_props if p.key != EXPORTER_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = EXPORTER_KEY, exporter
    if model.ByteSize() >= 2**31 - 1:
        raise ExportError(
            f"the ONNX graph is {model.ByteSize() / 2**30:.1f} GiB, beyond the 2 GiB of a single "
            "protobuf file; export this graph with the torch format instead"
        )
    onnx.save(model, str(path))
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"the exported ONNX graph {path.name} is invalid: {exc}") from exc


def exporter_used(path: Path) -> str | None:
    """Which torch exporter wrote the ONNX file at ``path`` ("torchscript" / "dynamo")."""
    import onnx

    props = onnx.load(str(path), load_external_data=False).metadata_props
    return next((p.value for p in props if p.key == EXPORTER_KEY), None)


def export_graph(
    graph: GraphSpec,
    onnx_path: Path | None,
    out_dir: Path,
    precision: str,
    card: ModelCard,
    options: ExportOptions,
) -> Artifact:
    """The ONNX artifact of ``graph`` at ``precision`` from its fp32 export ``onnx_path``.

    fp32: the exported graph, with ONNX Runtime transformer fusions when
    ``options.fuses(card, precision)`` (the card declares ``ort_fusion``, and ``--no-fuse`` or,
    for int8, the card's ``ort_fusion_int8 = False`` does not switch them off). fp16: float16
    weights and compute, float32 I/O.
    int8: static QDQ or dynamic quantization (see onnx_int8). Fusion runs before fp16/int8.
    ``details["ort_session_config"]``, when present, holds ONNX Runtime session config entries
    the runtime must apply for the artifact to run as measured (see onnx_fusion).
    """
    if precision not in PRECISIONS:
        raise InputError(f"onnx exports {', '.join(PRECISIONS)}, not '{precision}'")
    if onnx_path is None or not Path(onnx_path).is_file():
        raise InputError(
            f"the onnx format needs the fp32 ONNX export of '{graph.name}', got {onnx_path}"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    details: dict[str, Any] = {"exporter": exporter_used(Path(onnx_path))}
    if options.fuse and not card.ort_fusion:
        raise InputError(
            f"fusion was requested but card '{card.name}' declares no ort_fusion "
            "(e.g. {'model_type': 'bert', 'num_heads': 12, 'hidden_size': 384})"
        )
    src = Path(onnx_path)
    fused = options.fuses(card, precision)
    details["fused"] = fused
    if fused:
        from edgekit.exporters.onnx_fusion import fuse_transformer

        fused_path = out_dir / f"{graph.name}.fused.tmp.onnx"
        details["fusion"] = fuse_transformer(src, fused_path, dict(card.ort_fusion or {}))
        if details["fusion"]["session_config"]:
            details["ort_session_config"] = details["fusion"]["session_config"]
        src = fused_path
    suffix = "" if precision == "fp32" else f".{precision}"
    dst = out_dir / f"{graph.name}{suffix}.onnx"
    if precision == "fp32":
        shutil.copyfile(src, dst)
    elif precision == "fp16":
        details["fp16"] = convert_float16(src, dst)
    else:
        from edgekit.exporters.onnx_int8 import quantize_int8

        details["int8"] = quantize_int8(src, dst, graph, card, options, fused=fused)
    if fused:
        src.unlink(missing_ok=True)
    details["ort_contrib_ops"] = contrib_ops(dst)
    return Artifact(graph.name, [dst], "onnx", precision, details)


def contrib_ops(path: Path) -> list[str]:
    """ONNX Runtime contrib ops (domain com.microsoft) in the graph at ``path``, sorted.

    Runtimes other than ONNX Runtime may not load such a graph (OpenVINO's ONNX reader converts
    some fused fp32 ops but not QAttention / QEmbedLayerNormalization), so bundles record them.
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return sorted({n.op_type for n in model.graph.node if n.domain == "com.microsoft"})


def convert_float16(src: Path, dst: Path) -> dict[str, Any]:
    """Convert ``src`` (plain or fused) to float16 weights and compute, keeping float32 I/O.

    Uses ONNX Runtime's converter with symbolic shape inference (it understands the fused
    contrib ops); ops without float16 support stay float32 behind Cast nodes.
    """
    import onnx

    try:
        from onnxruntime.transformers.onnx_model import OnnxModel
    except ImportError as exc:  # pragma: no cover - onnxruntime is a core dependency
        raise InputError(
            "fp16 ONNX export needs onnxruntime.transformers (pip install onnxruntime)"
        ) from exc
    model = OnnxModel(onnx.load(str(src)))
    try:
        model.convert_float_to_float16(keep_io_types=True)
    except Exception as exc:
        raise ExportError(f"float16 conversion of {src.name} failed: {exc}") from exc
    model.save_model_to_file(str(dst), use_external_data_format=False)
    casts = sum(1 for n in model.model.graph.node if n.op_type == "Cast")
    return {"converter": "onnxruntime.transformers.float16", "keep_io_types": True, "casts": casts}
