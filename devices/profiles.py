"""Device profiles: which runtimes and precisions a class of device gets by default.

The profile is recorded in every bundle and picks the default targets of ``edgekit export``
and the runtime a deployed bundle runs on.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DeviceProfile:
    """A class of device: default export targets (best first) and the runtimes to try."""

    name: str
    description: str
    targets: tuple[str, ...]
    runtimes: tuple[str, ...]


PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile(
            "x86-cpu",
            "x86-64 CPU (AVX2 / AVX-512 VNNI): ONNX Runtime int8, OpenVINO",
            ("onnx-int8", "openvino-int8", "onnx-fp32", "openvino-fp32"),
            ("onnxruntime", "openvino", "torch"),
        ),
        DeviceProfile(
            "raspberry-pi-5",
            "Raspberry Pi 5 (Cortex-A76, NEON): ONNX Runtime int8 / fp32",
            ("onnx-int8", "onnx-fp32"),
            ("onnxruntime", "torch"),
        ),
        DeviceProfile(
            "jetson-orin",
            "NVIDIA Jetson Orin Nano / NX / AGX: TensorRT fp16 / int8, CUDA EP fallback",
            ("tensorrt-fp16", "tensorrt-int8", "onnx-fp32"),
            ("tensorrt", "onnxruntime", "torch"),
        ),
        DeviceProfile(
            "intel-igpu-npu",
            "Intel Core Ultra iGPU / NPU: OpenVINO fp16 / int8",
            ("openvino-fp16", "openvino-int8", "onnx-fp32"),
            ("openvino", "onnxruntime"),
        ),
        DeviceProfile(
            "cuda-server",
            "CUDA GPU server: TensorRT fp16, ONNX Runtime CUDA EP, torch for server-class models",
            ("tensorrt-fp16", "onnx-fp32"),
            ("tensorrt", "onnxruntime", "torch"),
        ),
    )
}


def detect_profile() -> DeviceProfile:
    """Best-effort guess of this machine's profile from /proc and the platform."""
    model = ""
    for path in ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model"):
        try:
            model = Path(path).read_text(errors="ignore").lower()
            break
        except OSError:
            continue
    if "raspberry pi" in model:
        return PROFILES["raspberry-pi-5"]
    if "jetson" in model or Path("/etc/nv_tegra_release").exists():
        return PROFILES["jetson-orin"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        return PROFILES["x86-cpu"]
    return (
        PROFILES["raspberry-pi-5"]
        if platform.machine().startswith("aarch64")
        else PROFILES["x86-cpu"]
    )
