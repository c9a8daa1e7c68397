"""The daemon's deployed bundles: versioned directories and one atomically replaced pointer.

Layout under ``<state>/bundles/<name>/``::

    versions/<id>/      one unpacked, checksum-verified, self-tested bundle per deploy
    state.json          {"current": id, "previous": [id, ...], "history": [...]}

A deploy unpacks into a fresh ``versions/<id>`` (archive.unpack: traversal, links, absolute paths,
sizes and schema are checked, then every file's sha256), self-tests it on this device, and only
then rewrites ``state.json`` (temp file + fsync + rename). A crash at any earlier point leaves the
old pointer, so the old bundle serves after a restart; ``recover()`` removes what such a crash
left behind (staging folders, versions no pointer names, the trash).

Versions past ``KEEP_PREVIOUS`` are renamed into ``<state>/bundles/.trash/`` under the lock (a
rename is cheap) and deleted by a background thread, so reads never wait on a deletion.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekit.bundle.format import Bundle
from edgekit.cache import atomic_write_text
from edgekit.errors import BundleError, InputError


class BundleNotDeployed(InputError):
    """No version of the named bundle is deployed on this device."""


NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # used with fullmatch only
KEEP_PREVIOUS = 3  # versions kept for rollback
TRASH = ".trash"  # <root>/.trash/<name>.<version>.<nonce>: pruned, waiting to be deleted


def check_name(name: str) -> str:
    """``name`` if it is a safe bundle name (letters, digits, . _ -; 1-64 chars), else InputError."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InputError(
            f"bundle name {name!r} is not allowed; use 1-64 letters, digits, '.', '_' or '-'"
        )
    return name


class BundleStore:
    """Deployed bundles by name, each with a current version and previous ones for rollback.

    Thread-safe; ``generation`` grows on every swap so pipelines know to reload their sessions.
    ``max_unpacked_bytes`` caps what one deploy may unpack to (default
    ``archive.MAX_ARCHIVE_BYTES``), counted while decompressing.
    """

    def __init__(self, root: str | os.PathLike[str], max_unpacked_bytes: int | None = None) -> None:
        from edgekit.bundle.archive import MAX_ARCHIVE_BYTES

        self.root = Path(root)
        self.max_unpacked_bytes = max_unpacked_bytes or MAX_ARCHIVE_BYTES
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.generation = 0
        self._deleters: list[threading.Thread] = []

    # ---- reading ----------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        return self.root / check_name(name)

    def _state(self, name: str) -> dict[str, Any]:
        path = self._dir(name) / "state.json"
        if not path.is_file():
            return {"current": None, "previous": [], "history": []}
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:  # written atomically, so this is outside tampering
            raise BundleError(f"{path} is not valid JSON: {exc}") from exc

    def names(self) -> list[str]:
        """Names that have a current version."""
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir() and not p.name.startswith(".") and self._state(p.name)["current"]
        )

    def current_path(self, name: str) -> Path | None:
        """Folder of the serving version of ``name``, or None when nothing is deployed."""
        with self._lock:
            current = self._state(name)["current"]
            return self._dir(name) / "versions" / current if current else None

    def get(self, name: str) -> Bundle:
        """The serving bundle ``name`` (checksums verified); InputError if none is deployed."""
        path = self.current_path(name)
        if path is None:
            known = ", ".join(self.names()) or "none"
            raise BundleNotDeployed(
                f"no bundle named '{name}' is deployed here (deployed: {known})"
            )
        return Bundle.load(path)

    def describe(self, name: str) -> dict[str, Any]:
        """Current version id, model, target, previous ids and deploy history of ``name``."""
        with self._lock:
            state = self._state(name)
        out: dict[str, Any] = {"name": name, **state}
        if state["current"]:
            manifest = json.loads(
                (self._dir(name) / "versions" / state["current"] / "bundle.json").read_text()
            )
            out.update(
                model=manifest.get("model"),
                target=manifest.get("target"),
                content_id=content_id(manifest),
            )
        return out

    # ---- writing ----------------------------------------------------------------------------
    def _write_state(self, name: str, state: dict[str, Any]) -> None:
        state["history"] = state.get("history", [])[-50:]
        atomic_write_text(self._dir(name) / "state.json", json.dumps(state, indent=1))
        self.generation += 1

    def deploy(
        self,
        name: str,
        archive: str | os.PathLike[str],
        check: Callable[[Path], Any] | None = None,
    ) -> dict[str, Any]:
        """Unpack ``archive`` as a new version of ``name``, run ``check(path)`` (the self-test),
        then make it current. Any exception leaves the serving version as it was.

        Returns {"name", "version", "previous", "check"} (check: what ``check`` returned).
        """
        from edgekit.bundle.archive import unpack

        versions = self._dir(name) / "versions"
        versions.mkdir(parents=True, exist_ok=True)
        version = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        dest = versions / version
        try:
            unpack(archive, dest, max_bytes=self.max_unpacked_bytes)
            result = check(dest) if check else None
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        with self._lock:
            state = self._state(name)
            if state["current"]:
                state["previous"] = [state["current"], *state["previous"]][:KEEP_PREVIOUS]
            state["current"] = version
            state["history"].append({"version": version, "event": "deploy", "utc": _utc()})
            self._write_state(name, state)
            self._prune(name, state)
        return {"name": name, "version": version, "previous": state["previous"], "check": result}

    def rollback(self, name: str) -> dict[str, Any]:
        """Make the most recent previous version current again; InputError if there is none."""
        with self._lock:
            state = self._state(name)
            if not state["previous"]:
                raise InputError(f"bundle '{name}' has no previous version to roll back to")
            bad, state["current"] = state["current"], state["previous"].pop(0)
            state["history"].append(
                {"version": state["current"], "event": f"rollback from {bad}", "utc": _utc()}
            )
            self._write_state(name, state)
            self._prune(name, state)
            return {"name": name, "version": state["current"], "previous": state["previous"]}

    def auto_rollback(self, name: str, bad: str, reason: str) -> dict[str, Any] | None:
        """The daemon's own rollback of ``name`` from version ``bad`` (a swap that never
        worked), recording ``reason`` in the history. None when ``bad`` is no longer current
        (a later swap came first); InputError when there is no previous version."""
        with self._lock:
            state = self._state(name)
            if state["current"] != bad:
                return None
            if not state["previous"]:
                raise InputError(f"bundle '{name}' has no previous version to roll back to")
            state["current"] = state["previous"].pop(0)
            event = {"version": state["current"], "event": f"auto-rollback from {bad}"}
            state["history"].append({**event, "reason": reason, "utc": _utc()})
            self._write_state(name, state)
            self._prune(name, state)
            return {"name": name, "from": bad, "to": state["current"], "utc": _utc()}

    def _prune(self, name: str, state: dict[str, Any]) -> None:
        """Move the versions of ``name`` that ``state`` no longer keeps to the trash (called
        under the lock: renames only) and delete them in a background thread. A version the
        history never names is a deploy still unpacking or self-testing: left alone."""
        keep = {state["current"], *state["previous"]}
        served = {h.get("version") for h in state.get("history") or []}
        trash = self.root / TRASH
        moved = []
        for path in (self._dir(name) / "versions").iterdir():
            if path.name in keep or path.name.startswith(".") or path.name not in served:
                continue
            trash.mkdir(exist_ok=True)
            dest = trash / f"{name}.{path.name}.{uuid.uuid4().hex[:6]}"
            try:
                path.rename(dest)
            except OSError:  # left in place; recover() removes it at the next start
                continue
            moved.append(dest)
        if moved:
            deleter = threading.Thread(
                target=_delete_trees, args=(moved,), name=f"prune-{name}", daemon=True
            )
            deleter.start()
            self._deleters = [d for d in self._deleters if d.is_alive()] + [deleter]

    def wait_pruned(self, timeout: float | None = None) -> bool:
        """Wait for background deletions of pruned versions; True when none is left running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for deleter in list(self._deleters):
            deleter.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return not any(d.is_alive() for d in self._deleters)

    def recover(self) -> list[str]:
        """Remove leftovers of an interrupted deploy: staging folders and versions that no
        pointer names. Returns what was removed (relative paths)."""
        removed = []
        with self._lock:
            trash = self.root / TRASH
            if trash.is_dir():
                removed += [str(p.relative_to(self.root)) for p in trash.iterdir()]
                shutil.rmtree(trash, ignore_errors=True)
            for bundle_dir in self.root.iterdir():
                if bundle_dir.name.startswith("."):
                    continue
                versions = bundle_dir / "versions"
                if not versions.is_dir():
                    continue
                state = self._state(bundle_dir.name)
                keep = {state["current"], *state["previous"]}
                for path in versions.iterdir():
                    if path.name not in keep:
                        shutil.rmtree(path, ignore_errors=True)
                        removed.append(str(path.relative_to(self.root)))
        return removed


def _delete_trees(paths: list[Path]) -> None:
    """Delete pruned version folders (a background thread; errors leave them for recover())."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def content_id(manifest: dict[str, Any]) -> str:
    """sha256 of a manifest's file checksum table: equal ids mean identical bundle files."""
    import hashlib

    table = json.dumps(manifest.get("files") or {}, sort_keys=True).encode()
    return hashlib.sha256(table).hexdigest()


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
