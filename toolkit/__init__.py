"""edgekit: export, quantize, verify, benchmark and run research models on edge devices.

Importing ``edgekit`` is cheap: torch, onnxruntime and openvino load only when a command or
function needs them.
"""

from __future__ import annotations

__version__ = "0.1.0"
