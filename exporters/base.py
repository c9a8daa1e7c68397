"""The exporter contract shared by every target format.

A target is "<format>-<precision>" (onnx-fp32, onnx-int8, openvino-fp16, tensorrt-int8, ...).
Every format module exposes ``PRECISIONS`` and

    export_graph(graph, onnx_path, out_dir, precision, card, options) -> Artifact

where ``onnx_path`` is the graph already exported to fp32 ONNX (the common starting point;
the torch format ignores it). Calibration feeds come from ``card.calibration_data()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.errors import InputError

FORMATS = ("torch", "onnx", "openvino", "tensorrt")
PRECISIONS = ("fp32", "fp16", "bf16", "int8")  # bf16: OpenVINO on CPUs with native bf16


@dataclass(frozen=True)
class Target:
    """An export target: artifact format and numeric precision."""

    format: str
    precision: str = "fp32"

    @classmethod
    def parse(cls, text: str, precision: str | None = None) -> Target:
        """Parse "onnx", "onnx-int8" or ("onnx", "int8"); raise InputError on unknown parts."""
        fmt, _, prec = text.strip().lower().partition("-")
        prec = precision or prec or "fp32"
        if fmt not in FORMATS:
            raise InputError(f"unknown export format '{fmt}'; expected one of {', '.join(FORMATS)}")
        if prec not in PRECISIONS:
            raise InputError(f"unknown precision '{prec}'; expected one of {', '.join(PRECISIONS)}")
        return cls(fmt, prec)

    def __str__(self) -> str:
        return f"{self.format}-{self.precision}"


@dataclass
class ExportOptions:
    """Knobs of one export; None means "the card's declared default"."""

    opset: int | None = None
    int8_mode: str | None = None  # "static" (QDQ, calibrated) | "dynamic"
    calibration_method: str | None = None  # "minmax" | "entropy" | "percentile"
    calibration_size: int = 64
    per_channel: bool = True
    fuse: bool | None = None  # ONNX Runtime transformer fusions when the card declares them
    float_nodes: tuple[str, ...] | None = None  # int8: node-name regexes kept float (None: card's)
    extra: dict[str, Any] = field(default_factory=dict)

    def int8_float_nodes(self, card: Any) -> tuple[str, ...]:
        """Regexes of node names int8 exporters keep in floating point (options win over card)."""
        return tuple(self.float_nodes if self.float_nodes is not None else card.int8_float_nodes)

    def fuses(self, card: Any, precision: str) -> bool:
        """Whether the ONNX export of ``card`` at ``precision`` gets ONNX Runtime's transformer
        fusions: ``fuse`` when given, else the card's choice (``ort_fusion`` declared, and for
        int8 also ``ort_fusion_int8``)."""
        if not card.ort_fusion:
            return False
        if self.fuse is not None:
            return self.fuse
        return precision != "int8" or bool(card.ort_fusion_int8)


@dataclass
class Artifact:
    """What an exporter wrote for one graph. ``files[0]`` is the file a runtime loads."""

    graph: str
    files: list[Path]
    format: str
    precision: str
    details: dict[str, Any] = field(default_factory=dict)
