"""Bundle archives (.tar, or .tar.gz/.bz2/.xz) for transfer: packed atomically, unpacked
defensively. An archive is untrusted data.

``unpack`` streams the archive once, decompressing it itself so that every byte the
decompressor produces is counted, and writes members into a staging folder beside ``dest``. It
refuses absolute paths, ``..`` or empty parts, links, device files, fifos, sparse members,
duplicate names, any member that is neither ``bundle.json`` nor listed in the manifest's
``files`` table (directories only as parents of listed files), and archives without a
bundle.json. Nothing appears at ``dest`` unless the whole archive unpacks and loads as a valid
bundle (``Bundle.load``: manifest policy, checksums, ONNX external data); on any failure the
staging folder is removed and ``dest`` is untouched. Every read or decompression error
(truncated tar or gzip, corrupt headers, undecodable names) is one BundleError.

Caps, each a module constant and a parameter of ``unpack``:

- ``max_bytes`` = MAX_ARCHIVE_BYTES (4 GiB): bytes of file content written, counted as they are
  produced; the decompressed tar stream as a whole may exceed it only by the tar framing
  allowance (TAR_FRAMING_BYTES per member plus MAX_MANIFEST_BYTES), so a gzip bomb stops at the
  cap after reading about that much, whatever its headers claim.
- ``max_member_bytes`` = MAX_MEMBER_BYTES (2 GiB, the ONNX protobuf limit): one file.
- ``max_members`` = MAX_MEMBERS (10,000): archive members, directories included.
- MAX_HEADER_BYTES (1 MiB): one pax extended header or GNU long name, which tarfile reads into
  memory before edgekit sees the member.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Any

from edgekit.bundle.format import Bundle
from edgekit.bundle.policy import MANIFEST, MAX_FILES, MAX_MANIFEST_BYTES, check_relpath
from edgekit.bundle.policy import parse_manifest as _parse_manifest
from edgekit.errors import BundleError

MAX_ARCHIVE_BYTES = 4 << 30  # 4 GiB of unpacked content
MAX_MEMBER_BYTES = 2 << 30  # 2 GiB for one file (ONNX protobuf limit)
MAX_MEMBERS = MAX_FILES  # 10,000 members
MAX_HEADER_BYTES = 1 << 20  # one pax header / GNU long name
TAR_FRAMING_BYTES = 2048  # per member: its 512-byte header, padding and a small pax header
_CHUNK = 1 << 20
# What reading a hostile or damaged (compressed) tar stream raises besides BundleError.
_READ_ERRORS = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    OSError,
    ValueError,  # includes UnicodeDecodeError
    RecursionError,
    OverflowError,
)


def pack(bundle_dir: str | os.PathLike[str], tar_path: str | os.PathLike[str]) -> Path:
    """Write ``bundle_dir`` as an uncompressed tar at ``tar_path`` (temp file + rename);
    bundle.json is the first member."""
    bundle = Bundle.load(bundle_dir)
    out = Path(tar_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w") as tar:
            for rel in [MANIFEST, *sorted(bundle.manifest["files"])]:
                tar.add(bundle.path / rel, arcname=rel, recursive=False)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


class _CappedTarInfo(tarfile.TarInfo):
    """TarInfo that refuses oversized pax / GNU long-name headers before tarfile buffers them."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        meta = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
        meta += (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
        if self.type in meta and self.size > MAX_HEADER_BYTES:
            raise BundleError(
                f"archive has a {self.size}-byte extended header; at most {MAX_HEADER_BYTES}"
            )
        return super()._proc_member(tarfile_)  # type: ignore[misc]


class _CountingReader:
    """A read-only stream that raises BundleError once more than ``cap`` bytes were read."""

    def __init__(self, raw: IO[bytes], cap: int) -> None:
        self._raw, self.cap, self.count = raw, cap, 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(_CHUNK if size is None or size < 0 else size)
        self.count += len(data)
        if self.count > self.cap:
            raise BundleError(
                f"archive decompresses to more than {self.cap} bytes (content cap plus tar "
                "framing); refusing it"
            )
        return data


def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    """``raw`` itself, or a streaming decompressor for gzip / bzip2 / xz by magic bytes."""
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw, "rb")
    return raw


def _member_path(member: tarfile.TarInfo) -> str:
    """The member's normalised bundle-relative path, or BundleError for a hostile member."""
    name = member.name
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts:
        raise BundleError(f"archive member '{name:.200}' has an absolute or parent path")
    if member.issym() or member.islnk():
        raise BundleError(f"archive member '{name:.200}' is a link; bundles hold plain files")
    plain = member.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)
    if not plain or member.sparse is not None:
        raise BundleError(f"archive member '{name:.200}' is not a plain file or directory")
    if not parts:
        return ""  # "." or "./": the bundle folder itself
    return check_relpath("/".join(parts), "archive member")


class _Unpacking:
    """Members of one archive being written into ``staging``, with the caps applied."""

    def __init__(self, staging: Path, label: str, caps: tuple[int, int, int]) -> None:
        self.staging, self.label = staging, label
        self.max_bytes, self.max_member_bytes, self.max_members = caps
        self.members = self.written = 0
        self.seen: set[str] = set()
        self.dirs: list[str] = []
        self.listed: set[str] | None = None  # the manifest's files, once read

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise BundleError(f"archive {self.label} has more than {self.max_members} members")
        rel = _member_path(member)
        if rel in self.seen:
            raise BundleError(f"archive member '{rel}' appears twice")
        self.seen.add(rel)
        if member.isdir():
            if rel == MANIFEST:
                raise BundleError(f"archive member '{MANIFEST}' must be a file, not a directory")
            self.dirs.append(rel)
            return
        limit = MAX_MANIFEST_BYTES if rel == MANIFEST else self.max_member_bytes
        if member.size > limit:
            raise BundleError(f"archive member '{rel}' is {member.size} bytes, over {limit}")
        if self.written + member.size > self.max_bytes:
            raise BundleError(f"archive unpacks to more than {self.max_bytes} bytes")
        if rel != MANIFEST:
            self._check_listed(rel)
        source = tar.extractfile(member)
        if source is None:  # pragma: no cover - plain files always have a stream
            raise BundleError(f"archive member '{rel}' has no data")
        data = self._write(rel, source)
        if rel == MANIFEST:
            manifest = _parse_manifest(data, f"{self.label}:{MANIFEST}")
            self.listed = set(manifest["files"])
            for earlier in self.seen - {MANIFEST, *self.dirs}:
                self._check_listed(earlier)

    def _check_listed(self, rel: str) -> None:
        if self.listed is not None and rel not in self.listed:
            raise BundleError(
                f"archive member '{rel}' is not listed in {MANIFEST}'s files table; a bundle "
                "archive holds bundle.json and the files it lists, nothing else"
            )

    def _write(self, rel: str, source: IO[bytes]) -> bytes:
        """Copy one member to the staging folder, counting bytes; the manifest's are returned."""
        target = self.staging / rel
        kept = bytearray()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(target, flags, 0o644)
        except OSError as exc:
            raise BundleError(f"cannot unpack archive member '{rel}': {exc}") from None
        with os.fdopen(fd, "wb") as out:
            while block := source.read(_CHUNK):
                self.written += len(block)
                if self.written > self.max_bytes:
                    raise BundleError(f"archive unpacks to more than {self.max_bytes} bytes")
                if rel == MANIFEST:
                    kept += block
                out.write(block)
        return bytes(kept)

    def finish(self) -> None:
        if self.listed is None:
            raise BundleError(f"archive {self.label} has no {MANIFEST} at its top level")
        parents = {str(PurePosixPath(rel).parent) for rel in self.listed}
        parents |= {str(p) for rel in parents for p in PurePosixPath(rel).parents}
        for rel in self.dirs:
            if rel and rel not in parents:
                raise BundleError(
                    f"archive directory '{rel}' holds no file listed in {MANIFEST}; "
                    "directories are allowed only as parents of listed files"
                )


def _extract(source: IO[bytes], staging: Path, label: str, caps: tuple[int, int, int]) -> None:
    max_bytes, _, max_members = caps
    stream_cap = max_bytes + MAX_MANIFEST_BYTES + TAR_FRAMING_BYTES * (max_members + 2)
    state = _Unpacking(staging, label, caps)
    try:
        reader = _CountingReader(_decompressed(source), stream_cap)
        with tarfile.open(fileobj=reader, mode="r|", tarinfo=_CappedTarInfo) as tar:  # type: ignore[call-overload]
            for member in tar:
                state.add(tar, member)
        while reader.read(_CHUNK):  # the rest: a compressed stream's trailer (CRC) is checked
            pass
    except BundleError:
        raise
    except _READ_ERRORS as exc:
        raise BundleError(
            f"{label} is not a readable tar archive (truncated, corrupt or not a tar): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    state.finish()


def unpack(
    tar_path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    max_bytes: int = MAX_ARCHIVE_BYTES,
    max_members: int = MAX_MEMBERS,
    max_member_bytes: int = MAX_MEMBER_BYTES,
) -> Bundle:
    """Unpack a bundle archive to ``dest`` after checking every member; returns the Bundle.

    The archive is unpacked into a temporary sibling, integrity-checked (manifest policy,
    checksums, nothing unlisted), then renamed into place; on any failure ``dest`` is untouched
    and the staging folder removed. See the module doc for the caps.
    """
    target = Path(dest).resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        source = open(tar_path, "rb")  # noqa: SIM115 - closed by the with-block below
    except OSError as exc:
        raise BundleError(f"{tar_path} is not a readable tar archive: {exc}") from exc
    with source:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            _extract(source, staging, str(tar_path), (max_bytes, max_member_bytes, max_members))
            try:
                bundle = Bundle.load(staging)
            except BundleError as exc:
                raise BundleError(f"archive {tar_path} holds no valid bundle: {exc}") from None
            old = None
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                os.replace(target, old)
            os.replace(staging, target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            bundle.path = target
            return bundle
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
