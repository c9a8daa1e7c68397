"""OpenVINO backend: IR (``.xml`` + ``.bin``) or ``.onnx`` read directly, on CPU, GPU or NPU.

Compile config defaults: ``PERFORMANCE_HINT=LATENCY`` and, on CPU and GPU,
``INFERENCE_PRECISION_HINT=f32``: on CPUs with AVX-512 BF16 or AMX OpenVINO otherwise runs fp32
models in bf16 (and GPUs in f16), silently breaking fp32 parity. ``options.threads`` sets
``INFERENCE_NUM_THREADS``. ``options.extra`` overrides any config key: upper-case keys go to
``compile_model`` as-is, ``hint`` is short for ``PERFORMANCE_HINT``, ``config`` is a dict of keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from edgekit.errors import BundleError, DeviceUnavailableError, InputError
from edgekit.runtimes.base import Runtime, RuntimeOptions, Session
from edgekit.tensorspec import Dim, TensorSpec

_PRECISION_HINT_DEVICES = ("cpu", "gpu")


def ov_dtype_name(element_type: ov.Type) -> str:
    """numpy dtype name of an OpenVINO element type (f32 -> "float32", bf16 -> "bfloat16")."""
    if element_type == ov.Type.bf16:
        return "bfloat16"  # to_dtype() answers float16 for bf16
    try:
        return np.dtype(element_type.to_dtype()).name
    except Exception:  # types without a numpy twin (u4, nf4, string, ...)
        return element_type.get_type_name()


def spec_from_port(port: Any, index: int, kind: str) -> TensorSpec:
    """TensorSpec of a compiled model port; a dynamic dim becomes "<name>_dim<i>".

    A port can carry several tensor names: when OpenVINO folds a constant output it may also
    carry an internal name ("/encoder/Unsqueeze_6_output_0"); the graph's own name (no "/") wins.
    """
    names = sorted(port.get_names())
    plain = [n for n in names if "/" not in n]
    if not names:
        name = f"{kind}{index}"
    else:
        name = port.any_name if (port.any_name in plain or not plain) else plain[0]
    shape: list[Dim] = []
    for i, dim in enumerate(port.get_partial_shape()):
        shape.append(dim.get_length() if dim.is_static else f"{name}_dim{i}")
    return TensorSpec(name, ov_dtype_name(port.get_element_type()), tuple(shape))


def compile_config(device: str, options: RuntimeOptions) -> dict[str, Any]:
    """The ``compile_model`` config for ``device`` (lower-case) under ``options``."""
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if device.split(".", 1)[0] in _PRECISION_HINT_DEVICES:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if options.threads is not None:
        config["INFERENCE_NUM_THREADS"] = int(options.threads)
    for key, value in options.extra.items():
        if key == "hint":
            config["PERFORMANCE_HINT"] = value
        elif key == "config":
            config.update(dict(value))
        elif key.isupper():
            config[key] = value
        else:
            raise InputError(
                f"unknown OpenVINO option '{key}'; expected 'hint', 'config' (a dict) or an "
                "upper-case OpenVINO property such as 'NUM_STREAMS'"
            )
    return config


class OpenVINOSession(Session):
    """A compiled model with one infer request, created once and reused every run."""

    runtime = "openvino"

    def __init__(self, compiled: ov.CompiledModel, device: str) -> None:
        super().__init__(
            [spec_from_port(p, i, "input") for i, p in enumerate(compiled.inputs)],
            [spec_from_port(p, i, "output") for i, p in enumerate(compiled.outputs)],
        )
        self.device = device
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._input_names = [s.name for s in self.inputs]
        self._output_names = [s.name for s in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # Inputs are shared (no copy: the call is synchronous); outputs are copied out so a
        # later run cannot overwrite arrays already handed to the caller.
        result = self._request.infer([feeds[n] for n in self._input_names], share_inputs=True)
        return dict(zip(self._output_names, result.to_tuple(), strict=True))

    def close(self) -> None:
        self._request = None
        self._compiled = None  # type: ignore[assignment]


class OpenVINORuntime(Runtime):
    """Runs OpenVINO IR or ONNX graphs with the OpenVINO runtime."""

    name = "openvino"
    formats = ("openvino", "onnx")

    def __init__(self) -> None:
        self._core = ov.Core()

    def devices(self) -> list[str]:
        found: list[str] = []
        for dev in self._core.available_devices:
            for name in (dev.split(".", 1)[0].lower(), dev.lower()):  # "GPU.0" -> gpu, gpu.0
                if name not in found:
                    found.append(name)
        return found

    def _check_precision(self, device: str, config: dict[str, Any]) -> None:
        """bf16 inference precision on a CPU without native bf16 arithmetic (OpenVINO's
        OPTIMIZATION_CAPABILITIES lacks BF16) would be emulated, slower than f32: refused."""
        hint = str(config.get("INFERENCE_PRECISION_HINT", "")).lower()
        if hint != "bf16" or device.split(".", 1)[0].lower() != "cpu":
            return
        capabilities = self._core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        if "BF16" not in capabilities:
            raise DeviceUnavailableError(
                "this graph runs in bf16, and this CPU has no native bf16 arithmetic (OpenVINO "
                f"capabilities: {', '.join(capabilities)}; needs AVX-512 BF16 or AMX): use the "
                "fp32 or int8 bundle here"
            )

    def load(
        self, path: Path, device: str = "cpu", options: RuntimeOptions | None = None
    ) -> Session:
        """Read ``path`` (the IR ``.xml`` with its ``.bin`` beside it, or an ``.onnx``) and compile
        it for ``device``."""
        options = options or RuntimeOptions()
        available = self.devices()
        if device.lower() not in available:
            raise DeviceUnavailableError(
                f"OpenVINO device '{device}' is not available here; available: "
                f"{', '.join(available)}"
            )
        path = Path(path)
        if not path.is_file():
            raise BundleError(f"no OpenVINO model at {path} (expected an IR .xml or an .onnx)")
        if path.suffix == ".xml" and not path.with_suffix(".bin").is_file():
            raise BundleError(f"OpenVINO IR {path} has no weights file {path.with_suffix('.bin')}")
        config = compile_config(device.lower(), options)
        self._check_precision(device, config)
        try:
            model = self._core.read_model(str(path))
        except RuntimeError as exc:
            raise BundleError(f"OpenVINO cannot read {path}: {exc}") from exc
        compiled = self._core.compile_model(model, device.upper(), config)
        return OpenVINOSession(compiled, device.lower())

    def versions(self) -> dict[str, str]:
        return {"openvino": ov.get_version()}
