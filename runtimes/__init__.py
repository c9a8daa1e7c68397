"""Runtime backends, one module each, imported only when asked for.

``get_runtime("openvino")`` imports ``edgekit.runtimes.openvino``; if its SDK is missing the
caller gets one MissingDependencyError naming the package, and ``import edgekit`` never breaks.
"""

from __future__ import annotations

import importlib

from edgekit.errors import InputError, MissingDependencyError
from edgekit.runtimes.base import Runtime, RuntimeOptions, Session

RUNTIMES: dict[str, str] = {
    "torch": "edgekit.runtimes.torch:TorchRuntime",
    "onnxruntime": "edgekit.runtimes.onnxruntime:OnnxRuntime",
    "openvino": "edgekit.runtimes.openvino:OpenVINORuntime",
    "tensorrt": "edgekit.runtimes.tensorrt:TensorRTRuntime",
}

# Which runtime loads a format when the user names none, first choice first.
DEFAULT_RUNTIME_FOR_FORMAT: dict[str, list[str]] = {
    "torch": ["torch"],
    "onnx": ["onnxruntime", "openvino"],
    "openvino": ["openvino"],
    "tensorrt": ["tensorrt"],
}

_CACHE: dict[str, Runtime] = {}


def get_runtime(name: str) -> Runtime:
    """The Runtime registered as ``name``; raises MissingDependencyError if its SDK is absent."""
    if name not in RUNTIMES:
        raise InputError(f"unknown runtime '{name}'; known runtimes: {', '.join(RUNTIMES)}")
    if name not in _CACHE:
        module_name, _, attr = RUNTIMES[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if not missing or missing == "edgekit":
                raise
            raise MissingDependencyError(
                f"The {name} runtime", missing, detail=f"({type(exc).__name__}: {exc})"
            ) from exc
        _CACHE[name] = getattr(module, attr)()
    return _CACHE[name]


def parse_runtime_spec(spec: str) -> tuple[str, str | None]:
    """Split a ``RUNTIME[@DEVICE]`` spec: "onnxruntime@cuda" -> ("onnxruntime", "cuda"),
    "openvino" -> ("openvino", None). InputError for an unknown runtime or an empty device."""
    name, at, device = spec.strip().partition("@")
    if name not in RUNTIMES:
        raise InputError(
            f"unknown runtime '{name}' in '{spec}'; expected RUNTIME[@DEVICE] with RUNTIME one of "
            f"{', '.join(RUNTIMES)} (e.g. onnxruntime@cuda)"
        )
    if at and not device:
        raise InputError(f"'{spec}' names no device after '@' (e.g. onnxruntime@cuda)")
    return name, device or None


def runtime_spec(name: str, device: str | None = None) -> str:
    """The ``RUNTIME[@DEVICE]`` text of a row (parse_runtime_spec's inverse)."""
    return f"{name}@{device}" if device else name


def runtime_formats(name: str) -> tuple[str, ...]:
    """Formats runtime ``name`` loads, or () when it is unavailable here."""
    from edgekit.errors import EdgekitError

    try:
        runtime = get_runtime(name)
        return runtime.formats if runtime.devices() else ()
    except (EdgekitError, ImportError):
        return ()


def available_runtimes() -> dict[str, str | None]:
    """name -> None when usable here, or the reason it is not (the missing package)."""
    status: dict[str, str | None] = {}
    for name in RUNTIMES:
        try:
            get_runtime(name)
            status[name] = None
        except MissingDependencyError as exc:
            status[name] = str(exc)
    return status


__all__ = [
    "RUNTIMES",
    "DEFAULT_RUNTIME_FOR_FORMAT",
    "Runtime",
    "RuntimeOptions",
    "Session",
    "available_runtimes",
    "get_runtime",
    "parse_runtime_spec",
    "runtime_spec",
]
