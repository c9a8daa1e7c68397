"""Hostile bundle archives: unlisted members, gzip and framing bombs, member caps, and the CLI
on broken archives and manifests (one clear line, non-zero exit, no traceback)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from edgekit.bundle.archive import MAX_MEMBERS, pack, unpack
from edgekit.bundle.format import MANIFEST
from edgekit.errors import BundleError


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())


class _ReadCounter:
    """Records the furthest offset ``unpack`` read from each archive it opened."""

    def __init__(self) -> None:
        self.furthest = 0

    def open(self, path, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202 - builtin's signature
        fh = open(path, mode, *args, **kwargs)  # noqa: SIM115 - closed by unpack
        read = fh.read
        counter = self

        def counted(n: int = -1) -> bytes:
            data = read(n)
            counter.furthest = max(counter.furthest, fh.tell())
            return data

        fh.read = counted  # type: ignore[method-assign]
        return fh


@pytest.fixture
def read_counter(monkeypatch: pytest.MonkeyPatch) -> _ReadCounter:
    """How far into the archive file ``unpack`` read: a cap that stops early reads little of a
    bomb, one that decompresses everything first reads all of it (no wall-clock limit)."""
    import edgekit.bundle.archive as archive

    counter = _ReadCounter()
    monkeypatch.setattr(archive, "open", counter.open, raising=False)
    return counter


# ---- (b), (c), (d) archives ---------------------------------------------------------------------
def _tar(path: Path, members: list[tuple[str, bytes | None]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _members(bundle: Path) -> list[tuple[str, bytes | None]]:
    files = _manifest(bundle)["files"]
    return [(MANIFEST, (bundle / MANIFEST).read_bytes())] + [
        (rel, (bundle / rel).read_bytes()) for rel in files
    ]


def _assert_nothing_left(parent: Path, keep: set[str]) -> None:
    assert {p.name for p in parent.iterdir()} <= keep


@pytest.mark.parametrize("where", ["after", "before"])
def test_unlisted_archive_member_is_refused(tiny_bundle: Path, tmp_path: Path, where: str) -> None:
    out = tmp_path / "out"
    extra = ("graphs/extra.bin", b"payload")
    members = _members(tiny_bundle)
    members = [*members, extra] if where == "after" else [extra, *members]
    with pytest.raises(BundleError, match="'graphs/extra.bin' is not listed in bundle.json"):
        unpack(_tar(tmp_path / "a.tar", members), out / "b")
    _assert_nothing_left(out, set())
    ok = [("graphs", None), *_members(tiny_bundle), ("golden", None)]
    assert unpack(_tar(tmp_path / "ok.tar", ok), out / "b").model == "tiny"
    with pytest.raises(BundleError, match="directory 'cache' holds no file listed"):
        unpack(_tar(tmp_path / "d.tar", [*ok, ("cache", None)]), out / "c")
    with pytest.raises(BundleError, match="appears twice"):
        unpack(_tar(tmp_path / "t.tar", [*ok, ok[1]]), out / "c")
    _assert_nothing_left(out, {"b"})


def test_gzip_bomb_stops_at_the_cap_quickly(
    tiny_bundle: Path, tmp_path: Path, read_counter: _ReadCounter
) -> None:
    """bundle.json, then a listed member of 1 GiB of zeros: 1 MiB gzip members concatenated
    (a valid multi-member gzip stream), about 1 MB on disk, built in milliseconds."""
    manifest = (tiny_bundle / MANIFEST).read_bytes()
    head = tarfile.TarInfo(MANIFEST)
    head.size = len(manifest)
    huge = tarfile.TarInfo("graphs/tiny.onnx")
    huge.size = 1 << 30
    prefix = head.tobuf() + manifest + bytes(-len(manifest) % 512) + huge.tobuf()
    zeros = gzip.compress(bytes(1 << 20), compresslevel=9)
    bomb = tmp_path / "bomb.tar.gz"
    with open(bomb, "wb") as fh:
        fh.write(gzip.compress(prefix))
        for _ in range(1024):
            fh.write(zeros)
    assert bomb.stat().st_size < 4 << 20
    out = tmp_path / "out"
    with pytest.raises(BundleError, match="more than 10000000 bytes"):
        unpack(bomb, out / "b", max_bytes=10_000_000)
    assert 0 < read_counter.furthest < bomb.stat().st_size // 10  # ~10 of 1024 members read
    _assert_nothing_left(out, set())


def test_framing_bomb_is_counted_as_decompressed(
    tmp_path: Path, read_counter: _ReadCounter
) -> None:
    """Headers that claim nothing but decompress to a lot (1 MiB pax headers) hit the cap of
    bytes actually produced, not a header size: gzip members concatenated, built in ms."""
    info = tarfile.TarInfo("d")
    info.type, info.pax_headers = tarfile.DIRTYPE, {"comment": "x" * 1_000_000}
    pax_header = gzip.compress(info.tobuf(tarfile.PAX_FORMAT)[:-512])  # ~1 MB -> ~1 KB
    with open(tmp_path / "bomb.tar.gz", "wb") as fh:
        for i in range(400):  # 400 MB decompressed, 400 directories of 0 bytes
            member = tarfile.TarInfo(f"d{i}")
            member.type = tarfile.DIRTYPE
            fh.write(pax_header + gzip.compress(member.tobuf(tarfile.USTAR_FORMAT)))
    assert (tmp_path / "bomb.tar.gz").stat().st_size < 2 << 20
    with pytest.raises(BundleError, match="decompresses to more than"):
        unpack(
            tmp_path / "bomb.tar.gz", tmp_path / "out" / "b", max_bytes=1 << 20, max_members=1000
        )
    assert 0 < read_counter.furthest < (tmp_path / "bomb.tar.gz").stat().st_size // 4
    _assert_nothing_left(tmp_path / "out", set())


def test_member_count_is_capped(tiny_bundle: Path, tmp_path: Path) -> None:
    assert MAX_MEMBERS == 10_000
    members = [*_members(tiny_bundle), *((f"graphs/d{i}", None) for i in range(30))]
    with pytest.raises(BundleError, match="more than 20 members"):
        unpack(_tar(tmp_path / "many.tar", members), tmp_path / "out" / "b", max_members=20)
    _assert_nothing_left(tmp_path / "out", set())


# ---- (f) the CLI: one clear line, non-zero exit, no traceback ------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgekit.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_one_clear_error(proc: subprocess.CompletedProcess[str], match: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(("error: ", "FAILED: ")), proc.stderr
    assert match in lines[0], lines[0]


def test_cli_on_broken_archives_and_manifests(tiny_bundle: Path, tmp_path: Path) -> None:
    raw = pack(tiny_bundle, tmp_path / "good.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(raw[:1500])
    (tmp_path / "cut.tar.gz").write_bytes(gzip.compress(raw)[:300])
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / MANIFEST).write_text(
        json.dumps({"schema_version": 1, "files": {}, "graphs": {"g": 5}})
    )
    deep_tar = _tar(tmp_path / "deep.tar", [(MANIFEST, (deep / MANIFEST).read_bytes())])
    cases = [
        (("unpack", str(tmp_path / "cut.tar"), str(tmp_path / "o1")), "not a readable tar"),
        (("unpack", str(tmp_path / "cut.tar.gz"), str(tmp_path / "o2")), "not a readable tar"),
        (("unpack", str(deep_tar), str(tmp_path / "o3")), "RecursionError"),
        (("info", str(deep)), "not valid JSON"),
        (("verify", str(deep)), "not valid JSON"),
        (("selftest", str(wrong)), "graph 'g': must be an object"),
        (("info", str(wrong)), "graph 'g': must be an object"),
        (("unpack", str(tmp_path / "missing.tar"), str(tmp_path / "o4")), "not a readable tar"),
    ]
    for args, match in cases:
        _assert_one_clear_error(_cli(*args), match)
    m = _manifest(tiny_bundle)
    m["model"], m["task"] = "[/bold]", "[link=file:///etc/passwd]x"
    (tiny_bundle / MANIFEST).write_text(json.dumps(m))  # rich markup in a manifest is just text
    shown = _cli("info", str(tiny_bundle))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "[/bold] onnx-fp32" in shown.stdout and "task=[link=file:///etc/passwd]x" in shown.stdout
    assert not any(p.name.startswith((".o", "o")) for p in tmp_path.iterdir())
