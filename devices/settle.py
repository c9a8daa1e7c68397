"""Waiting for a frame that carries the requested settings, and a model of the sensor's delay.

A control written to a sensor reaches the frames ``latency`` frames later: the frames already in
the pipeline (exposing, being read out, queued in the driver's buffers) keep the old settings.
``wait_for_settings`` reads frames until one matches the request (by a ``SettleTolerance``) and
drops the others; ``DelayedControls`` is the simulator's model of that pipeline.
``settle_time_s`` is what such a wait costs at a frame rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from edgekit.devices.camera import EXACT, CaptureSettings, SettingsTimeout, SettleTolerance
from edgekit.errors import InputError

T = TypeVar("T")

DEFAULT_MAX_WAIT_FRAMES = 30  # about 1 s at 30 fps: 10x the deepest pipeline we know of
DEFAULT_TIMEOUT_S = 2.0


def settle_time_s(settle_frames: int, fps: float) -> float:
    """Seconds one settings change costs: the ``settle_frames`` dropped plus the frame kept."""
    if fps <= 0 or settle_frames < 0:
        raise InputError(f"fps must be > 0 and settle_frames >= 0, got {fps}, {settle_frames}")
    return (settle_frames + 1) / fps


def wait_for_settings(
    read: Callable[[], tuple[T, CaptureSettings]],
    requested: CaptureSettings,
    tolerance: SettleTolerance,
    *,
    camera: str,
    drop: Callable[[T], None] = lambda _: None,
    max_frames: int = DEFAULT_MAX_WAIT_FRAMES,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[T, CaptureSettings, int]:
    """Read frames until one carries ``requested``: (frame, its settings, frames dropped).

    ``read()`` -> (frame, the settings it carried); ``drop(frame)`` releases a frame that did not
    match. More than ``max_frames`` dropped or ``timeout_s`` waited (``clock`` seconds) raises
    SettingsTimeout naming the request and the last frame's settings.
    """
    start = clock()
    dropped = 0
    while True:
        frame, actual = read()
        if tolerance.matches(actual, requested):
            return frame, actual, dropped
        drop(frame)
        dropped += 1
        waited = clock() - start
        if dropped > max_frames or waited > timeout_s:
            raise SettingsTimeout(camera, requested, actual, dropped, waited)


class DelayedControls:
    """A sensor pipeline ``latency`` frames deep: frame n carries the last settings written at
    frame n - ``latency`` or earlier (``latency`` = 0: the next frame has them)."""

    def __init__(self, initial: CaptureSettings, latency: int = 0) -> None:
        if latency < 0:
            raise InputError(f"settings_latency must be >= 0 frames, got {latency}")
        self.latency = latency
        self.frames = 0  # frames produced so far
        self._writes: list[tuple[int, CaptureSettings]] = [(0, initial)]  # (first frame, settings)
        self.written = initial

    def write(self, settings: CaptureSettings) -> None:
        """Write controls now; they reach frame ``frames + latency``. Same settings: no write."""
        if settings != self.written:
            self._writes.append((self.frames + self.latency, settings))
            self.written = settings

    def next_frame(self) -> CaptureSettings:
        """Produce one frame: the settings it carries."""
        index = self.frames
        self.frames += 1
        while len(self._writes) > 1 and self._writes[1][0] <= index:
            self._writes.pop(0)
        return self._writes[0][1]

    def settle(
        self,
        target: CaptureSettings,
        frame_time_s: Callable[[CaptureSettings], float],
        max_frames: int = DEFAULT_MAX_WAIT_FRAMES,
    ) -> tuple[int, float]:
        """Write ``target`` and drop the frames still carrying old settings, as a driver does:
        (frames dropped, their seconds by ``frame_time_s(settings)``). SettingsTimeout after
        more than ``max_frames``."""
        self.write(target)
        waited = [0.0]

        def drop(carried: CaptureSettings) -> None:
            waited[0] += frame_time_s(carried)

        def read() -> tuple[CaptureSettings, CaptureSettings]:
            carried = self.next_frame()
            return carried, carried

        _, _, dropped = wait_for_settings(
            read, target, EXACT, camera="sim camera", drop=drop, max_frames=max_frames,
            timeout_s=float("inf"), clock=lambda: waited[0],
        )  # fmt: skip
        return dropped, waited[0]
