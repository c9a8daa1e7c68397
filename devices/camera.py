"""The camera contract: ``capture(settings) -> Frame`` and ``capabilities()``, one per backend.

Backends (sim, v4l2, picamera2, gstreamer, file) subclass ``Camera``. A requested setting outside
a control's range is clamped to the nearest allowed value and the clamp is reported in
``Frame.clamped`` — never silently changed. A camera that goes away raises CameraDisconnected.

A control change reaches the sensor a few frames later (a 2-4 frame deep pipeline; UVC webcams
differ), so ``capture(settings)`` waits until a frame really carries the requested settings and
drops the frames before it: ``Frame.settings`` are the settings the frame had (from the sensor's
metadata, a control readback, or the simulator), ``Frame.requested`` what was asked for (clamped),
``Frame.dropped_frames`` how many frames the wait cost and ``Frame.settings_source`` how the
settings are known (``SETTINGS_SOURCES``). A frame that never arrives raises SettingsTimeout.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from edgekit.errors import EdgekitError, InputError


class CameraDisconnected(EdgekitError):
    """The camera stopped answering (unplugged, driver reset, end of a file source)."""


# How a frame's ``settings`` are known: "sim" (the simulator rendered them), "metadata" (the
# sensor's per-frame metadata, picamera2), "readback" (controls read back after the pipeline
# depth was discarded, V4L2), "unverified" (applied, but the source cannot report them:
# GStreamer), "none" (the source has no controls: files).
SETTINGS_SOURCES = ("sim", "metadata", "readback", "unverified", "none")


@dataclass(frozen=True)
class CaptureSettings:
    """Sensor settings for one capture. None leaves a control as the camera has it.

    ``iso``: sensitivity (ISO 100 = base gain); ``shutter_s``: exposure time in seconds;
    ``aperture_f``: f-number N; ``auto_exposure``: let the camera meter (other fields ignored).
    """

    iso: float | None = None
    shutter_s: float | None = None
    aperture_f: float | None = None
    auto_exposure: bool = False

    def describe(self) -> str:
        if self.auto_exposure:
            return "auto-exposure"
        parts = []
        if self.iso is not None:
            parts.append(f"ISO {self.iso:g}")
        if self.shutter_s is not None:
            parts.append(
                f"1/{1 / self.shutter_s:g} s" if self.shutter_s < 1 else f"{self.shutter_s:g} s"
            )
        if self.aperture_f is not None:
            parts.append(f"f/{self.aperture_f:g}")
        return " ".join(parts) or "camera default"

    def exposure_value(self) -> float | None:
        """EV100 of this setting: log2(N^2 / t) - log2(ISO / 100); None if a field is unset."""
        if None in (self.iso, self.shutter_s, self.aperture_f):
            return None
        return math.log2(self.aperture_f**2 / self.shutter_s) - math.log2(self.iso / 100)  # type: ignore[operator]

    def to_json(self) -> dict[str, Any]:
        return {
            "iso": self.iso,
            "shutter_s": self.shutter_s,
            "aperture_f": self.aperture_f,
            "auto_exposure": self.auto_exposure,
        }


@dataclass(frozen=True)
class ControlRange:
    """One control: continuous [minimum, maximum] (with an optional step) or discrete values."""

    name: str  # "iso" | "shutter_s" | "aperture_f"
    minimum: float
    maximum: float
    step: float | None = None
    values: tuple[float, ...] | None = None

    def clamp(self, value: float) -> float:
        """The allowed value nearest to ``value`` (in log space for discrete value lists)."""
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"{self.name} must be a positive finite number, got {value!r}")
        if self.values:
            return min(self.values, key=lambda v: abs(math.log(v) - math.log(value)))
        clamped = min(max(value, self.minimum), self.maximum)
        if self.step:
            clamped = self.minimum + round((clamped - self.minimum) / self.step) * self.step
            clamped = min(max(clamped, self.minimum), self.maximum)
        return clamped


@dataclass
class Frame:
    """One capture. ``image``: (H, W, 3) uint8 RGB.

    ``settings`` are those the frame really had (``settings_source`` says how that is known);
    ``requested``: the clamped request (None when none was made); ``clamped`` maps a control name
    to (requested, applied) for every value the camera had to change; ``latency_s`` is the time
    from request to frame, the ``dropped_frames`` waited for the settings and the shutter time
    included.
    """

    image: np.ndarray
    timestamp_s: float
    settings: CaptureSettings
    latency_s: float = 0.0
    clamped: dict[str, tuple[float, float]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    requested: CaptureSettings | None = None
    dropped_frames: int = 0
    settings_source: str = "unverified"


@dataclass(frozen=True)
class SettleTolerance:
    """When a frame's settings count as the requested ones (sensors quantise them).

    Exposure matches within max(``exposure_rel`` x requested, ``exposure_abs_s``: one sensor line
    time); ISO (gain) within ``iso_rel`` x requested. Unset fields of the request always match.
    """

    exposure_rel: float = 0.02
    exposure_abs_s: float = 30e-6
    iso_rel: float = 0.02

    def matches(self, actual: CaptureSettings, requested: CaptureSettings) -> bool:
        """True when ``actual`` carries ``requested`` (auto-exposure requests always match)."""
        if requested.auto_exposure:
            return True
        if requested.shutter_s is not None:
            if actual.shutter_s is None:
                return False
            tol = max(self.exposure_rel * requested.shutter_s, self.exposure_abs_s)
            if abs(actual.shutter_s - requested.shutter_s) > tol:
                return False
        if requested.iso is None:
            return True
        return actual.iso is not None and abs(actual.iso - requested.iso) <= (
            self.iso_rel * requested.iso
        )


EXACT = SettleTolerance(exposure_rel=1e-9, exposure_abs_s=0.0, iso_rel=1e-9)


class SettingsTimeout(EdgekitError):
    """No frame carried the requested settings within the wait limit (frames or seconds)."""

    def __init__(
        self,
        camera: str,
        requested: CaptureSettings,
        last_seen: CaptureSettings | None,
        frames: int,
        waited_s: float,
    ) -> None:
        self.requested, self.last_seen, self.frames, self.waited_s = (
            requested, last_seen, frames, waited_s,
        )  # fmt: skip
        seen = last_seen.describe() if last_seen is not None else "no frame"
        super().__init__(
            f"{camera}: no frame carried the requested settings ({requested.describe()}) after "
            f"{frames} frames / {waited_s:.3f} s; the last frame had {seen}"
        )


class Camera(ABC):
    """A source of frames with (possibly no) sensor controls."""

    name: str = ""

    @abstractmethod
    def capabilities(self) -> dict[str, ControlRange]:
        """Controls this camera accepts, by name; {} for sources without controls (files)."""

    @abstractmethod
    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        """Apply ``settings`` (clamped to capabilities) and return the next frame."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the device."""

    def __enter__(self) -> Camera:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clamp(
        self, settings: CaptureSettings
    ) -> tuple[CaptureSettings, dict[str, tuple[float, float]]]:
        """``settings`` clamped to this camera's ranges, and what was changed (requested, applied)."""
        caps = self.capabilities()
        changed: dict[str, tuple[float, float]] = {}
        applied: dict[str, float | None] = {}
        for name in ("iso", "shutter_s", "aperture_f"):
            value = getattr(settings, name)
            if value is None or name not in caps:
                applied[name] = None if name not in caps else value
                continue
            new = caps[name].clamp(float(value))
            if not math.isclose(new, value, rel_tol=1e-9):
                changed[name] = (float(value), new)
            applied[name] = new
        return replace(settings, **applied), changed


def open_camera(spec: str, **options: Any) -> Camera:
    """A camera from a spec string: ``sim``, ``sim:seed=3,lighting=dim``, ``v4l2:/dev/video0``,
    ``picamera2``, ``gstreamer:<pipeline or sensor-id>``, ``file:clip.mp4`` or ``file:frames/``.
    Unknown kinds are an InputError listing the known ones; a missing SDK is one
    MissingDependencyError naming the package."""
    import importlib

    kinds = {
        "sim": "edgekit.devices.sim_camera:SimCamera",
        "v4l2": "edgekit.devices.v4l2_camera:V4L2Camera",
        "picamera2": "edgekit.devices.picamera2_camera:PiCamera2Camera",
        "gstreamer": "edgekit.devices.gstreamer_camera:GStreamerCamera",
        "file": "edgekit.devices.file_camera:FileCamera",
    }
    kind, _, arg = spec.partition(":")
    if kind not in kinds:
        raise InputError(
            f"unknown camera '{spec}'; expected one of {', '.join(kinds)} (e.g. sim, v4l2:/dev/video0)"
        )
    module, _, attr = kinds[kind].partition(":")
    return getattr(importlib.import_module(module), attr).from_spec(arg, **options)
