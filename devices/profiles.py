"""Device profiles: which export targets and runtimes a class of device gets by default.

The profile is recorded in every bundle; the daemon reports its own at ``GET /health`` and
loads every deployed graph on the first runtime of its profile that reads the graph's format and
is usable here (``pick_runtime``); ``edgekit deploy MODEL --target HOST:PORT`` exports the first
target of the device's profile that this machine can build.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import InputError


@dataclass(frozen=True)
class DeviceProfile:
    """A class of device: default export targets (best first), runtimes to try (best first),
    and the runtime device string each runtime should use there."""

    name: str
    description: str
    targets: tuple[str, ...]
    runtimes: tuple[str, ...]
    runtime_devices: tuple[tuple[str, str], ...] = ()

    def device_for(self, runtime: str) -> str | None:
        """The device string for ``runtime`` on this profile (None = the runtime's default)."""
        return dict(self.runtime_devices).get(runtime)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "runtime_devices": dict(self.runtime_devices)}


_JETSON = ("tensorrt", "onnxruntime", "torch")
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
            "Raspberry Pi 5 (4x Cortex-A76, NEON, no NPU): ONNX Runtime int8 / fp32",
            ("onnx-int8", "onnx-fp32"),
            ("onnxruntime", "torch"),
        ),
        DeviceProfile(
            "jetson-orin-nano",
            "Jetson Orin Nano (Ampere GPU, no DLA): TensorRT fp16 first, int8 where calibrated",
            ("tensorrt-fp16", "tensorrt-int8", "onnx-fp32"),
            _JETSON,
            (("tensorrt", "cuda"), ("onnxruntime", "cuda")),
        ),
        DeviceProfile(
            "jetson-orin-nx",
            "Jetson Orin NX (Ampere GPU + 1-2 DLA): TensorRT int8 first, fp16",
            ("tensorrt-int8", "tensorrt-fp16", "onnx-fp32"),
            _JETSON,
            (("tensorrt", "cuda"), ("onnxruntime", "cuda")),
        ),
        DeviceProfile(
            "jetson-orin-agx",
            "Jetson AGX Orin (Ampere GPU + 2 DLA): TensorRT int8 first, fp16",
            ("tensorrt-int8", "tensorrt-fp16", "onnx-fp32"),
            _JETSON,
            (("tensorrt", "cuda"), ("onnxruntime", "cuda")),
        ),
        DeviceProfile(
            "intel-igpu-npu",
            "Intel Core Ultra iGPU / NPU: OpenVINO fp16 / int8",
            ("openvino-fp16", "openvino-int8", "onnx-fp32"),
            ("openvino", "onnxruntime"),
            (("openvino", "GPU"),),
        ),
        DeviceProfile(
            "cuda-server",
            "CUDA GPU server: TensorRT fp16, ONNX Runtime CUDA EP, torch for server-class models",
            ("tensorrt-fp16", "onnx-fp32"),
            ("tensorrt", "onnxruntime", "torch"),
            (("tensorrt", "cuda"), ("onnxruntime", "cuda"), ("torch", "cuda")),
        ),
    )
}
ALIASES = {"jetson-orin": "jetson-orin-nano", "jetson": "jetson-orin-nano"}


def get_profile(name: str) -> DeviceProfile:
    """A profile by name (or alias); InputError listing the known ones."""
    key = ALIASES.get(name, name)
    if key not in PROFILES:
        raise InputError(f"unknown device profile '{name}'; expected one of {', '.join(PROFILES)}")
    return PROFILES[key]


def profile_from_model(model: str, machine: str, has_nvidia: bool = False) -> DeviceProfile:
    """The profile for a device-tree model string and ``platform.machine()``."""
    model = model.lower()
    if "raspberry pi" in model:
        return PROFILES["raspberry-pi-5"]
    if "jetson" in model or "orin" in model:
        if "agx" in model:
            return PROFILES["jetson-orin-agx"]
        if " nx" in model or "orin nx" in model:
            return PROFILES["jetson-orin-nx"]
        return PROFILES["jetson-orin-nano"]
    if machine.lower() in ("x86_64", "amd64"):
        return PROFILES["cuda-server" if has_nvidia else "x86-cpu"]
    return PROFILES["raspberry-pi-5" if machine.startswith("aarch64") else "x86-cpu"]


def detect_profile() -> DeviceProfile:
    """Best-effort guess of this machine's profile from the device tree and the platform."""
    model = ""
    for path in ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model"):
        try:
            model = Path(path).read_text(errors="ignore")
            break
        except OSError:
            continue
    if not model and Path("/etc/nv_tegra_release").exists():
        model = "jetson"
    has_nvidia = Path("/proc/driver/nvidia/version").exists()
    return profile_from_model(model, platform.machine(), has_nvidia)


def pick_runtime(fmt: str, profile: DeviceProfile) -> tuple[str | None, str | None]:
    """(runtime, device) for a graph of format ``fmt`` on ``profile``: the profile's first
    runtime that reads the format and has a usable device here; (None, None) when none does
    (the caller falls back to the bundle's default runtime)."""
    from edgekit.errors import EdgekitError
    from edgekit.runtimes import get_runtime

    for name in profile.runtimes:
        try:
            runtime = get_runtime(name)
            devices = runtime.devices()
        except (EdgekitError, ImportError):
            continue
        if fmt not in runtime.formats or not devices:
            continue
        wanted = profile.device_for(name)
        return name, wanted if wanted in devices else None
    return None, None
