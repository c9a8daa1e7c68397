"""The runtime contract: ``Runtime.load(path, device, options) -> Session``; ``Session.run``.

Every backend module subclasses these two classes and nothing else. Sessions validate feeds
against their declared inputs (name, dtype, shape) before calling the backend, so a wrong feed
is one InputError naming the input, whatever the backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.tensorspec import TensorSpec, check_feeds


@dataclass
class RuntimeOptions:
    """Backend-independent session options.

    ``threads``: intra-op threads (None = backend default). ``device``-specific knobs go in
    ``extra`` (e.g. {"providers": [...]} for ONNX Runtime, {"hint": "LATENCY"} for OpenVINO).
    """

    threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Session(ABC):
    """A loaded graph, ready to run on numpy arrays."""

    runtime: str = ""
    device: str = "cpu"

    def __init__(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        self.inputs = inputs
        self.outputs = outputs

    def io(self) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """(inputs, outputs) as TensorSpecs, dynamic axes named by strings."""
        return self.inputs, self.outputs

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one inference. ``feeds`` maps every input name to an array of its dtype/shape."""
        return self._run(check_feeds(self.inputs, feeds))

    @abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Backend call on already-validated feeds; returns every output by name."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources (optional)."""


class Runtime(ABC):
    """A backend that turns artifact files into Sessions."""

    name: str = ""
    formats: tuple[str, ...] = ()  # artifact formats this runtime loads: "onnx", "openvino", ...

    @abstractmethod
    def devices(self) -> list[str]:
        """Devices usable on this machine, e.g. ["cpu"] or ["cpu", "cuda", "tensorrt"]."""

    @abstractmethod
    def load(
        self, path: Path, device: str = "cpu", options: RuntimeOptions | None = None
    ) -> Session:
        """Load the artifact at ``path`` (for OpenVINO the .xml) onto ``device``."""

    def versions(self) -> dict[str, str]:
        """Versions of the SDK(s) this backend uses, for bench and bundle environment records."""
        return {}
