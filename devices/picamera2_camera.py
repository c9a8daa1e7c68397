"""Raspberry Pi cameras through ``picamera2`` (libcamera), with the settings mapping kept pure.

libcamera controls used: ``AeEnable`` (bool), ``ExposureTime`` (int, microseconds),
``AnalogueGain`` (float, 1.0 = unity = ISO 100 here, so AnalogueGain = ISO / 100). Pi camera
modules have a fixed aperture; a requested aperture is reported as ignored. Install with
``pip install 'edgekit[pi]'`` (on Raspberry Pi OS prefer ``apt install python3-picamera2``).

Settling: libcamera applies controls a few frames after ``set_controls`` and reports, per request,
the ``ExposureTime`` and ``AnalogueGain`` the frame was really taken with. ``capture`` releases
requests until one carries the request within ``tolerance`` (the sensor quantises exposure to
lines and gain to its gain codes: default exposure within max(2 %, 30 us ~ one line), gain within
2 %) and returns it with ``Frame.dropped_frames``; none within ``max_wait_frames`` frames or
``timeout_s`` raises SettingsTimeout. Auto-exposure requests take the next frame.

Frame duration: libcamera cuts an exposure to the longest frame the ``FrameDurationLimits``
allow, so a manual exposure longer than the configuration's limit would never be reached. Each
manual request widens the limits to at least its exposure; auto exposure gets the
configuration's limits back.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from edgekit.devices.camera import (
    Camera,
    CameraDisconnected,
    CaptureSettings,
    ControlRange,
    Frame,
    SettleTolerance,
)
from edgekit.devices.settle import DEFAULT_MAX_WAIT_FRAMES, DEFAULT_TIMEOUT_S, wait_for_settings
from edgekit.errors import InputError, MissingDependencyError

US_PER_S = 1_000_000  # ExposureTime unit: microseconds
ISO_PER_UNIT_GAIN = 100.0  # AnalogueGain 1.0 <-> ISO 100


def picamera2_controls(
    settings: CaptureSettings, frame_limits_us: tuple[int, int] | None = None
) -> dict[str, Any]:
    """libcamera controls for already-clamped ``settings`` (for ``Picamera2.set_controls``).

    ``frame_limits_us``: the configuration's (shortest, longest) frame duration in microseconds;
    given, a manual exposure longer than the longest frame raises that limit to the exposure
    (libcamera cuts exposures to the frame duration) and auto exposure restores the limits.
    """
    if settings.auto_exposure:
        controls: dict[str, Any] = {"AeEnable": True}
        if frame_limits_us is not None:
            controls["FrameDurationLimits"] = tuple(int(v) for v in frame_limits_us)
        return controls
    controls = {"AeEnable": False}
    if settings.shutter_s is not None:
        controls["ExposureTime"] = max(1, round(settings.shutter_s * US_PER_S))
        if frame_limits_us is not None:
            shortest, longest = (int(v) for v in frame_limits_us)
            controls["FrameDurationLimits"] = (shortest, max(longest, controls["ExposureTime"]))
    if settings.iso is not None:
        controls["AnalogueGain"] = float(settings.iso) / ISO_PER_UNIT_GAIN
    return controls


def settings_from_metadata(metadata: dict[str, Any]) -> CaptureSettings:
    """The settings a frame was taken with, from picamera2 request metadata."""
    exposure = metadata.get("ExposureTime")
    gain = metadata.get("AnalogueGain")
    return CaptureSettings(
        iso=None if gain is None else float(gain) * ISO_PER_UNIT_GAIN,
        shutter_s=None if exposure is None else float(exposure) / US_PER_S,
    )


def capabilities_from_camera_controls(camera_controls: dict[str, tuple]) -> dict[str, ControlRange]:
    """ControlRanges from ``Picamera2.camera_controls`` ({name: (min, max, default)})."""
    caps: dict[str, ControlRange] = {}
    if "ExposureTime" in camera_controls:
        lo, hi = camera_controls["ExposureTime"][:2]
        caps["shutter_s"] = ControlRange("shutter_s", max(lo, 1) / US_PER_S, hi / US_PER_S)
    if "AnalogueGain" in camera_controls:
        lo, hi = camera_controls["AnalogueGain"][:2]
        caps["iso"] = ControlRange("iso", lo * ISO_PER_UNIT_GAIN, hi * ISO_PER_UNIT_GAIN)
    return caps


def frame_limits(
    config: dict[str, Any], camera_controls: dict[str, tuple]
) -> tuple[int, int] | None:
    """(shortest, longest) frame duration in microseconds the configuration sets, else the
    sensor's range from ``camera_controls``; None when neither names them."""
    limits = (config.get("controls") or {}).get("FrameDurationLimits")
    if limits is None and "FrameDurationLimits" in camera_controls:
        limits = camera_controls["FrameDurationLimits"][:2]
    if limits is None or len(limits) < 2 or None in tuple(limits[:2]):
        return None
    return int(limits[0]), int(limits[1])


def _import_picamera2() -> Any:
    try:
        import picamera2
    except ImportError as exc:
        raise MissingDependencyError(
            "The Raspberry Pi camera", "picamera2", extra="pi", detail=str(exc)
        ) from None
    return picamera2


class PiCamera2Camera(Camera):
    """A Pi camera module; frames as (H, W, 3) uint8 RGB at ``size`` = (H, W).

    ``tolerance``, ``max_wait_frames``, ``timeout_s``: when a frame counts as carrying the
    requested settings and how long to wait for one (module docstring).
    """

    name = "picamera2"

    def __init__(
        self,
        index: int = 0,
        size: tuple[int, int] = (480, 640),
        tolerance: SettleTolerance | None = None,
        max_wait_frames: int = DEFAULT_MAX_WAIT_FRAMES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.tolerance = tolerance or SettleTolerance()
        self.max_wait_frames, self.timeout_s = int(max_wait_frames), float(timeout_s)
        module = _import_picamera2()
        try:
            self._cam = module.Picamera2(index)
        except (IndexError, RuntimeError) as exc:
            raise CameraDisconnected(f"no Raspberry Pi camera {index}: {exc}") from exc
        # "RGB888" is stored B, G, R in memory (libcamera naming); flipped below.
        config = self._cam.create_still_configuration(
            main={"format": "RGB888", "size": (size[1], size[0])}
        )
        self._cam.configure(config)
        self.frame_limits_us = frame_limits(config, self._cam.camera_controls)
        self._cam.start()

    @classmethod
    def from_spec(cls, arg: str, **options: Any) -> PiCamera2Camera:
        """``picamera2`` or ``picamera2:1`` (camera index)."""
        if arg and not arg.isdigit():
            raise InputError(f"picamera2 wants a camera index like picamera2:0, got '{arg}'")
        return cls(int(arg or 0), **options)

    def capabilities(self) -> dict[str, ControlRange]:
        return capabilities_from_camera_controls(self._cam.camera_controls)

    def _read(self) -> tuple[Any, CaptureSettings]:
        request = self._cam.capture_request()
        return request, settings_from_metadata(request.get_metadata())

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        """Apply ``settings`` and return the first frame whose metadata carries them."""
        settings = settings or CaptureSettings()
        applied, clamped = self.clamp(settings)
        start = time.perf_counter()
        try:
            self._cam.set_controls(picamera2_controls(applied, self.frame_limits_us))
            request, actual, dropped = wait_for_settings(
                self._read, applied, self.tolerance, camera="Raspberry Pi camera",
                drop=lambda r: r.release(), max_frames=self.max_wait_frames,
                timeout_s=self.timeout_s,
            )  # fmt: skip
            try:
                image = np.ascontiguousarray(request.make_array("main")[..., 2::-1])
            finally:
                request.release()
        except RuntimeError as exc:
            raise CameraDisconnected(f"Raspberry Pi camera stopped: {exc}") from exc
        ignored = ["aperture_f"] if settings.aperture_f is not None else []
        return Frame(
            image=image,
            timestamp_s=time.time(),
            settings=CaptureSettings(actual.iso, actual.shutter_s, None, applied.auto_exposure),
            latency_s=time.perf_counter() - start,
            clamped=clamped,
            requested=applied,
            dropped_frames=dropped,
            settings_source="metadata",
            metadata={"camera": self.name, "ignored": ignored, "requested": applied.to_json()},
        )

    def close(self) -> None:
        self._cam.stop()
        self._cam.close()
