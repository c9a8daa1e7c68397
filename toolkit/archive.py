"""Bundle archives (.tar) for transfer: packed atomically, unpacked defensively.

``unpack`` refuses absolute paths, ``..`` components, links, device files, archives or members
over a size limit, and archives without a bundle.json; nothing is written at ``dest`` unless the
whole archive unpacks and loads as a valid bundle.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from edgekit.bundle import MANIFEST, Bundle
from edgekit.errors import BundleError

MAX_ARCHIVE_BYTES = 4 << 30  # 4 GiB of unpacked content
MAX_MEMBER_BYTES = 2 << 30  # 2 GiB for one file (ONNX protobuf limit)


def pack(bundle_dir: str | os.PathLike[str], tar_path: str | os.PathLike[str]) -> Path:
    """Write ``bundle_dir`` as an uncompressed tar at ``tar_path`` (temp file + rename)."""
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


def _check_member(member: tarfile.TarInfo) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or member.name.startswith(("/", "\\")):
        raise BundleError(f"archive member '{member.name}' has an absolute or parent path")
    if member.issym() or member.islnk():
        raise BundleError(f"archive member '{member.name}' is a link; bundles hold plain files")
    if not (member.isfile() or member.isdir()):
        raise BundleError(f"archive member '{member.name}' is not a plain file or directory")
    if member.size > MAX_MEMBER_BYTES:
        raise BundleError(
            f"archive member '{member.name}' is {member.size} bytes, over {MAX_MEMBER_BYTES}"
        )


def unpack(
    tar_path: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    max_bytes: int = MAX_ARCHIVE_BYTES,
) -> Bundle:
    """Unpack a bundle archive to ``dest`` after checking every member; returns the Bundle.

    The archive is unpacked into a temporary sibling, integrity-checked (checksums, schema),
    then renamed into place; on any failure ``dest`` is untouched.
    """
    target = Path(dest).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tar = tarfile.open(tar_path, "r:*")  # noqa: SIM115 - closed by the with-block below
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"{tar_path} is not a readable tar archive: {exc}") from exc
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with tar:
            members = tar.getmembers()
            total = 0
            for member in members:
                _check_member(member)
                total += member.size
                if total > max_bytes:
                    raise BundleError(f"archive unpacks to more than {max_bytes} bytes")
            if MANIFEST not in {PurePosixPath(m.name).as_posix() for m in members}:
                raise BundleError(f"archive {tar_path} has no {MANIFEST} at its top level")
            tar.extractall(staging, members=members, filter="data")
        bundle = Bundle.load(staging)
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return Bundle(target, bundle.manifest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
