"""Cached training: load a recipe's torch blob from the shipped weights or the cache, or train it
and write it atomically.

A recipe's weights file is named by its cache path (``cache_dir(...) / f"...{recipe_key(...)}.pt"``,
see ``edgekit.cache``); a package may ship a file of the same name in its ``weights/`` folder.
``load_or_train`` looks at the shipped copy first, then the cache path (``find_weights``), and
returns the first file that ``torch.load(..., weights_only=True)`` reads and ``load`` accepts; a
missing, corrupt or foreign file (any exception while reading or decoding it) is skipped. When
none loads it calls ``train`` once, turns the result into a blob with ``save`` and writes the blob
to the cache path atomically (``torch.save`` to memory, then ``atomic_write_bytes``), replacing a
corrupt file there; training holds a lock per recipe (``training_lock``), so concurrent callers
train it once. ``load_weights`` and ``save_weights`` are its two halves, for callers that
only read or only write an entry. Torch is imported when one of them runs, not with this module.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from edgekit.cache import atomic_write_bytes, find_weights

T = TypeVar("T")
Progress = Callable[[float, str], None]


def load_weights(
    path: Path,
    shipped_dir: Path | None,
    load: Callable[[Any, Path], T],
    *,
    progress: Progress | None = None,
    what: str = "weights",
) -> T | None:
    """``load(blob, found)`` of the first of ``find_weights(path, shipped_dir)`` that loads.

    Each candidate that is a file is read with ``torch.load(found, map_location="cpu",
    weights_only=True)`` and decoded by ``load`` (which returns the result, never None); a
    candidate whose reading or decoding raises is skipped with a warning naming the file and
    the error. Returns None when none loads. On a hit ``progress`` (when given) gets
    ``(1.0, f"loaded cached {what} {found}")``.
    """
    import torch

    for found in find_weights(path, shipped_dir):
        if not found.is_file():
            continue
        try:
            result = load(torch.load(found, map_location="cpu", weights_only=True), found)
        except Exception as exc:  # a corrupt or foreign file: try the next one, else retrain
            reason = (str(exc).splitlines() or [""])[0][:160]
            warnings.warn(
                f"{what} {found} does not load ({type(exc).__name__}: {reason}); using the "
                "next copy or training again",
                stacklevel=2,
            )
            continue
        if progress:
            progress(1.0, f"loaded cached {what} {found}")
        return result
    return None


def save_weights(path: Path, blob: Any) -> Path:
    """``torch.save(blob)`` to ``path`` atomically (a reader never sees a partial file)."""
    import torch

    buffer = io.BytesIO()
    torch.save(blob, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_or_train(
    path: Path,
    shipped_dir: Path | None,
    train: Callable[[], T],
    *,
    load: Callable[[Any, Path], T],
    save: Callable[[T], Any],
    force: bool = False,
    progress: Progress | None = None,
    what: str = "weights",
) -> T:
    """The weights of one recipe: loaded from the shipped copy or the cache, else trained now.

    ``path`` is the recipe's cache file and ``shipped_dir`` the package folder that may hold a
    file of the same name (None: the cache only). Without ``force`` the first candidate that
    ``load_weights`` reads is returned as ``load(blob, found)``. Otherwise (and always with
    ``force``) ``train()`` runs once, ``save(result)`` gives the blob, which ``save_weights``
    writes to ``path``, and the trained result is returned.
    """
    if not force:
        found = load_weights(path, shipped_dir, load, progress=progress, what=what)
        if found is not None:
            return found
    with training_lock(path):
        if not force:  # another process may have trained it while this one waited
            found = load_weights(path, shipped_dir, load, progress=progress, what=what)
            if found is not None:
                return found
        result = train()
        save_weights(path, save(result))
    return result


@contextlib.contextmanager
def training_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``'s recipe while it trains, so that two processes (two
    test workers, two commands on a device) asking for the same missing weights train them once:
    the second waits, then loads what the first wrote. A lock file ``.<name>.lock`` beside
    ``path`` (left in place; the lock goes with the process). Where ``fcntl`` does not exist
    (not POSIX) nothing is locked and both train, as before; the atomic write keeps the file
    whole either way."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
