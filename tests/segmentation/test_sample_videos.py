"""OpenCV's sample videos installed from the registry (edgekit.segmentation.sample_videos): an
archive that is not the pinned one, a video whose bytes differ, a missing member or an oversized
download writes nothing and says what was wrong; a good archive (served from a file:// URL through
the same download path) installs every video once; a missing video is one error naming the
command that installs it."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from edgekit.errors import InputError
from edgekit.segmentation import realclips
from edgekit.segmentation import sample_videos as S

FAKE = {"a.mp4": b"first video bytes", "b.avi": b"second video bytes"}


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    """Pin two small fake videos in a fake sdist; the cache is a temporary folder."""
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    videos = {
        name: S.SampleVideo(name, f"root/{name}", hashlib.sha256(data).hexdigest())
        for name, data in FAKE.items()
    }
    monkeypatch.setattr(S, "VIDEOS", videos)

    def pin(path: Path) -> Path:
        monkeypatch.setattr(S, "SDIST_SHA256", S.sha256_file(path))
        return path

    return pin


def test_a_good_archive_installs_every_video_once(pinned, tmp_path, monkeypatch):
    sdist = pinned(_archive(tmp_path / "good.tar.gz", {f"root/{k}": v for k, v in FAKE.items()}))
    monkeypatch.setattr(S, "SDIST_URL", sdist.as_uri())  # the real download path, from a file
    assert S.missing() == ["a.mp4", "b.avi"]
    written = S.fetch(show=False)
    assert sorted(p.name for p in written) == ["a.mp4", "b.avi"]
    assert S.video_path("b.avi").read_bytes() == FAKE["b.avi"]
    assert S.missing() == [] and S.fetch(show=False) == []  # nothing to do the second time
    assert not list(S.folder().glob(".*tmp")) and not list(S.folder().glob("*/"))
    assert S.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({"root/a.mp4": FAKE["a.mp4"], "root/b.avi": b"tampered"}, "root/b.avi differs"),
        ({"root/a.mp4": FAKE["a.mp4"]}, "lacks root/b.avi"),
    ],
)
def test_a_bad_archive_writes_nothing(pinned, tmp_path, members, message):
    sdist = pinned(_archive(tmp_path / "bad.tar.gz", members))
    with pytest.raises(InputError, match=message):
        S.fetch(sdist, show=False)
    assert S.missing() == ["a.mp4", "b.avi"] and not list(S.folder().iterdir())


def test_an_archive_that_is_not_the_pinned_one_is_refused(pinned, tmp_path):
    pinned(_archive(tmp_path / "good.tar.gz", {f"root/{k}": v for k, v in FAKE.items()}))
    other = _archive(tmp_path / "other.tar.gz", {"root/a.mp4": FAKE["a.mp4"]})
    with pytest.raises(InputError, match="SHA-256 differs from the pinned one"):
        S.fetch(other, show=False)
    assert S.main(["--sdist", str(other)]) == 1


def test_an_oversized_download_is_refused(pinned, tmp_path, monkeypatch):
    sdist = pinned(_archive(tmp_path / "good.tar.gz", {f"root/{k}": v for k, v in FAKE.items()}))
    monkeypatch.setattr(S, "SDIST_URL", sdist.as_uri())
    monkeypatch.setattr(S, "SDIST_BYTES", 10)
    with pytest.raises(InputError, match="larger than the pinned"):
        S.fetch(show=False)
    assert not list(S.folder().iterdir())  # the partial download went with its temporary folder


def test_a_missing_video_names_the_command_that_installs_it(pinned):
    with pytest.raises(InputError, match=r"a.mp4 is not installed .*sample_videos"):
        realclips.sample_video("opencv:a.mp4")
    with pytest.raises(InputError, match="unknown OpenCV sample video 'c.mp4'"):
        S.video_path("c.mp4")
    assert S.main(["--check"]) == 1


def test_the_pins_name_three_videos_of_one_sdist():
    assert sorted(S.VIDEOS) == ["box.mp4", "cup.mp4", "vtest.avi"]
    assert all(
        v.member.startswith(f"opencv_python_headless-{S.VERSION}/") for v in S.VIDEOS.values()
    )
    assert S.SDIST_URL.startswith("https://files.pythonhosted.org/") and S.SDIST_URL.endswith(
        S.SDIST
    )
