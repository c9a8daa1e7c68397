"""Frames from a video file or a folder of images: a camera without controls.

Folders: PNG / JPEG / BMP / TIFF files in name order, read with imageio. Videos: decoded with
imageio's PyAV plugin (``pip install av``). ``capabilities()`` is {}; requested settings are not
applied: ``Frame.settings`` is empty, ``settings_source`` is "none", ``dropped_frames`` 0 and the
request is in ``Frame.requested`` and ``metadata["ignored"]``. The end
of the source raises CameraDisconnected unless ``loop=True``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, ControlRange, Frame
from edgekit.errors import InputError, MissingDependencyError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def to_rgb8(image: np.ndarray) -> np.ndarray:
    """Any decoded image (H, W), (H, W, 1|3|4), uint8/uint16/float -> (H, W, 3) uint8 RGB."""
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3:
        raise InputError(f"expected an image, got an array of shape {a.shape}")
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    a = a[..., :3]
    if a.dtype == np.uint16:
        a = (a >> 8).astype(np.uint8)
    elif a.dtype != np.uint8:
        a = np.clip(np.rint(a.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(a)


class FileCamera(Camera):
    """Frames from ``path``: a folder of images or a video file."""

    name = "file"

    def __init__(self, path: str | Path, loop: bool = False, fps: float | None = None) -> None:
        self.path = Path(path)
        self.loop = loop
        if not self.path.exists():
            raise InputError(f"file camera source {self.path} does not exist")
        if self.path.is_dir():
            self.files = sorted(
                p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES
            )
            if not self.files:
                raise InputError(f"{self.path} holds no images ({', '.join(IMAGE_SUFFIXES)})")
            self.fps = fps or 30.0
        else:
            self.files = []
            self.fps = fps or 30.0
            self._check_video_backend()
        self.index = 0
        self._frames: Iterator[np.ndarray] | None = None
        self._closed = False

    @classmethod
    def from_spec(cls, arg: str, **options: Any) -> FileCamera:
        """``clip.mp4`` or ``frames/``, optionally ``,loop=1`` / ``,fps=15``."""
        path, *opts = arg.split(",")
        if not path:
            raise InputError("file camera needs a path: file:clip.mp4 or file:frames/")
        kwargs: dict[str, Any] = {}
        for opt in opts:
            key, _, value = opt.partition("=")
            if key == "loop":
                kwargs["loop"] = value.lower() in ("1", "true", "yes")
            elif key == "fps":
                kwargs["fps"] = float(value)
            else:
                raise InputError(f"unknown file camera option '{key}'; expected loop, fps")
        kwargs.update(options)
        return cls(path, **kwargs)

    @staticmethod
    def _check_video_backend() -> None:
        try:
            import av  # noqa: F401
            import imageio.v3  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                "Reading a video file", "av", detail=f"(imageio + PyAV decode video) {exc}"
            ) from None

    def capabilities(self) -> dict[str, ControlRange]:
        return {}

    def _read_next(self) -> np.ndarray:
        import imageio.v3 as iio

        if self.files:
            if self.index >= len(self.files):
                raise StopIteration
            return iio.imread(self.files[self.index])
        if self._frames is None:
            self._frames = iio.imiter(self.path, plugin="pyav")
        return next(self._frames)

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        if self._closed:
            raise CameraDisconnected(f"file camera {self.path} was closed")
        start = time.perf_counter()
        try:
            image = self._read_next()
        except StopIteration:
            if not self.loop or self.index == 0:
                raise CameraDisconnected(f"end of {self.path} after {self.index} frames") from None
            self.index, self._frames = 0, None
            image = self._read_next()
        index = self.index
        self.index += 1
        requested = settings.to_json() if settings else {}
        ignored = {k: v for k, v in requested.items() if v not in (None, False)}
        return Frame(
            image=to_rgb8(image),
            timestamp_s=index / self.fps,
            settings=CaptureSettings(),
            latency_s=time.perf_counter() - start,
            clamped={},
            requested=settings,
            dropped_frames=0,
            settings_source="none",
            metadata={
                "camera": self.name,
                "source": str(self.files[index] if self.files else self.path),
                "frame_index": index,
                "ignored": ignored,
            },
        )

    def close(self) -> None:
        self._closed = True
        self._frames = None
