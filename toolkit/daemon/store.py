"""The daemon's deployed bundles: versioned directories and one atomically replaced pointer.

Layout under ``<state>/bundles/<name>/``::

    versions/<id>/      one unpacked, checksum-verified, self-tested bundle per deploy
    state.json          {"current": id, "previous": [id, ...], "history": [...]}

A deploy unpacks into a fresh ``versions/<id>`` (archive.unpack: traversal, links, absolute paths,
sizes and schema are checked, then every file's sha256), self-tests it on this device, and only
then rewrites ``state.json`` (temp file + fsync + rename). A crash at any earlier point leaves the
old pointer, so the old bundle serves after a restart; ``recover()`` removes what such a crash
left behind (staging folders, versions no pointer names).
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

from edgekit.bundle import Bundle
from edgekit.cache import atomic_write_text
from edgekit.errors import BundleError, InputError


class BundleNotDeployed(InputError):
    """No version of the named bundle is deployed on this device."""


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KEEP_PREVIOUS = 3  # versions kept for rollback


def check_name(name: str) -> str:
    """``name`` if it is a safe bundle name (letters, digits, . _ -; 1-64 chars), else InputError."""
    if not NAME_RE.match(name or ""):
        raise InputError(
            f"bundle name {name!r} is not allowed; use 1-64 letters, digits, '.', '_' or '-'"
        )
    return name


class BundleStore:
    """Deployed bundles by name, each with a current version and previous ones for rollback.

    Thread-safe; ``generation`` grows on every swap so pipelines know to reload their sessions.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.generation = 0

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
            p.name for p in self.root.iterdir() if p.is_dir() and self._state(p.name)["current"]
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
        from edgekit.archive import unpack

        versions = self._dir(name) / "versions"
        versions.mkdir(parents=True, exist_ok=True)
        version = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        dest = versions / version
        try:
            unpack(archive, dest)
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

    def _prune(self, name: str, state: dict[str, Any]) -> None:
        keep = {state["current"], *state["previous"]}
        for path in (self._dir(name) / "versions").iterdir():
            if path.name not in keep and not path.name.startswith("."):
                shutil.rmtree(path, ignore_errors=True)

    def recover(self) -> list[str]:
        """Remove leftovers of an interrupted deploy: staging folders and versions that no
        pointer names. Returns what was removed (relative paths)."""
        removed = []
        with self._lock:
            for bundle_dir in self.root.iterdir():
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


def content_id(manifest: dict[str, Any]) -> str:
    """sha256 of a manifest's file checksum table: equal ids mean identical bundle files."""
    import hashlib

    table = json.dumps(manifest.get("files") or {}, sort_keys=True).encode()
    return hashlib.sha256(table).hexdigest()


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
