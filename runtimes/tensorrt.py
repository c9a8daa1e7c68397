"""TensorRT backend: serialized ``.engine`` files on a CUDA GPU (TensorRT 10 name-based API).

Device buffers are torch CUDA tensors; inputs are copied host -> device, the engine runs with
``execute_async_v3`` on a private CUDA stream, outputs are copied back to numpy. Dynamic inputs
get ``set_input_shape`` each run, within the engine's optimization profile 0.
This module imports without TensorRT; constructing ``TensorRTRuntime`` then raises
MissingDependencyError naming the package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import (
    BundleError,
    DeviceUnavailableError,
    EdgekitError,
    InputError,
    MissingDependencyError,
)
from edgekit.runtimes.base import Runtime, RuntimeOptions, Session
from edgekit.tensorspec import Dim, TensorSpec

try:
    import tensorrt as trt
except ImportError:  # the module stays importable; TensorRTRuntime() explains what to install
    trt = None

_LOGGER: Any = None


def _logger() -> Any:
    global _LOGGER
    if _LOGGER is None:
        _LOGGER = trt.Logger(trt.Logger.WARNING)
    return _LOGGER


def _dtype_pairs() -> dict[Any, tuple[str, torch.dtype]]:
    """trt.DataType -> (numpy dtype name, torch dtype) for the types an I/O tensor can have."""
    pairs = {
        "FLOAT": ("float32", torch.float32),
        "HALF": ("float16", torch.float16),
        "BF16": ("bfloat16", torch.bfloat16),
        "INT8": ("int8", torch.int8),
        "UINT8": ("uint8", torch.uint8),
        "INT32": ("int32", torch.int32),
        "INT64": ("int64", torch.int64),
        "BOOL": ("bool", torch.bool),
    }
    return {getattr(trt.DataType, k): v for k, v in pairs.items() if hasattr(trt.DataType, k)}


class TensorRTSession(Session):
    """One execution context of a deserialized engine, bound to one CUDA device."""

    runtime = "tensorrt"

    def __init__(self, engine: Any, trt_runtime: Any, device: str) -> None:
        self._types = _dtype_pairs()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        for name in names:
            if engine.get_tensor_location(name) != trt.TensorLocation.DEVICE:
                raise BundleError(
                    f"engine tensor '{name}' lives in host memory (a shape tensor); edgekit "
                    "runs engines whose I/O tensors are all on the device"
                )
        super().__init__(
            [self._spec(engine, n) for n in names if is_input[n]],
            [self._spec(engine, n) for n in names if not is_input[n]],
        )
        self.device = device
        self._engine = engine
        self._trt_runtime = trt_runtime  # the engine must not outlive its runtime
        self._torch_device = torch.device(device)
        with torch.cuda.device(self._torch_device):
            self._context = engine.create_execution_context()
            self._stream = torch.cuda.Stream(self._torch_device)
        self._dynamic = {s.name for s in self.inputs if any(isinstance(d, str) for d in s.shape)}
        self._output_names = [s.name for s in self.outputs]
        self._out_dtypes = {
            n: self._types[engine.get_tensor_dtype(n)][1] for n in self._output_names
        }

    def _spec(self, engine: Any, name: str) -> TensorSpec:
        dtype = engine.get_tensor_dtype(name)
        if dtype not in self._types:
            raise BundleError(
                f"engine tensor '{name}' has TensorRT type {dtype}, which edgekit cannot feed"
            )
        shape: list[Dim] = [
            d if d >= 0 else f"{name}_dim{i}" for i, d in enumerate(engine.get_tensor_shape(name))
        ]
        return TensorSpec(name, self._types[dtype][0], tuple(shape))

    def _set_shape(self, name: str, shape: tuple[int, ...]) -> None:
        if not self._context.set_input_shape(name, shape):
            low, _, high = self._engine.get_tensor_profile_shape(name, 0)
            got = "x".join(str(s) for s in shape)
            raise InputError(
                f"input '{name}' has shape {got}, outside the engine's optimization profile "
                f"{tuple(low)} .. {tuple(high)}"
            )

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        context = self._context
        buffers: dict[str, torch.Tensor] = {}
        with torch.cuda.device(self._torch_device), torch.cuda.stream(self._stream):
            for name, array in feeds.items():
                if not array.flags.writeable or not array.flags.c_contiguous:
                    array = np.array(array, order="C")  # torch.from_numpy wants both
                host = torch.from_numpy(array)
                buffers[name] = host.to(self._torch_device, non_blocking=False)
                if name in self._dynamic:
                    self._set_shape(name, tuple(array.shape))
                context.set_tensor_address(name, buffers[name].data_ptr())
            for name in self._output_names:
                shape = tuple(context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise EdgekitError(
                        f"output '{name}' has a data-dependent shape {shape}; edgekit's TensorRT "
                        "runtime needs output shapes known from the input shapes"
                    )
                buffers[name] = torch.empty(
                    shape, dtype=self._out_dtypes[name], device=self._torch_device
                )
                context.set_tensor_address(name, buffers[name].data_ptr())
            if not context.execute_async_v3(self._stream.cuda_stream):
                raise EdgekitError("TensorRT execute_async_v3 failed (see the TensorRT log above)")
            self._stream.synchronize()
        return {n: _host(buffers[n]) for n in self._output_names}

    def close(self) -> None:
        self._context = None
        self._engine = None


def _host(tensor: torch.Tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


class TensorRTRuntime(Runtime):
    """Runs serialized TensorRT engines; needs the ``tensorrt`` package and a CUDA GPU."""

    name = "tensorrt"
    formats = ("tensorrt",)

    def __init__(self) -> None:
        if trt is None:
            raise MissingDependencyError("The TensorRT runtime", "tensorrt", extra="gpu")

    def devices(self) -> list[str]:
        if not torch.cuda.is_available():
            return []
        return ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]

    def load(
        self, path: Path, device: str = "cuda", options: RuntimeOptions | None = None
    ) -> Session:
        """Deserialize the ``.engine`` at ``path`` onto CUDA ``device`` ("cuda" or "cuda:N")."""
        available = self.devices()
        if device not in available:
            where = ", ".join(available) if available else "none (no CUDA GPU is visible)"
            raise DeviceUnavailableError(
                f"TensorRT runs on a CUDA GPU, not on '{device}'; available: {where}"
            )
        path = Path(path)
        if not path.is_file():
            raise BundleError(f"no TensorRT engine at {path} (expected a serialized .engine)")
        trt_runtime = trt.Runtime(_logger())
        with torch.cuda.device(torch.device(device)):
            engine = trt_runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise BundleError(
                f"TensorRT {trt.__version__} cannot deserialize {path}; an engine only loads with "
                "the TensorRT version and GPU model that built it"
            )
        return TensorRTSession(engine, trt_runtime, device)

    def versions(self) -> dict[str, str]:
        return {"tensorrt": trt.__version__}
