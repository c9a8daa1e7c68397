"""Bundle format: loading, integrity errors, self-test, archives — on real files."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from edgekit.bundle.archive import pack, unpack
from edgekit.bundle.format import MANIFEST, Bundle
from edgekit.bundle.selftest import selftest
from edgekit.errors import BundleError, InputError, SelfTestError


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())


def _write_manifest(path: Path, data: dict) -> None:
    (path / MANIFEST).write_text(json.dumps(data))


def test_bundle_describes_itself(tiny_bundle: Path) -> None:
    bundle = Bundle.load(tiny_bundle)
    assert bundle.model == "tiny" and bundle.target == "onnx-fp32"
    m = _manifest(tiny_bundle)
    assert m["schema_version"] == 1
    assert set(m["files"]) == {"graphs/tiny.onnx", "golden/main.npz"}
    session = bundle.session()  # no other argument needed
    inputs, outputs, reference = bundle.golden("main")
    np.testing.assert_allclose(session.run(inputs)["y"], outputs["y"], atol=1e-6)
    np.testing.assert_array_equal(outputs["y"], reference["y"])


def test_selftest_passes_on_intact_bundle(tiny_bundle: Path) -> None:
    result = selftest(str(tiny_bundle))
    assert result.passed and result.graphs["main"]["y"]["max_abs"] < 1e-5


def test_wrong_checksum_is_refused(tiny_bundle: Path) -> None:
    onnx_file = tiny_bundle / "graphs" / "tiny.onnx"
    onnx_file.write_bytes(onnx_file.read_bytes() + b"\0")
    with pytest.raises(BundleError, match=r"graphs/tiny.onnx.*wrong sha256"):
        Bundle.load(tiny_bundle)


def test_missing_file_is_refused(tiny_bundle: Path) -> None:
    (tiny_bundle / "golden" / "main.npz").unlink()
    with pytest.raises(BundleError, match=r"golden/main.npz' is missing"):
        Bundle.load(tiny_bundle)


def test_unknown_schema_version_is_refused(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    m["schema_version"] = 99
    _write_manifest(tiny_bundle, m)
    with pytest.raises(BundleError, match="schema_version 99"):
        Bundle.load(tiny_bundle)


def test_missing_manifest_and_bad_json(tmp_path: Path, tiny_bundle: Path) -> None:
    with pytest.raises(BundleError, match="bundle.json is missing"):
        Bundle.load(tmp_path / "nothing-here")
    (tiny_bundle / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        Bundle.load(tiny_bundle)


def test_unlisted_graph_file_is_refused(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    del m["files"]["graphs/tiny.onnx"]
    _write_manifest(tiny_bundle, m)
    with pytest.raises(BundleError, match="has no recorded checksum"):
        Bundle.load(tiny_bundle)


def test_path_outside_bundle_is_refused(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    m["files"]["../escape.onnx"] = "0" * 64
    _write_manifest(tiny_bundle, m)
    with pytest.raises(BundleError, match="outside the bundle"):
        Bundle.load(tiny_bundle)


def test_graph_io_that_differs_from_manifest_is_refused(tiny_bundle: Path) -> None:
    m = _manifest(tiny_bundle)
    m["graphs"]["main"]["inputs"][0]["name"] = "pixels"
    _write_manifest(tiny_bundle, m)
    with pytest.raises(
        BundleError, match=r"inputs are \['x'\] but bundle.json states \['pixels'\]"
    ):
        Bundle.load(tiny_bundle).session()
    m["graphs"]["main"]["inputs"][0].update(name="x", shape=["batch", 5])
    _write_manifest(tiny_bundle, m)
    with pytest.raises(BundleError, match=r"input 'x' is float32\[batch_?\w*x4\]|input 'x'"):
        Bundle.load(tiny_bundle).session()


def test_unknown_graph_name(tiny_bundle: Path) -> None:
    with pytest.raises(InputError, match="no graph 'decoder'"):
        Bundle.load(tiny_bundle).graph("decoder")


def test_selftest_fails_when_golden_outputs_do_not_reproduce(tiny_bundle: Path) -> None:
    bundle = Bundle.load(tiny_bundle)
    inputs, outputs, reference = bundle.golden("main")
    outputs["y"] = outputs["y"] + 0.5
    arrays = {f"input/{k}": v for k, v in inputs.items()}
    arrays |= {f"output/{k}": v for k, v in outputs.items()}
    arrays |= {f"reference/{k}": v for k, v in reference.items()}
    np.savez(tiny_bundle / "golden" / "main.npz", **arrays)
    # re-sign so only the self-test (not the checksum) can catch it
    from edgekit.bundle.format import sha256_file

    m = _manifest(tiny_bundle)
    m["files"]["golden/main.npz"] = sha256_file(tiny_bundle / "golden" / "main.npz")
    _write_manifest(tiny_bundle, m)
    with pytest.raises(SelfTestError, match="main/y"):
        selftest(str(tiny_bundle))


def test_writer_leaves_nothing_on_failure(tmp_path: Path) -> None:
    from edgekit.bundle.format import BundleWriter

    dest = tmp_path / "b"
    with pytest.raises(RuntimeError), BundleWriter(dest) as writer:
        (writer.path("graphs")).mkdir()
        raise RuntimeError("export broke")
    assert not dest.exists()
    assert list(tmp_path.iterdir()) == []


def test_pack_unpack_round_trip(tiny_bundle: Path, tmp_path: Path) -> None:
    archive = pack(tiny_bundle, tmp_path / "tiny.tar")
    bundle = unpack(archive, tmp_path / "unpacked")
    assert bundle.model == "tiny"
    assert selftest(str(bundle.path)).passed


def _tar_with(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


@pytest.mark.parametrize(
    ("name", "kind", "match"),
    [
        ("../escape.txt", tarfile.REGTYPE, "parent path"),
        ("/etc/passwd", tarfile.REGTYPE, "absolute"),
        ("link", tarfile.SYMTYPE, "is a link"),
        ("hard", tarfile.LNKTYPE, "is a link"),
        ("fifo", tarfile.FIFOTYPE, "not a plain file"),
    ],
)
def test_unpack_rejects_hostile_members(tmp_path: Path, name: str, kind: bytes, match: str) -> None:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    data = b"x"
    member.size = len(data) if kind == tarfile.REGTYPE else 0
    with pytest.raises(BundleError, match=match):
        unpack(_tar_with(tmp_path, member, data), tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_unpack_rejects_oversized_and_manifestless(tiny_bundle: Path, tmp_path: Path) -> None:
    archive = pack(tiny_bundle, tmp_path / "tiny.tar")
    with pytest.raises(BundleError, match="more than 100 bytes"):
        unpack(archive, tmp_path / "dest", max_bytes=100)
    member = tarfile.TarInfo("graphs/x.onnx")
    member.size = 1
    with pytest.raises(BundleError, match="no bundle.json"):
        unpack(_tar_with(tmp_path, member, b"x"), tmp_path / "dest")
    with pytest.raises(BundleError, match="not a readable tar"):
        (tmp_path / "junk.tar").write_bytes(b"junk")
        unpack(tmp_path / "junk.tar", tmp_path / "dest")


def test_unpack_of_corrupt_bundle_keeps_the_old_one(tiny_bundle: Path, tmp_path: Path) -> None:
    good = unpack(pack(tiny_bundle, tmp_path / "good.tar"), tmp_path / "serving")
    (tiny_bundle / "graphs" / "tiny.onnx").write_bytes(b"corrupt")
    bad_tar = tmp_path / "bad.tar"
    with tarfile.open(bad_tar, "w") as tar:
        for p in sorted(tiny_bundle.rglob("*")):
            if p.is_file():
                tar.add(p, arcname=p.relative_to(tiny_bundle).as_posix())
    with pytest.raises(BundleError, match="wrong sha256"):
        unpack(bad_tar, tmp_path / "serving")
    assert Bundle.load(good.path).model == "tiny"
