"""The environment a benchmark ran in: CPU, memory, OS, runtime versions, clocks and power.

Everything here is best effort: an unreadable file or a missing tool gives ``None`` (or leaves
the key out), never an exception. Versions come from package metadata, so no SDK is imported
just to learn its version.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# CPU features that change which inference kernels run (x86 and Arm spellings).
INFERENCE_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "amx_fp16",
    "neon",
    "asimd",
    "asimdhp",
    "asimddp",
    "fphp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
)

# Distribution name -> key in the record (importlib.metadata spellings).
PACKAGES = (
    "edgekit",
    "numpy",
    "torch",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "openvino",
    "nncf",
    "tensorrt",
    "transformers",
    "optimum",
    "optimum-onnx",
)

THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "KMP_AFFINITY",
    "OMP_WAIT_POLICY",
)


def _safe(fn: Callable[[], T], default: T | None = None) -> T | None:
    try:
        return fn()
    except Exception:
        return default


def _read(path: str | Path) -> str | None:
    return _safe(lambda: Path(path).read_text(encoding="utf-8", errors="replace").strip())


def _run(cmd: list[str], timeout: float = 2.0) -> str | None:
    def call() -> str | None:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return out.stdout.strip() or None if out.returncode == 0 else None

    return _safe(call)


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo plus the board-level keys (Arm)."""
    text = _read("/proc/cpuinfo") or ""
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in info:
            info[key.strip()] = value.strip()
    return info


def cpu_model() -> str:
    """Human name of the CPU, e.g. "Intel(R) Xeon(R) Platinum 8480+" or "Cortex-A76"."""
    info = _cpuinfo()
    for key in ("model name", "Model", "Hardware", "cpu model"):
        if info.get(key):
            return info[key]
    if sys.platform == "darwin":
        name = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if name:
            return name
    part = info.get("CPU part")
    if part:
        return f"Arm CPU part {part} (implementer {info.get('CPU implementer', '?')})"
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> list[str]:
    """The inference-relevant subset of the CPU feature flags, in INFERENCE_FLAGS order."""
    info = _cpuinfo()
    present = set((info.get("flags") or info.get("Features") or "").split())
    if sys.platform == "darwin" and platform.machine() == "arm64":
        present |= {"neon", "asimd", "fphp", "asimdhp", "asimddp"}
    return [flag for flag in INFERENCE_FLAGS if flag in present]


def _cores() -> dict[str, Any]:
    import psutil

    affinity = _safe(lambda: len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    quota = _read("/sys/fs/cgroup/cpu.max")  # "max 100000" or "200000 100000" (cgroup v2)
    cgroup_cpus = None
    if quota and not quota.startswith("max"):
        parts = quota.split()
        limit, period = _safe(lambda: float(parts[0])), _safe(lambda: float(parts[1]))
        if limit and period:
            cgroup_cpus = round(limit / period, 2)
    return {
        "physical": _safe(lambda: psutil.cpu_count(logical=False)),
        "logical": _safe(lambda: psutil.cpu_count(logical=True)),
        "usable": affinity,
        "cgroup_limit": cgroup_cpus,
    }


def _frequency() -> dict[str, Any]:
    import psutil

    base = "/sys/devices/system/cpu/cpu0/cpufreq"
    freq = _safe(psutil.cpu_freq)

    def khz_to_mhz(name: str) -> float | None:
        raw = _read(f"{base}/{name}")
        return _safe(lambda: int(raw) / 1000.0) if raw else None

    return {
        "current_mhz": getattr(freq, "current", None) or khz_to_mhz("scaling_cur_freq"),
        "min_mhz": getattr(freq, "min", None) or khz_to_mhz("cpuinfo_min_freq"),
        "max_mhz": getattr(freq, "max", None) or khz_to_mhz("cpuinfo_max_freq"),
        "governor": _read(f"{base}/scaling_governor"),
        "energy_performance_preference": _read(f"{base}/energy_performance_preference"),
        "boost": _read("/sys/devices/system/cpu/cpufreq/boost")
        or _read("/sys/devices/system/cpu/intel_pstate/no_turbo"),
    }


def _power() -> dict[str, Any]:
    import psutil

    power: dict[str, Any] = {}
    battery = _safe(psutil.sensors_battery)
    if battery is not None:
        power["battery_percent"] = battery.percent
        power["on_ac"] = battery.power_plugged
    supplies = {
        supply.name: {"type": _read(supply / "type"), "online": _read(supply / "online")}
        for supply in sorted(Path("/sys/class/power_supply").glob("*"))
    }
    if supplies:
        power["supplies"] = supplies
    temps = {}
    for zone in sorted(Path("/sys/class/thermal").glob("thermal_zone*")):
        raw = _read(zone / "temp")
        value = _safe(lambda raw=raw: int(raw) / 1000.0) if raw else None
        if value is not None:
            temps[_read(zone / "type") or zone.name] = value
    if temps:
        power["temperatures_c"] = temps
    return power


def _board() -> dict[str, Any]:
    """Jetson / Raspberry Pi facts: board model, L4T release, nvpmodel power mode, throttling."""
    board: dict[str, Any] = {}
    model = _read("/proc/device-tree/model")
    if model:
        board["model"] = model.rstrip("\x00")
    tegra = _read("/etc/nv_tegra_release")
    if tegra:
        board["l4t"] = tegra.splitlines()[0]
        mode = _run(["nvpmodel", "-q"])
        if mode:
            board["nvpmodel"] = " ".join(mode.split())
    throttled = _run(["vcgencmd", "get_throttled"])
    if throttled:
        board["throttled"] = throttled
    return board


def package_versions() -> dict[str, str]:
    """Installed versions of edgekit and the inference stacks (from metadata, no imports)."""
    versions = {}
    for dist in PACKAGES:
        version = _safe(lambda dist=dist: metadata.version(dist))
        if version:
            versions[dist] = version
    return versions


def _memory() -> dict[str, Any]:
    import psutil

    vm = _safe(psutil.virtual_memory)
    gib = 1024.0**3
    return {
        "total_gb": round(vm.total / gib, 2) if vm else None,
        "available_gb": round(vm.available / gib, 2) if vm else None,
    }


def environment() -> dict[str, Any]:
    """A JSON-ready record of the machine and software a benchmark ran on. Never raises."""
    uname = platform.uname()
    record: dict[str, Any] = {
        "hostname": _safe(socket.gethostname),
        "timestamp_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": {
            "model": _safe(cpu_model, "unknown"),
            "arch": uname.machine,
            "flags": _safe(cpu_flags, []),
            "cores": _safe(_cores, {}),
            "frequency": _safe(_frequency, {}),
        },
        "memory": _safe(_memory, {}),
        "os": {
            "system": uname.system,
            "release": uname.release,
            "platform": _safe(platform.platform),
            "libc": " ".join(_safe(platform.libc_ver, ("", "")) or ()).strip() or None,
        },
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "packages": _safe(package_versions, {}),
        "power": _safe(_power, {}),
        "board": _safe(_board, {}),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
    load = _safe(os.getloadavg)
    if load:
        record["load_average"] = [round(x, 2) for x in load]
    return record


def process_rss_mb() -> float | None:
    """Current resident set size of this process in MiB (None when unreadable)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return None


def peak_rss_mb() -> float | None:
    """Peak resident set size of this process in MiB.

    Linux: VmHWM from /proc/self/status, the high-water mark of this process's own memory map.
    (ru_maxrss is not used there: across fork + exec it keeps the parent's peak, so a small
    worker started from a large process would report the parent's size.) Elsewhere ru_maxrss,
    or psutil's peak_wset on Windows.
    """
    status = _read("/proc/self/status")
    if status:
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**10
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    except ImportError:
        import psutil

        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss) / 2**20
