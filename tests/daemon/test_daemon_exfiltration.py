"""Attacks on a deploy, end to end against the real daemon process: a bundle that asks ONNX
Runtime to read its weights from /etc, one whose graph points outside itself, a gzip bomb, and
golden sets that compare nothing. Each is refused before the swap, nothing of the host's files
comes back on any endpoint, and the deploy lock is free again at once. Also: old versions are
pruned in the background (the trash empties, the kept versions stay)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from pathlib import Path

import httpx
import pytest
from daemon_proc import DaemonProcess
from test_bundle_hostile import FOLDER_KEY, _manifest, _relocate, _write_manifest
from test_bundle_hostile import make_external_bundle as _external_bundle

from edgekit.bundle.archive import pack

pytestmark = pytest.mark.slow

PASSWD = Path("/etc/passwd")


def _raw_tar(bundle: Path, dest: Path) -> bytes:
    """The bundle folder as a tar, written without edgekit (whose pack refuses such bundles)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
            tar.add(path, arcname=path.relative_to(bundle).as_posix(), recursive=False)
    dest.write_bytes(buf.getvalue())
    return buf.getvalue()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    state = tmp_path_factory.mktemp("exfil") / "state"
    proc = DaemonProcess(state, "--pipeline", "", "--max-unpacked-mb", "20").start()
    yield proc
    proc.stop_clean()


def _put(daemon: DaemonProcess, name: str, body: bytes) -> httpx.Response:
    headers = {"Authorization": f"Bearer {daemon.token}"}
    return httpx.put(f"{daemon.url}/bundles/{name}", content=body, headers=headers, timeout=60)


def _nothing_leaks(daemon: DaemonProcess, name: str) -> None:
    secret = PASSWD.read_text()[:24] if PASSWD.is_file() else "root:x:0:0"
    answers = [
        httpx.post(f"{daemon.url}/score", json={"bundle": name, "texts": ["x"]}),
        httpx.get(f"{daemon.url}/bundles/{name}"),
        httpx.get(f"{daemon.url}/health"),
        httpx.get(f"{daemon.url}/bundles"),
    ]
    assert answers[0].status_code == 404 and answers[1].status_code == 404
    for answer in answers:
        assert secret not in answer.text and "root:" not in answer.text


def test_external_initializer_folder_in_the_manifest_is_refused(daemon, tmp_path):
    bundle = _external_bundle(tmp_path / "evil", tmp_path / "work")
    _relocate(bundle, "passwd")
    manifest = _manifest(bundle)
    manifest["graphs"]["main"]["details"]["ort_session_config"] = {FOLDER_KEY: "/etc"}
    _write_manifest(bundle, manifest)
    answer = _put(daemon, "exfil", _raw_tar(bundle, tmp_path / "evil.tar"))
    assert answer.status_code == 422, answer.text
    assert FOLDER_KEY in answer.json()["detail"]
    _nothing_leaks(daemon, "exfil")


@pytest.mark.parametrize("location", ["../../../../../../etc/passwd", "/etc/passwd"])
def test_external_data_outside_the_bundle_is_refused(daemon, tmp_path, location):
    bundle = _external_bundle(tmp_path / "evil", tmp_path / "work")
    _relocate(bundle, location)
    answer = _put(daemon, "exfil2", _raw_tar(bundle, tmp_path / "evil.tar"))
    assert answer.status_code == 422, answer.text
    assert "external data" in answer.json()["detail"]
    _nothing_leaks(daemon, "exfil2")


def test_gzip_bomb_stops_at_the_cap_and_frees_the_deploy_lock(daemon, tmp_path, tiny_bundle):
    manifest = json.dumps(json.loads((tiny_bundle / "bundle.json").read_text())).encode()
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,  # 200 MB of zeros, ~200 KB packed
    ):
        info = tarfile.TarInfo("bundle.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        info = tarfile.TarInfo("graphs/tiny.onnx")
        info.size = 200 << 20
        tar.addfile(info, _Zeros(info.size))
    bomb = raw.getvalue()
    assert len(bomb) < 2 << 20
    start = time.perf_counter()
    answer = _put(daemon, "bomb", bomb)
    refused_in = time.perf_counter() - start
    print(f"gzip bomb of {len(bomb)} bytes refused in {refused_in:.2f} s")
    assert answer.status_code == 422, answer.text
    assert "more than" in answer.json()["detail"] and refused_in < 10, refused_in
    assert httpx.get(f"{daemon.url}/bundles/bomb").status_code == 404
    # the lock is free: a good deploy goes straight through
    good = pack(tiny_bundle, tmp_path / "good.tar").read_bytes()
    start = time.perf_counter()
    assert _put(daemon, "tiny", good).status_code == 200
    assert time.perf_counter() - start < 10
    staging = [p for p in (daemon.state_dir / "bundles").rglob(".*") if "trash" not in p.name]
    assert staging == [], staging


class _Zeros(io.RawIOBase):
    """A readable stream of ``n`` zero bytes (never held in memory at once)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # noqa: ANN001
        n = min(len(buf), self.left)
        buf[:n] = b"\0" * n
        self.left -= n
        return n


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m["graphs"]["main"].update(tolerance={"atol": 1e9, "rtol": 1e-3}), "atol"),
        (lambda m: m["graphs"]["main"].update(tolerance={"atol": "1e-3"}), "atol"),
        (lambda m: m["graphs"]["main"].update(golden=None), "golden"),
    ],
)
def test_a_selftest_that_compares_nothing_is_refused(daemon, tmp_path, tiny_bundle, edit, words):
    manifest = _manifest(tiny_bundle)
    edit(manifest)
    _write_manifest(tiny_bundle, manifest)
    answer = _put(daemon, "lax", _raw_tar(tiny_bundle, tmp_path / "lax.tar"))
    assert answer.status_code == 422, answer.text
    assert words in answer.json()["detail"]
    assert httpx.get(f"{daemon.url}/bundles/lax").status_code == 404


def test_old_versions_are_pruned_in_the_background(daemon, tmp_path, tiny_bundle):
    archive = pack(tiny_bundle, tmp_path / "tiny.tar").read_bytes()
    versions = []
    for _ in range(6):
        answer = _put(daemon, "pruned", archive)
        assert answer.status_code == 200, answer.text
        versions.append(answer.json()["version"])
    info = httpx.get(f"{daemon.url}/bundles/pruned").json()
    assert info["current"] == versions[-1] and info["previous"] == versions[-2:-5:-1]
    on_disk = daemon.state_dir / "bundles" / "pruned" / "versions"
    trash = daemon.state_dir / "bundles" / ".trash"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (trash.exists() and any(trash.iterdir())):
        time.sleep(0.1)
    assert sorted(p.name for p in on_disk.iterdir()) == sorted(versions[-4:])
    assert not trash.exists() or not any(trash.iterdir())
