"""Property-based tests (hypothesis) over the archive reader and the manifest parser: whatever
the input, they raise only edgekit's typed errors and never write outside their folders.

Archives: random member types (file, dir, symlink, hard link, fifo, char/block device, sparse,
contiguous), names (``..``, absolute, unicode, very long, empty, backslashes), sizes, nesting,
compression and truncation points, mixed with the members of a valid bundle. Manifests: random
JSON documents, and the valid manifest with one random value replaced or removed.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
import typer
from conftest import make_tiny_bundle
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from edgekit.bundle.archive import unpack
from edgekit.bundle.format import MANIFEST, Bundle
from edgekit.bundle.policy import parse_manifest
from edgekit.bundle.selftest import selftest
from edgekit.cli.app import info_cmd
from edgekit.errors import EdgekitError

SETTINGS = settings(  # the same examples every run (CI must not flake), no database folder
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ESCAPE = Path(tempfile.gettempdir()) / "edgekit-hostile-escape"  # an absolute member aims here
KINDS = [
    tarfile.REGTYPE,
    tarfile.AREGTYPE,
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.FIFOTYPE,
    tarfile.CHRTYPE,
    tarfile.BLKTYPE,
    tarfile.CONTTYPE,
    tarfile.GNUTYPE_SPARSE,
]
SPECIAL_NAMES = [
    "",
    ".",
    "..",
    "../pwned",
    "a/../../pwned",
    str(ESCAPE / "pwned"),
    "/etc/passwd",
    "bundle.json",
    "./bundle.json",
    "graphs",
    "graphs/tiny.onnx",
    "graphs//tiny.onnx",
    "graphs/tiny.onnx/x",
    "golden/main.npz",
    "ünï/çødé.bin",
    "a\\..\\..\\pwned",
    "x" * 300,
    "d/" * 120 + "f",
    "name\nwith newline",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=24,
)
members = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from(SPECIAL_NAMES), st.text(max_size=30), st.text("ab/.", max_size=12)
        ),
        st.sampled_from(KINDS),
        st.one_of(st.binary(max_size=1500), json_values.map(lambda v: json.dumps(v).encode())),
        st.sampled_from(["/etc/passwd", "../x", MANIFEST, "graphs/tiny.onnx", ""]),
    ),
    max_size=6,
)


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("valid")
    return make_tiny_bundle(root / "bundle", root / "work")


def _archive(
    entries: list[tuple[str, bytes, bytes, str]],
    good: list[tuple[str, bytes]],
    insert_at: int,
    compression: str,
    fmt: int,
) -> bytes:
    """A tar of ``entries`` with the valid bundle's members ``good`` at ``insert_at``."""
    rows: list[tuple[str, bytes, bytes, str]] = [
        (name, tarfile.REGTYPE, data, "") for name, data in good
    ]
    rows[insert_at:insert_at] = entries
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=f"w:{compression}", format=fmt) as tar:
        for name, kind, data, link in rows:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            regular = kind in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
            info.size = len(data) if regular or kind == tarfile.GNUTYPE_SPARSE else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    return buf.getvalue()


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@SETTINGS
@given(
    entries=members,
    use_good=st.booleans(),
    where=st.integers(0, 3),
    compression=st.sampled_from(["", "gz", "bz2", "xz"]),
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    cut=st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_archive_reader_only_raises_typed_errors_and_stays_inside(
    valid: Path, entries, use_good: bool, where: int, compression: str, fmt: int, cut
) -> None:
    good = []
    if use_good:
        files = json.loads((valid / MANIFEST).read_text())["files"]
        good = [(rel, (valid / rel).read_bytes()) for rel in [MANIFEST, *files]]
    try:
        data = _archive(entries, good, min(where, len(good)), compression, fmt)
    except (ValueError, UnicodeError, tarfile.TarError):
        reject()  # tarfile cannot write this member (e.g. a name too long for ustar)
    if cut is not None:
        data = data[: int(len(data) * cut)]
    with tempfile.TemporaryDirectory() as base:
        work = Path(base) / "work"
        (work / "in").mkdir(parents=True)
        (work / "out").mkdir()
        archive = work / "in" / "a.tar"
        archive.write_bytes(data)
        try:
            bundle = unpack(archive, work / "out" / "b", max_bytes=1 << 20, max_members=40)
        except EdgekitError:
            assert _tree(work / "out") == set()
        else:
            assert Bundle.load(bundle.path).model == "tiny"
            assert {p.name for p in (work / "out").iterdir()} == {"b"}
        assert {p.name for p in Path(base).iterdir()} == {"work"}
        assert {p.name for p in work.iterdir()} == {"in", "out"}
        assert _tree(work / "in") == {"a.tar"}
    assert not ESCAPE.exists()


@SETTINGS
@given(value=json_values)
def test_random_json_manifests_are_typed_errors(value: Any) -> None:
    for raw in (json.dumps(value), json.dumps({"schema_version": 1, "graphs": value})):
        try:
            manifest = parse_manifest(raw, "random")
        except EdgekitError:
            continue
        assert isinstance(manifest, dict)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a JSON document, the document's own root included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


@SETTINGS
@given(
    data=st.data(),
    replacement=st.sampled_from([None, "", "[/]", [], {}, 0, -1, True, 1e308]) | json_values,
    delete=st.booleans(),
)
def test_mutated_manifests_load_or_fail_typed(valid: Path, data, replacement, delete) -> None:
    original = (valid / MANIFEST).read_text()
    manifest = json.loads(original)
    path = data.draw(st.sampled_from(_paths(manifest)[1:]))
    parent = manifest
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    try:
        (valid / MANIFEST).write_text(json.dumps(manifest))
        try:
            bundle = Bundle.load(valid)
            facts = (bundle.model, bundle.target, bundle.format, bundle.precision, bundle.report)
            assert all(isinstance(f, (str, dict)) for f in facts)
            info_cmd(valid)  # the CLI's view of it: handle_errors turns errors into Exit(2)
            selftest(str(valid))
        except (EdgekitError, typer.Exit):
            pass
    finally:
        (valid / MANIFEST).write_text(original)
    assert Bundle.load(valid).model == "tiny"
