"""Recorded sample videos that OpenCV publishes on the package registry, installed into the cache.

OpenCV's source distribution on PyPI (``opencv-python-headless``, an sdist of the whole OpenCV
tree) holds a few real recorded videos among its samples: a hand turning a dark cup in front of
a wall (``cup.mp4``), a hand moving a printed box over a table under a moving camera
(``box.mp4``) and people walking across a campus under a fixed camera (``vtest.avi``). They are
the second real-video set's clips (``realclips``: ``opencv:<name>`` in an annotation file).

Nothing here runs on its own at evaluation time: ``make setup`` (and ``make test``) call
``python -m edgekit.segmentation.sample_videos``, which downloads the pinned sdist once from the
registry, checks its SHA-256, extracts only these files (each checked against its own SHA-256),
writes them atomically under ``cache_dir("videos", "opencv-4.14.0.94")`` and deletes the sdist.
Where the registry cannot be reached, ``--sdist PATH`` takes a copy of the same file
(``pip download`` cannot fetch it: it would try to build OpenCV). Reading a missing video is one
clear error naming that command.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from edgekit.cache import atomic_open, cache_dir, sha256_file
from edgekit.errors import InputError

PACKAGE = "opencv-python-headless"
VERSION = "4.14.0.94"
SDIST = f"opencv_python_headless-{VERSION}.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/67/8a/"
    f"51ff1c6287be0b6cd3070cf095875da4ff7d6eda38507e6ada5608786a78/{SDIST}"
)
SDIST_SHA256 = "4afa2ea1214453648be88259f035712454faa9039b686de7753569ba8eec1577"
SDIST_BYTES = 96_405_664
MAX_VIDEO_BYTES = 64 << 20  # a member larger than this is not the file we pinned
FETCH_COMMAND = "python -m edgekit.segmentation.sample_videos"


@dataclass(frozen=True)
class SampleVideo:
    """One video inside the sdist: its path there and the SHA-256 of its bytes."""

    name: str
    member: str
    sha256: str


_ROOT = f"opencv_python_headless-{VERSION}/opencv/"
VIDEOS = {
    v.name: v
    for v in (
        SampleVideo(
            "cup.mp4",
            _ROOT + "doc/js_tutorials/js_assets/cup.mp4",
            "37db9cee98f70b1458985a15ad2e5b0183e90e24c281b534afcf812e5986154f",
        ),
        SampleVideo(
            "box.mp4",
            _ROOT + "samples/cpp/tutorial_code/calib3d/real_time_pose_estimation/Data/box.mp4",
            "62b744b99403f899707c43398a3822441add6160379ab6dd6c12bde9e3075f8d",
        ),
        SampleVideo(
            "vtest.avi",
            _ROOT + "samples/data/vtest.avi",
            "45cddc9490be69345cbdab64ca583be65987e864ca408038e648db99e10516cf",
        ),
    )
}


def folder() -> Path:
    """Where the videos live: ``cache_dir("videos", "opencv-<version>")``."""
    return cache_dir("videos", f"opencv-{VERSION}")


def _present(video: SampleVideo) -> bool:
    path = folder() / video.name
    return path.is_file() and sha256_file(path) == video.sha256


def missing() -> list[str]:
    """The names of the videos not (correctly) in the cache."""
    return [name for name, video in VIDEOS.items() if not _present(video)]


def video_path(name: str) -> Path:
    """The cached path of sample video ``name``; an InputError naming the fetch command when it
    is not there (or its bytes are not the pinned ones)."""
    if name not in VIDEOS:
        raise InputError(
            f"unknown OpenCV sample video '{name}'; expected one of {', '.join(VIDEOS)}"
        )
    path = folder() / name
    if not _present(VIDEOS[name]):
        raise InputError(
            f"OpenCV's sample video {name} is not installed at {path}; run `{FETCH_COMMAND}` "
            f"(downloads {PACKAGE} {VERSION}'s source, 96 MB, from PyPI once)"
        )
    return path


def _download(url: str, dest: Path, show: bool) -> None:
    """``url`` -> ``dest`` with a progress line on stderr; refuses more than SDIST_BYTES."""
    with urllib.request.urlopen(url, timeout=120) as response, dest.open("wb") as out:
        done = 0
        while chunk := response.read(1 << 20):
            done += len(chunk)
            if done > SDIST_BYTES:
                raise InputError(f"{url} is larger than the pinned {SDIST} ({SDIST_BYTES} bytes)")
            out.write(chunk)
            if show and (done >> 20) % 8 == 0:
                print(f"\r  {SDIST}: {done >> 20}/{SDIST_BYTES >> 20} MB", end="", file=sys.stderr)
    if show:
        print(file=sys.stderr)


def extract(sdist: Path) -> list[Path]:
    """Check ``sdist`` against the pinned SHA-256 and write the videos from it into folder().

    Each video is checked against its own SHA-256 before it is renamed into place; an sdist
    that is not the pinned file, or lacks a video, is an InputError and writes nothing.
    """
    if sha256_file(sdist) != SDIST_SHA256:
        raise InputError(f"{sdist} is not {SDIST} (its SHA-256 differs from the pinned one)")
    wanted = {v.member: v for v in VIDEOS.values()}
    found: dict[str, bytes] = {}
    with tarfile.open(sdist, "r:gz") as archive:
        for info in archive:
            video = wanted.pop(info.name, None)
            if video is None:
                continue
            if not info.isfile() or info.size > MAX_VIDEO_BYTES:
                raise InputError(
                    f"{sdist.name}: {info.name} is not a video file of the pinned size"
                )
            source = archive.extractfile(info)
            data = source.read() if source is not None else b""
            if hashlib.sha256(data).hexdigest() != video.sha256:
                raise InputError(f"{sdist.name}: {info.name} differs from the pinned video")
            found[video.name] = data
    if wanted:
        raise InputError(f"{sdist.name} lacks {', '.join(sorted(wanted))}")
    written = []
    for name, data in found.items():
        with atomic_open(folder() / name) as handle:
            handle.write(data)
        written.append(folder() / name)
    return written


def fetch(sdist: Path | None = None, show: bool = True) -> list[Path]:
    """Install every missing video: from ``sdist`` (a local copy of the pinned file) or by
    downloading it from PyPI into a temporary file next to the videos (deleted afterwards).
    Returns the paths written ([] when all were present)."""
    if not missing():
        return []
    if sdist is not None:
        return extract(sdist)
    with tempfile.TemporaryDirectory(dir=folder()) as tmp:
        local = Path(tmp) / SDIST
        _download(SDIST_URL, local, show)
        return extract(local)


def main(argv: list[str] | None = None) -> int:
    """``python -m edgekit.segmentation.sample_videos [--sdist PATH] [--check]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sdist", type=Path, help=f"a local copy of {SDIST}")
    parser.add_argument("--check", action="store_true", help="only say what is missing (exit 1)")
    args = parser.parse_args(argv)
    if args.check:
        absent = missing()
        print(f"missing: {', '.join(absent)}" if absent else f"all present in {folder()}")
        return 1 if absent else 0
    try:
        written = fetch(args.sdist)
    except (InputError, OSError) as exc:
        print(f"sample videos: {exc}", file=sys.stderr)
        return 1
    done = f"{len(written)} written, " if written else ""
    print(f"sample videos: {done}all present in {folder()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
