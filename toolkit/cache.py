"""The user's cache directory and atomic file writes.

Trained weights of compact model variants live under ``cache_dir(model)``: ``$EDGEKIT_CACHE``
when set, else ``~/.cache/edgekit``. A cache entry is named by ``recipe_key``: the recipe's name,
its declared version and its config, never a hash of source files, so editing comments, formatting
or refactoring code keeps every cached and shipped weight; a change to what training does (data,
loss, architecture, schedule) bumps the recipe's version. Weights a package ships (its ``weights/``
folder, same file names as the cache) are found first by ``find_weights``. Every write goes to a temporary file in the destination's
folder and is renamed into place (``os.replace``), so a reader never sees a half-written file and
two processes racing to fill the same cache entry both leave a complete one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

CACHE_ENV = "EDGEKIT_CACHE"


def cache_root() -> Path:
    """``$EDGEKIT_CACHE`` or ``~/.cache/edgekit`` (not created)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "edgekit"


def cache_dir(*parts: str) -> Path:
    """The cache folder ``<root>/<parts...>``, created if missing, e.g. ``cache_dir("photo-cnn")``."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def recipe_key(
    name: str, version: int, config: Any = None, optional: Mapping[str, Any] | None = None
) -> str:
    """Cache key (16 hex chars) of what a training recipe produces.

    ``name`` names the recipe (e.g. "photo-cnn"), ``version`` is the recipe's declared version (an
    int the recipe's module bumps when training changes) and ``config`` is a dataclass, a
    JSON-able mapping, a sequence or a string holding every setting that shapes the result.
    ``optional`` maps config fields added after a version was released to their defaults: a
    field holding its default is left out of the key (at every nesting depth), so recipes that
    do not use it keep their keys and their cached and shipped weights.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"recipe version must be an int >= 1, got {version!r}")
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    elif isinstance(config, Mapping):
        config = dict(config)
    if optional:
        config = _without_defaults(config, optional)
    blob = json.dumps({"recipe": name, "version": version, "config": config}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _without_defaults(config: Any, optional: Mapping[str, Any]) -> Any:
    """``config`` with the ``optional`` keys that hold their defaults removed, in nested dicts too."""
    if isinstance(config, dict):
        missing = object()
        return {
            k: _without_defaults(v, optional)
            for k, v in config.items()
            if optional.get(k, missing) != v
        }
    return config


def find_weights(cached: Path, shipped_dir: Path | None) -> list[Path]:
    """Where to look for the weights file ``cached``: the package's shipped copy (same name in
    ``shipped_dir``) first when it exists, then the cache path itself."""
    places = []
    if shipped_dir is not None and (shipped_dir / cached.name).is_file():
        places.append(shipped_dir / cached.name)
    return [*places, cached]


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file next to ``dest``; on a clean exit it replaces ``dest`` atomically.

    On an exception the temporary file is removed and ``dest`` is left as it was.
    ``mode`` is "wb" or "w" (text, UTF-8).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open mode must be 'wb' or 'w', got {mode!r}")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_bytes(dest: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``dest`` atomically; returns ``dest`` as a Path."""
    with atomic_open(dest, "wb") as handle:
        handle.write(data)
    return Path(dest)


def atomic_write_text(dest: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``dest`` atomically; returns ``dest`` as a Path."""
    with atomic_open(dest, "w") as handle:
        handle.write(text)
    return Path(dest)


def atomic_write_with(dest: str | os.PathLike[str], writer: Callable[[IO], None]) -> Path:
    """Call ``writer(binary_handle)`` (e.g. ``lambda f: torch.save(state, f)``), then rename."""
    with atomic_open(dest, "wb") as handle:
        writer(handle)
    return Path(dest)
