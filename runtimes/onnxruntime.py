"""ONNX Runtime backend: ``.onnx`` graphs on CPU, CUDA, TensorRT or OpenVINO execution providers.

``options.extra`` knobs: ``providers`` (a list passed to InferenceSession as-is, overriding the
device's default), ``cuda_options`` (CUDA EP provider options over edgekit's, which turn TF32
off so fp32 stays fp32), ``graph_optimization_level`` ("disable" | "basic" | "extended" | "all", or a
``GraphOptimizationLevel``), ``session_config`` (dict for ``add_session_config_entry``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from edgekit.errors import BundleError, DeviceUnavailableError, InputError
from edgekit.runtimes.base import Runtime, RuntimeOptions, Session
from edgekit.tensorspec import Dim, TensorSpec

# Execution providers per edgekit device, first choice first; CPU is always the fallback.
DEVICE_PROVIDERS: dict[str, list[str]] = {
    "cpu": ["CPUExecutionProvider"],
    "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    "openvino": ["OpenVINOExecutionProvider", "CPUExecutionProvider"],
}

ORT_TYPES: dict[str, str] = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
    "tensor(string)": "object",
}

# What InferenceSession raises for a file it cannot read, parse or place on the providers.
_LOAD_ERRORS = (
    ort_state.Fail,
    ort_state.InvalidProtobuf,
    ort_state.NoSuchFile,
    ort_state.InvalidGraph,
    ort_state.NotImplemented,
    RuntimeError,
)

_OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def ort_dtype_name(type_str: str) -> str:
    """numpy dtype name for an ORT type string: "tensor(float)" -> "float32"."""
    return ORT_TYPES.get(type_str, type_str.removeprefix("tensor(").removesuffix(")"))


def spec_from_node_arg(arg: Any) -> TensorSpec:
    """TensorSpec of an ORT NodeArg; a symbolic or unknown dim becomes a string name."""
    shape: list[Dim] = []
    for i, dim in enumerate(arg.shape or ()):
        if isinstance(dim, int) and dim >= 0:
            shape.append(dim)
        else:
            shape.append(dim if isinstance(dim, str) and dim else f"{arg.name}_dim{i}")
    return TensorSpec(arg.name, ort_dtype_name(arg.type), tuple(shape))


def _optimization_level(value: Any) -> ort.GraphOptimizationLevel:
    if isinstance(value, ort.GraphOptimizationLevel):
        return value
    key = str(value).lower().removeprefix("ort_").removeprefix("enable_")
    key = {"disable_all": "disable", "enable_all": "all"}.get(key, key)
    if key not in _OPT_LEVELS:
        raise InputError(
            f"graph_optimization_level {value!r} is not one of {', '.join(_OPT_LEVELS)}"
        )
    return _OPT_LEVELS[key]


# Session config entries naming files or folders (e.g. where external initializers are read
# from, where an EP context model or memory stats are written) move what a session reads or
# writes away from the graph's own folder; edgekit never sets one and refuses them from callers.
PATH_CONFIG_MARKERS = ("path", "folder", "file")


def session_options(options: RuntimeOptions) -> ort.SessionOptions:
    """SessionOptions for edgekit: sequential, 1 inter-op thread, ALL graph optimisations.

    ``session_config`` keys naming a path, folder or file (PATH_CONFIG_MARKERS) are an
    InputError: external data is only ever read relative to the graph's folder."""
    so = ort.SessionOptions()
    if options.threads is not None:
        so.intra_op_num_threads = int(options.threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = _optimization_level(
        options.extra.get("graph_optimization_level", "all")
    )
    for key, value in dict(options.extra.get("session_config") or {}).items():
        if any(marker in str(key).lower() for marker in PATH_CONFIG_MARKERS):
            raise InputError(
                f"session_config '{key}' names a file or folder; edgekit loads a graph and its "
                "external data only from the graph's own folder, so this option is not allowed"
            )
        so.add_session_config_entry(str(key), str(value))
    return so


# CUDA EP options edgekit sets: fp32 stays fp32. ONNX Runtime's CUDA EP runs float32 MatMul/Conv
# in TF32 on Ampere and later by default (10-bit mantissa); an fp32 bundle then misses fp32
# tensor tolerances on the GPU. Measured on an H200 (onnxruntime-gpu 1.31.1): photo-cnn logits
# max|d| 7.7e-4 against atol 1e-4 with TF32, 1.4e-6 without; sam2-edge feat_s1 4.7e-3 against
# 2e-3 with TF32. ``extra["cuda_options"] = {"use_tf32": "1"}`` opts back in.
CUDA_DEFAULTS: dict[str, str] = {"use_tf32": "0"}


def device_providers(device: str, cuda_options: dict[str, Any] | None = None) -> list[Any]:
    """The providers list for ``device``: names, with the CUDA EP as (name, options) carrying
    CUDA_DEFAULTS updated by ``cuda_options``."""
    cuda = {**CUDA_DEFAULTS, **{str(k): str(v) for k, v in (cuda_options or {}).items()}}
    return [
        ("CUDAExecutionProvider", cuda) if name == "CUDAExecutionProvider" else name
        for name in DEVICE_PROVIDERS[device]
    ]


@functools.cache
def preload_gpu_libraries() -> None:
    """Load the CUDA/cuDNN libraries that pip's nvidia-* wheels (or torch) ship, where the
    onnxruntime-gpu build offers ``preload_dlls`` (>= 1.21); without it, the system's
    library path must hold them. Once per process."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        # A library that fails to load shows up as check_provider_attached's error.
        with contextlib.suppress(OSError, RuntimeError):
            preload()


def tensorrt_libraries_present() -> bool:
    """Whether TensorRT's runtime library (libnvinfer) loads here. onnxruntime-gpu lists its
    TensorRT execution provider whether or not TensorRT is installed; measured on an H200
    without it, a session then falls back to CUDA. NVIDIA's ``tensorrt`` wheels preload it."""
    import ctypes

    if importlib.util.find_spec("tensorrt_libs") is not None:
        return True
    for name in ("libnvinfer.so.10", "libnvinfer.so", "nvinfer_10.dll", "nvinfer.dll"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def check_provider_attached(device: str, asked: list[str], attached: list[str]) -> None:
    """DeviceUnavailableError when ONNX Runtime fell back from the device's provider (its
    first choice, ``asked[0]``) to a later one: it does that with only a logged warning when
    e.g. the CUDA libraries fail to load, and a CPU run must never be reported as a GPU one."""
    if device != "cpu" and asked and asked[0] not in attached:
        raise DeviceUnavailableError(
            f"onnxruntime could not attach {asked[0]} for device '{device}' (the session got "
            f"{', '.join(attached) or 'no provider'}); check that the CUDA/cuDNN (or TensorRT) "
            "libraries the onnxruntime-gpu build needs are installed and on the library path"
        )


class OnnxSession(Session):
    """An ``ort.InferenceSession`` behind the edgekit contract; outputs keyed by graph name."""

    runtime = "onnxruntime"

    def __init__(self, session: ort.InferenceSession, device: str) -> None:
        super().__init__(
            [spec_from_node_arg(a) for a in session.get_inputs()],
            [spec_from_node_arg(a) for a in session.get_outputs()],
        )
        self.device = device
        self.providers = session.get_providers()
        self._session = session
        self._output_names = [s.name for s in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = self._output_names
        return dict(zip(names, self._session.run(names, feeds), strict=True))

    def close(self) -> None:
        self._session = None  # type: ignore[assignment]


class OnnxRuntime(Runtime):
    """Runs ``.onnx`` graphs with ONNX Runtime on the devices its providers cover."""

    name = "onnxruntime"
    formats = ("onnx",)

    def devices(self) -> list[str]:
        available = set(ort.get_available_providers())
        if "TensorrtExecutionProvider" in available and not tensorrt_libraries_present():
            available.discard("TensorrtExecutionProvider")  # listed by the build, cannot attach
        return [d for d, providers in DEVICE_PROVIDERS.items() if providers[0] in available]

    def load(
        self, path: Path, device: str = "cpu", options: RuntimeOptions | None = None
    ) -> Session:
        """Create an InferenceSession for the ``.onnx`` at ``path`` on ``device``."""
        options = options or RuntimeOptions()
        available = self.devices()
        if device not in available:
            raise DeviceUnavailableError(
                f"onnxruntime device '{device}' is not available here (providers: "
                f"{', '.join(ort.get_available_providers())}); available: {', '.join(available)}"
            )
        providers = options.extra.get("providers") or device_providers(
            device, options.extra.get("cuda_options")
        )
        path = Path(path)
        if not path.is_file():
            raise BundleError(f"no ONNX model at {path} (expected an .onnx file)")
        if device in ("cuda", "tensorrt"):
            preload_gpu_libraries()
        try:
            session = ort.InferenceSession(
                str(path), sess_options=session_options(options), providers=list(providers)
            )
        except _LOAD_ERRORS as exc:
            raise BundleError(f"onnxruntime cannot load {path}: {exc}") from exc
        asked = [p if isinstance(p, str) else p[0] for p in providers]
        check_provider_attached(device, asked, session.get_providers())
        return OnnxSession(session, device)

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": ort.__version__}
