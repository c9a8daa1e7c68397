"""The user's cache directory and atomic file writes.

Trained weights of compact model variants live under ``cache_dir(model)``: ``$EDGEKIT_CACHE``
when set, else ``~/.cache/edgekit``. Every write goes to a temporary file in the destination's
folder and is renamed into place (``os.replace``), so a reader never sees a half-written file and
two processes racing to fill the same cache entry both leave a complete one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

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
