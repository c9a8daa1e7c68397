"""PyTorch runtime: torch.export ``.pt2`` programs and live eager modules (the reference).

A ``.pt2`` written by the torch exporter carries its I/O specs in the extra file
``edgekit_io.json`` (``{"inputs": [spec.to_json(), ...], "outputs": [...]}``); a program without
it gets specs derived from its graph signature. ``TorchRuntime.from_module`` wraps an eager
``nn.Module`` whose ``forward`` takes the inputs positionally in spec order; verify runs every
exported artifact against that session.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.errors import BundleError, DeviceUnavailableError, InputError
from edgekit.runtimes.base import Runtime, RuntimeOptions, Session
from edgekit.tensorspec import TensorSpec

IO_EXTRA_FILE = "edgekit_io.json"


def _torch_dtype_name(dtype: torch.dtype) -> str:
    """numpy dtype name of a torch dtype ("float32", "int64", "bool"; "bfloat16" has none)."""
    if dtype == torch.bfloat16:
        return "bfloat16"
    return torch.empty((), dtype=dtype).numpy().dtype.name


def _to_numpy(value: Any, name: str) -> np.ndarray:
    if not isinstance(value, torch.Tensor):
        raise InputError(f"output '{name}' is a {type(value).__name__}, expected a torch.Tensor")
    value = value.detach()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.cpu().numpy()


def _to_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")  # torch.from_numpy wants writable, positive strides
    tensor = torch.from_numpy(array)
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


def map_outputs(result: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Name a forward's result: a tensor, a tuple/list in output order, or a dict.

    A dict whose keys are exactly ``names`` is matched by key, any other dict by its order.
    Raises InputError when the number of tensors differs from the declared outputs.
    """
    if isinstance(result, Mapping):
        values = [result[n] for n in names] if set(result) == set(names) else list(result.values())
    elif isinstance(result, (tuple, list)):
        values = list(result)
    else:
        values = [result]
    if len(values) != len(names):
        raise InputError(
            f"the model returned {len(values)} output(s), expected {len(names)}: {list(names)}"
        )
    return {n: _to_numpy(v, n) for n, v in zip(names, values, strict=True)}


class TorchSession(Session):
    """Runs a callable (eager module or exported program module) on numpy feeds.

    Feeds are passed positionally in input-spec order, e.g. image (B, 3, H, W) float32 then
    vector (B, D) float32; outputs come back as numpy arrays keyed by output name.
    """

    runtime = "torch"

    def __init__(
        self,
        fn: Callable[..., Any],
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        super().__init__(inputs, outputs)
        self.device = device
        self._fn = fn
        self._torch_device = torch.device(device)
        self._threads = threads
        self._input_names = [s.name for s in inputs]
        self._output_names = [s.name for s in outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._threads is not None and torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        with torch.inference_mode():
            args = [_to_tensor(feeds[n], self._torch_device) for n in self._input_names]
            result = self._fn(*args)
        return map_outputs(result, self._output_names)


def _specs_from_json(text: str, path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    try:
        data = json.loads(text)
        inputs = [TensorSpec.from_json(s) for s in data["inputs"]]
        outputs = [TensorSpec.from_json(s) for s in data["outputs"]]
    except (ValueError, KeyError, TypeError, InputError) as exc:
        raise BundleError(
            f"{path}: {IO_EXTRA_FILE} is malformed ({exc}); expected "
            '{"inputs": [{"name", "dtype", "shape"}, ...], "outputs": [...]}'
        ) from exc
    return inputs, outputs


def _spec_from_meta(name: str, node: Any) -> TensorSpec:
    val = node.meta.get("val") if node is not None else None
    if not isinstance(val, torch.Tensor):
        raise BundleError(
            f"cannot tell the spec of '{name}' (not a tensor); save the program with an "
            f"'{IO_EXTRA_FILE}' extra file"
        )
    shape = tuple(d if isinstance(d, int) else str(d) for d in val.shape)
    return TensorSpec(name, _torch_dtype_name(val.dtype), shape)


def specs_from_program(
    ep: torch.export.ExportedProgram,
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """I/O specs of an ExportedProgram from its signature; symbolic dims become strings ("s0")."""
    signature = ep.graph_signature
    nodes = {n.name: n for n in ep.graph.nodes}
    inputs = [_spec_from_meta(n, nodes.get(n)) for n in signature.user_inputs]
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    returned = {getattr(a, "name", None): a for a in output_node.args[0]}
    outputs = [_spec_from_meta(str(n), returned.get(n)) for n in signature.user_outputs]
    return inputs, outputs


class TorchRuntime(Runtime):
    """Loads torch.export ``.pt2`` programs; wraps eager modules as reference sessions."""

    name = "torch"
    formats = ("torch",)

    def devices(self) -> list[str]:
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]

    def _check_device(self, device: str) -> str:
        available = self.devices()
        if device.split(":", 1)[0] not in available:
            raise DeviceUnavailableError(
                f"torch device '{device}' is not available here; available: {', '.join(available)}"
            )
        return device

    def load(
        self, path: Path, device: str = "cpu", options: RuntimeOptions | None = None
    ) -> Session:
        """Load a ``.pt2`` ExportedProgram; inputs/outputs from its ``edgekit_io.json``."""
        device = self._check_device(device)
        options = options or RuntimeOptions()
        path = Path(path)
        if not path.is_file():
            raise BundleError(f"no torch program at {path} (expected a torch.export .pt2 file)")
        extra = {IO_EXTRA_FILE: ""}
        try:
            ep = torch.export.load(str(path), extra_files=extra)
        except Exception as exc:
            raise BundleError(f"{path} is not a loadable torch.export .pt2 program: {exc}") from exc
        if extra[IO_EXTRA_FILE]:
            inputs, outputs = _specs_from_json(extra[IO_EXTRA_FILE], path)
        else:
            inputs, outputs = specs_from_program(ep)
        module = ep.module()
        if device != "cpu":
            module = module.to(device)
        return TorchSession(module, inputs, outputs, device, options.threads)

    @staticmethod
    def from_module(
        module: torch.nn.Module,
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        device: str = "cpu",
        options: RuntimeOptions | None = None,
    ) -> Session:
        """A session over a live eager module (the verify reference).

        ``module.forward`` takes one tensor per input spec, positionally in spec order, and
        returns a tensor, a tuple/list of tensors in output order, or a dict of tensors.
        The module is put in eval mode and moved to ``device``.
        """
        TorchRuntime()._check_device(device)
        options = options or RuntimeOptions()
        # Always .to(device): a module an earlier session moved to a GPU comes back to the CPU.
        module = module.eval().to(device)
        return TorchSession(module, list(inputs), list(outputs), device, options.threads)

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}


def eager_runners(graphs: Sequence[GraphSpec], device: str = "cpu") -> dict[str, Session]:
    """Torch eager sessions (the reference runtime) of ``graphs``, keyed by graph name.

    Every graph's I/O specs come first (one CPU forward on its example inputs each): graphs
    may share one model, which the first session on a GPU moves there.
    """
    specs = [graph.io_specs() for graph in graphs]
    return {
        graph.name: TorchRuntime.from_module(graph.module, inputs, outputs, device)
        for graph, (inputs, outputs) in zip(graphs, specs, strict=True)
    }
