"""USB / CSI webcams through Video4Linux2 (``linuxpy``), with the settings mapping kept pure.

V4L2 controls used (Linux UAPI, "Camera Control Reference"):

- ``auto_exposure`` (V4L2_CID_EXPOSURE_AUTO, menu): 0 auto, 1 manual, 2 shutter priority,
  3 aperture priority. Manual settings use 1; ``auto_exposure=True`` uses 3 (UVC webcams have a
  fixed iris, so "aperture priority" is their full auto mode).
- ``exposure_time_absolute`` (V4L2_CID_EXPOSURE_ABSOLUTE): exposure time in units of 100 us.
- ``iso_sensitivity`` (V4L2_CID_ISO_SENSITIVITY, ISO units) when the driver has it, else ``gain``
  (V4L2_CID_GAIN), whose unit is driver specific: it is mapped on a log scale so the control's
  minimum is ISO 100 and its maximum is ``iso_at_max_gain`` (ISO 1600 by default: 4 stops, typical
  of UVC webcams). Webcams have no aperture control; a requested aperture is reported as ignored.

Settling: V4L2 frames carry no exposure metadata, and a control change reaches the frames a few
frames later (the sensor pipeline plus the driver's queued buffers). After writing the controls,
``capture`` reads them back until they hold the written values (``Frame.settings`` are the
read-back values), then drops ``settle_frames`` frames in all (default ``DEFAULT_SETTLE_FRAMES`` =
3; per device with ``v4l2:/dev/video0,settle_frames=4``; it cannot be measured at open without a
known scene, so it is not) and returns the next one. Unchanged controls drop nothing. A readback
that never matches raises SettingsTimeout after ``max_wait_frames`` frames or ``timeout_s``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.devices.camera import (
    Camera,
    CameraDisconnected,
    CaptureSettings,
    ControlRange,
    Frame,
    SettingsTimeout,
    SettleTolerance,
)
from edgekit.devices.settle import DEFAULT_MAX_WAIT_FRAMES, DEFAULT_TIMEOUT_S
from edgekit.errors import InputError, MissingDependencyError

EXPOSURE_UNIT_S = 100e-6  # V4L2 exposure_time_absolute unit: 100 microseconds
AUTO_EXPOSURE_MANUAL = 1  # V4L2_EXPOSURE_MANUAL
AUTO_EXPOSURE_APERTURE_PRIORITY = 3  # V4L2_EXPOSURE_APERTURE_PRIORITY
ISO_AT_MAX_GAIN = 1600.0  # assumed ISO of the gain control's maximum (gain units are per driver)
DEFAULT_SETTLE_FRAMES = 3  # frames a control change takes to reach the frames (UVC: 2-4)

Limits = tuple[float, float, float]  # (minimum, maximum, step) of a V4L2 integer control


def shutter_to_exposure_absolute(shutter_s: float) -> int:
    """Seconds -> V4L2 exposure_time_absolute (100 us units), at least 1."""
    return max(1, round(shutter_s / EXPOSURE_UNIT_S))


def exposure_absolute_to_shutter(value: float) -> float:
    """V4L2 exposure_time_absolute (100 us units) -> seconds."""
    return float(value) * EXPOSURE_UNIT_S


def iso_to_gain(iso: float, limits: Limits, iso_at_max: float = ISO_AT_MAX_GAIN) -> int:
    """ISO -> V4L2 gain value: log scale, control minimum = ISO 100, maximum = ``iso_at_max``."""
    lo, hi, step = limits
    frac = math.log(max(iso, 100.0) / 100.0) / math.log(iso_at_max / 100.0)
    value = lo + min(max(frac, 0.0), 1.0) * (hi - lo)
    step = step or 1
    return int(lo + round((value - lo) / step) * step)


def gain_to_iso(gain: float, limits: Limits, iso_at_max: float = ISO_AT_MAX_GAIN) -> float:
    """Inverse of ``iso_to_gain``."""
    lo, hi, _ = limits
    frac = 0.0 if hi <= lo else (gain - lo) / (hi - lo)
    return 100.0 * (iso_at_max / 100.0) ** frac


def capabilities_from_controls(
    controls: dict[str, Limits], iso_at_max: float = ISO_AT_MAX_GAIN
) -> dict[str, ControlRange]:
    """ControlRanges from V4L2 control limits {name: (min, max, step)} (names as in v4l2-ctl)."""
    caps: dict[str, ControlRange] = {}
    if "exposure_time_absolute" in controls:
        lo, hi, step = controls["exposure_time_absolute"]
        caps["shutter_s"] = ControlRange(
            "shutter_s",
            exposure_absolute_to_shutter(max(lo, 1)),
            exposure_absolute_to_shutter(hi),
            step=exposure_absolute_to_shutter(step) if step and step > 1 else None,
        )
    if "iso_sensitivity" in controls:
        lo, hi, _ = controls["iso_sensitivity"]
        caps["iso"] = ControlRange("iso", float(lo), float(hi))
    elif "gain" in controls:
        caps["iso"] = ControlRange("iso", 100.0, iso_at_max)
    return caps


def v4l2_controls_for(
    settings: CaptureSettings, controls: dict[str, Limits], iso_at_max: float = ISO_AT_MAX_GAIN
) -> dict[str, int]:
    """The V4L2 control values (name -> int) that apply already-clamped ``settings``."""
    if settings.auto_exposure:
        return {"auto_exposure": AUTO_EXPOSURE_APERTURE_PRIORITY}
    values = {"auto_exposure": AUTO_EXPOSURE_MANUAL}
    if settings.shutter_s is not None and "exposure_time_absolute" in controls:
        values["exposure_time_absolute"] = shutter_to_exposure_absolute(settings.shutter_s)
    if settings.iso is not None:
        if "iso_sensitivity" in controls:
            values["iso_sensitivity"] = round(settings.iso)
        elif "gain" in controls:
            values["gain"] = iso_to_gain(settings.iso, controls["gain"], iso_at_max)
    return values


def settings_from_controls(
    values: dict[str, float], controls: dict[str, Limits], iso_at_max: float = ISO_AT_MAX_GAIN
) -> CaptureSettings:
    """The settings V4L2 control values {name: value} (read back from the device) stand for."""
    shutter = values.get("exposure_time_absolute")
    iso = values.get("iso_sensitivity")
    if iso is None and "gain" in values and "gain" in controls:
        iso = gain_to_iso(values["gain"], controls["gain"], iso_at_max)
    return CaptureSettings(
        iso=None if iso is None else float(iso),
        shutter_s=None if shutter is None else exposure_absolute_to_shutter(shutter),
        auto_exposure=values.get("auto_exposure") == AUTO_EXPOSURE_APERTURE_PRIORITY,
    )


def yuyv_to_rgb(data: bytes | np.ndarray, width: int, height: int) -> np.ndarray:
    """YUYV 4:2:2 (BT.601 limited range) bytes -> (H, W, 3) uint8 RGB."""
    raw = np.frombuffer(data, dtype=np.uint8)[: width * height * 2].reshape(height, width // 2, 4)
    y = raw[..., [0, 2]].reshape(height, width).astype(np.float32) - 16.0
    u = np.repeat(raw[..., 1].astype(np.float32) - 128.0, 2, axis=1)
    v = np.repeat(raw[..., 3].astype(np.float32) - 128.0, 2, axis=1)
    r = 1.164 * y + 1.596 * v
    g = 1.164 * y - 0.392 * u - 0.813 * v
    b = 1.164 * y + 2.017 * u
    return np.clip(np.stack([r, g, b], axis=-1) + 0.5, 0, 255).astype(np.uint8)


def _import_linuxpy() -> Any:
    try:
        from linuxpy.video import device
    except ImportError as exc:
        raise MissingDependencyError("The V4L2 camera", "linuxpy", detail=str(exc)) from None
    return device


class V4L2Camera(Camera):
    """A V4L2 device (``/dev/videoN``) read with linuxpy; MJPEG or YUYV frames -> RGB.

    ``settle_frames``: frames dropped after a control change (module docstring);
    ``max_wait_frames`` / ``timeout_s``: how long the readback may take before SettingsTimeout.
    """

    name = "v4l2"

    def __init__(
        self,
        path: str = "/dev/video0",
        iso_at_max_gain: float = ISO_AT_MAX_GAIN,
        settle_frames: int = DEFAULT_SETTLE_FRAMES,
        max_wait_frames: int = DEFAULT_MAX_WAIT_FRAMES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tolerance: SettleTolerance | None = None,
    ) -> None:
        if settle_frames < 0 or max_wait_frames < 0:
            raise InputError(
                f"settle_frames and max_wait_frames must be >= 0, got {settle_frames}, "
                f"{max_wait_frames}"
            )
        self.settle_frames, self.max_wait_frames = int(settle_frames), int(max_wait_frames)
        self.timeout_s = timeout_s
        # one control unit (100 us) of exposure; gain steps are ~1 % on a 0..255 control
        self.tolerance = tolerance or SettleTolerance(exposure_abs_s=EXPOSURE_UNIT_S)
        self._written: dict[str, int] | None = None
        device = _import_linuxpy()
        if not Path(path).exists():
            raise CameraDisconnected(f"no V4L2 device at {path} (is the camera plugged in?)")
        self.path = path
        self.iso_at_max = iso_at_max_gain
        self._device = device.Device(path)
        try:
            self._device.open()
        except OSError as exc:
            raise CameraDisconnected(f"cannot open {path}: {exc}") from exc
        self._limits: dict[str, Limits] = {}
        for ctrl in self._device.controls.values():
            name = getattr(ctrl, "config_name", None) or str(getattr(ctrl, "name", "")).lower()
            lo, hi = getattr(ctrl, "minimum", None), getattr(ctrl, "maximum", None)
            if lo is not None and hi is not None:
                self._limits[name] = (float(lo), float(hi), float(getattr(ctrl, "step", 1) or 1))
        self._stream = iter(self._device)

    @classmethod
    def from_spec(cls, arg: str, **options: Any) -> V4L2Camera:
        """``/dev/video0`` or a device number ``0``, optionally ``,settle_frames=4``,
        ``,max_wait_frames=30``, ``,timeout_s=2``; keyword ``options`` win."""
        arg, *opts = arg.split(",")
        kwargs: dict[str, Any] = {}
        for opt in filter(None, (o.strip() for o in opts)):
            key, _, value = opt.partition("=")
            if key in ("settle_frames", "max_wait_frames"):
                kwargs[key] = int(value)
            elif key == "timeout_s":
                kwargs[key] = float(value)
            else:
                raise InputError(
                    f"unknown v4l2 camera option '{key}'; expected settle_frames, "
                    "max_wait_frames, timeout_s"
                )
        options = {**kwargs, **options}
        arg = arg or "/dev/video0"
        path = f"/dev/video{arg}" if arg.isdigit() else arg
        if not path.startswith("/dev/"):
            raise InputError(f"v4l2 camera wants a device path like /dev/video0, got '{arg}'")
        return cls(path, **options)

    def capabilities(self) -> dict[str, ControlRange]:
        return capabilities_from_controls(self._limits, self.iso_at_max)

    def _set(self, values: dict[str, int]) -> None:
        controls = self._device.controls
        for name, value in values.items():
            if name in self._limits or name == "auto_exposure":
                controls[name].value = value

    def _readback(self, names: list[str]) -> CaptureSettings:
        controls = self._device.controls
        values = {n: float(controls[n].value) for n in names}
        return settings_from_controls(values, self._limits, self.iso_at_max)

    def _settle(
        self, applied: CaptureSettings, values: dict[str, int]
    ) -> tuple[CaptureSettings, int]:
        """Write ``values``, wait for the readback, drop the pipeline: (read back, dropped)."""
        changed = values != self._written
        self._set(values)
        names = [n for n in values if n in self._limits or n == "auto_exposure"]
        start, dropped = time.perf_counter(), 0
        actual = self._readback(names)
        while not self.tolerance.matches(actual, applied):
            waited = time.perf_counter() - start
            if dropped >= self.max_wait_frames or waited > self.timeout_s:
                self._written = None  # unknown state: the next capture settles again
                raise SettingsTimeout(f"V4L2 {self.path}", applied, actual, dropped, waited)
            next(self._stream)
            dropped += 1
            actual = self._readback(names)
        self._written = values
        for _ in range(dropped, self.settle_frames if changed else 0):
            next(self._stream)
            dropped += 1
        return actual, dropped

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        """Apply ``settings`` and return the first frame taken with them (module docstring)."""
        settings = settings or CaptureSettings()
        applied, clamped = self.clamp(settings)
        start = time.perf_counter()
        try:
            values = v4l2_controls_for(applied, self._limits, self.iso_at_max)
            actual, dropped = self._settle(applied, values)
            frame = next(self._stream)
        except (OSError, StopIteration) as exc:
            raise CameraDisconnected(f"V4L2 device {self.path} stopped: {exc}") from exc
        fmt = getattr(frame, "pixel_format", None)  # linuxpy: on the frame or its format
        fmt = str(fmt or getattr(getattr(frame, "format", None), "pixel_format", ""))
        if "YUYV" in fmt:
            image = yuyv_to_rgb(bytes(frame.data), frame.width, frame.height)
        else:
            import imageio.v3 as iio

            image = np.asarray(iio.imread(bytes(frame.data)))[..., :3]
        ignored = [n for n in ("aperture_f",) if getattr(settings, n) is not None]
        return Frame(
            image=image,
            timestamp_s=time.time(),
            settings=actual,
            latency_s=time.perf_counter() - start,
            clamped=clamped,
            requested=applied,
            dropped_frames=dropped,
            settings_source="readback",
            metadata={"camera": self.name, "device": self.path, "ignored": ignored},
        )

    def close(self) -> None:
        self._device.close()
