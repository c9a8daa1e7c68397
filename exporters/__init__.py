"""Exporters, one module per target format, imported on first use."""

from __future__ import annotations

import importlib
from types import ModuleType

from edgekit.errors import InputError
from edgekit.exporters.base import Artifact, ExportOptions, Target

FORMAT_MODULES: dict[str, str] = {
    "torch": "edgekit.exporters.torch_program",
    "onnx": "edgekit.exporters.onnx",
    "openvino": "edgekit.exporters.openvino",
    "tensorrt": "edgekit.exporters.tensorrt",
}


def format_module(fmt: str) -> ModuleType:
    """The exporter module for ``fmt`` (may raise MissingDependencyError on import)."""
    if fmt not in FORMAT_MODULES:
        raise InputError(
            f"unknown export format '{fmt}'; expected one of {', '.join(FORMAT_MODULES)}"
        )
    return importlib.import_module(FORMAT_MODULES[fmt])


__all__ = ["Artifact", "ExportOptions", "FORMAT_MODULES", "Target", "format_module"]
