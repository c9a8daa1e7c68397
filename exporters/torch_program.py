"""The "torch" target: a ``torch.export`` ExportedProgram saved as ``<graph>.pt2`` (fp32).

The program carries its I/O specs in the extra file ``edgekit_io.json``
(``{"inputs": [TensorSpec.to_json(), ...], "outputs": [...]}``), which the torch runtime reads.
Dynamic axes become ``Dim.DYNAMIC``: torch.export infers their ranges and relations (equal
batch sizes, a sequence bounded by the position table) instead of us guessing bounds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.errors import ExportError, InputError
from edgekit.exporters.base import Artifact, ExportOptions
from edgekit.exporters.patches import export_patches

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from edgekit.card import GraphSpec, ModelCard

PRECISIONS = ("fp32",)
IO_EXTRA_FILE = "edgekit_io.json"


def export_program(graph: GraphSpec, path: Path) -> dict[str, Any]:
    """torch.export ``graph.module`` on its example inputs and save the program at ``path``.

    Returns the I/O json stored inside, e.g. {"inputs": [{"name": "image", "dtype": "float32",
    "shape": ["batch", 3, 64, 64]}], "outputs": [...]}. Raises ExportError when torch.export
    refuses the module (data-dependent control flow, unsupported ops).
    """
    import torch

    dynamic = torch.export.Dim.DYNAMIC
    shapes = tuple(
        {axis: dynamic for axis in graph.dynamic_axes.get(name, {})} or None
        for name in graph.example_inputs
    )
    with export_patches(graph.module, dynamic=True):
        inputs, outputs = graph.io_specs()
        try:
            program = torch.export.export(
                graph.module, tuple(graph.example_inputs.values()), dynamic_shapes=shapes
            )
        except Exception as exc:
            raise ExportError(
                f"torch.export could not capture graph '{graph.name}': {type(exc).__name__}: {exc}"
            ) from exc
    _check_program(program, graph)
    io = {"inputs": [s.to_json() for s in inputs], "outputs": [s.to_json() for s in outputs]}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path), extra_files={IO_EXTRA_FILE: json.dumps(io)})
    return io


def _check_program(program: torch.export.ExportedProgram, graph: GraphSpec) -> None:
    """Fail when a declared dynamic axis came out static (the program would reject other sizes)."""
    placeholders = [
        node
        for node in program.graph.nodes
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs
    ]
    for node, name in zip(placeholders, graph.example_inputs, strict=False):
        value = node.meta.get("val")
        for axis, axis_name in graph.dynamic_axes.get(name, {}).items():
            if value is not None and isinstance(value.shape[axis], int):
                raise ExportError(
                    f"torch.export made axis {axis} ('{axis_name}') of input '{name}' static "
                    f"(size {value.shape[axis]}); the module's code specialises it"
                )


def export_graph(
    graph: GraphSpec,
    onnx_path: Path | None,
    out_dir: Path,
    precision: str,
    card: ModelCard,
    options: ExportOptions,
) -> Artifact:
    """The torch artifact of ``graph``: ``<out_dir>/<graph>.pt2`` (``onnx_path`` is unused)."""
    if precision not in PRECISIONS:
        raise InputError(
            f"the torch format exports {', '.join(PRECISIONS)} only, not '{precision}'"
        )
    import torch

    path = Path(out_dir) / f"{graph.name}.pt2"
    export_program(graph, path)
    details = {"torch": torch.__version__, "exporter": "torch.export", "dynamic": "Dim.DYNAMIC"}
    return Artifact(graph.name, [path], "torch", precision, details)
