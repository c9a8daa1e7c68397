"""Jetson CSI cameras via ``nvarguscamerasrc`` in a GStreamer pipeline read by OpenCV.

nvarguscamerasrc properties used: ``exposuretimerange="LOW HIGH"`` (nanoseconds),
``gainrange="LOW HIGH"`` (sensor analogue gain, 1 = ISO 100 here), ``ispdigitalgainrange="1 1"``
(no hidden digital gain in manual mode), ``aelock`` (lock auto-exposure). Setting LOW = HIGH pins
the value. The properties are fixed when the pipeline starts, so a new setting rebuilds the
pipeline (about a second on a Jetson). Needs OpenCV built with GStreamer (JetPack's
``python3-opencv``; the PyPI wheels lack GStreamer). A full pipeline string may be given instead.

Settling: none. The appsink frames carry no exposure metadata, so a frame's settings cannot be
checked: ``Frame.settings`` are the pinned (requested) ones with ``settings_source="unverified"``
and ``dropped_frames=0``; a user pipeline has no controls (``settings_source="none"``).
"""

from __future__ import annotations

import time
from typing import Any

from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, ControlRange, Frame
from edgekit.errors import InputError, MissingDependencyError

NS_PER_S = 1_000_000_000  # exposuretimerange unit: nanoseconds
ISO_PER_UNIT_GAIN = 100.0  # gainrange 1.0 <-> ISO 100
# IMX219 (Raspberry Pi camera v2 / Jetson Nano dev kit) limits reported by Argus.
DEFAULT_EXPOSURE_NS = (13_000, 683_709_000)
DEFAULT_GAIN = (1.0, 10.625)


def exposure_ns(shutter_s: float) -> int:
    """Seconds -> nvarguscamerasrc exposure time (nanoseconds)."""
    return max(1, round(shutter_s * NS_PER_S))


def argus_pipeline(
    settings: CaptureSettings,
    sensor_id: int = 0,
    size: tuple[int, int] = (720, 1280),
    fps: int = 30,
) -> str:
    """The GStreamer pipeline string for already-clamped ``settings``; frames -> BGR appsink."""
    src = [f"nvarguscamerasrc sensor-id={sensor_id}"]
    if settings.auto_exposure:
        src.append("aelock=false")
    else:
        src.append("aelock=true")
        if settings.shutter_s is not None:
            ns = exposure_ns(settings.shutter_s)
            src.append(f'exposuretimerange="{ns} {ns}"')
        if settings.iso is not None:
            gain = float(settings.iso) / ISO_PER_UNIT_GAIN
            src.append(f'gainrange="{gain:g} {gain:g}"')
        src.append('ispdigitalgainrange="1 1"')
    h, w = size
    return (
        " ".join(src)
        + f" ! video/x-raw(memory:NVMM),width={w},height={h},framerate={fps}/1"
        + " ! nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR"
        + " ! appsink drop=true max-buffers=1"
    )


def argus_capabilities(
    exposure_ns_range: tuple[int, int] = DEFAULT_EXPOSURE_NS,
    gain_range: tuple[float, float] = DEFAULT_GAIN,
) -> dict[str, ControlRange]:
    """ControlRanges from Argus' exposure (ns) and gain limits (the sensor mode's)."""
    return {
        "shutter_s": ControlRange(
            "shutter_s", exposure_ns_range[0] / NS_PER_S, exposure_ns_range[1] / NS_PER_S
        ),
        "iso": ControlRange(
            "iso", gain_range[0] * ISO_PER_UNIT_GAIN, gain_range[1] * ISO_PER_UNIT_GAIN
        ),
    }


def _import_cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise MissingDependencyError(
            "The GStreamer camera",
            "opencv-python",
            detail=f"It needs OpenCV built with GStreamer (JetPack's python3-opencv). {exc}",
        ) from None
    return cv2


class GStreamerCamera(Camera):
    """nvarguscamerasrc (``sensor_id``) or a user ``pipeline`` ending in a BGR appsink."""

    name = "gstreamer"

    def __init__(
        self,
        sensor_id: int = 0,
        pipeline: str | None = None,
        size: tuple[int, int] = (720, 1280),
        exposure_ns_range: tuple[int, int] = DEFAULT_EXPOSURE_NS,
        gain_range: tuple[float, float] = DEFAULT_GAIN,
    ) -> None:
        self._cv2 = _import_cv2()
        self.sensor_id, self.fixed_pipeline, self.size = sensor_id, pipeline, size
        self._caps = {} if pipeline else argus_capabilities(exposure_ns_range, gain_range)
        self._cap: Any = None
        self._pipeline = ""

    @classmethod
    def from_spec(cls, arg: str, **options: Any) -> GStreamerCamera:
        """``gstreamer`` / ``gstreamer:1`` (sensor id) / ``gstreamer:<pipeline ... ! appsink>``."""
        if not arg or arg.isdigit():
            return cls(sensor_id=int(arg or 0), **options)
        if "appsink" not in arg:
            raise InputError("a gstreamer pipeline must end in an appsink (or give a sensor id)")
        return cls(pipeline=arg, **options)

    def capabilities(self) -> dict[str, ControlRange]:
        return dict(self._caps)

    def _open(self, pipeline: str) -> None:
        if self._cap is not None and pipeline == self._pipeline:
            return
        self.close()
        cap = self._cv2.VideoCapture(pipeline, self._cv2.CAP_GSTREAMER)
        if not cap.isOpened():
            raise CameraDisconnected(f"GStreamer pipeline did not start: {pipeline}")
        self._cap, self._pipeline = cap, pipeline

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        settings = settings or CaptureSettings()
        applied, clamped = self.clamp(settings)
        start = time.perf_counter()
        pipeline = self.fixed_pipeline or argus_pipeline(applied, self.sensor_id, self.size)
        self._open(pipeline)
        ok, bgr = self._cap.read()
        if not ok or bgr is None:
            raise CameraDisconnected("GStreamer camera returned no frame")
        ignored = [n for n in ("iso", "shutter_s", "aperture_f") if n not in self._caps]
        ignored = [n for n in ignored if getattr(settings, n) is not None]
        return Frame(
            image=bgr[..., ::-1].copy(),
            timestamp_s=time.time(),
            settings=applied,
            latency_s=time.perf_counter() - start,
            clamped=clamped,
            requested=applied,
            dropped_frames=0,
            settings_source="unverified" if self._caps else "none",
            metadata={"camera": self.name, "pipeline": pipeline, "ignored": ignored},
        )

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
