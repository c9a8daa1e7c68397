"""The bundle: a self-describing directory (and a .tar for transfer) holding exported graphs.

Layout::

    <bundle>/bundle.json           manifest (schema below)
    <bundle>/graphs/<file>         artifacts (.onnx, .xml + .bin, .engine, .pt2)
    <bundle>/golden/<graph>.npz    golden inputs, the artifact's outputs and the reference outputs
    <bundle>/assets/<file>         pre/post-processing assets (tokenizer.json, ...)

``bundle.json`` records the schema version, model, tier, task, target (format + precision),
graphs with their I/O specs, pre/post-processing, labels, the parity and task-metric report,
the sha256 of every file, edgekit and runtime versions and the target device profile. A bundle
describes itself: ``Bundle.load(path).session()`` needs no other argument.

A bundle is untrusted data: ``Bundle.load`` applies edgekit.bundle.policy to bundle.json
(typed, allow-listed fields; no runtime setting a bundle may not make), refuses files in the
folder that the checksum table does not list, and checks that ONNX external data only names
listed files (edgekit.bundle.guard).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bundle.guard import check_external_data, read_golden, unlisted_paths
from edgekit.bundle.policy import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    SCHEMA_VERSION,
    SUPPORTED_SCHEMAS,
    check_graph,
    parse_manifest,
)
from edgekit.bundle.runtime import check_io_matches, default_device, runtime_options
from edgekit.cache import sha256_file
from edgekit.errors import BundleError, InputError
from edgekit.tensorspec import TensorSpec

__all__ = [
    "MANIFEST",
    "SCHEMA_VERSION",
    "SUPPORTED_SCHEMAS",
    "Bundle",
    "BundleWriter",
    "GraphEntry",
    "check_io_matches",
    "default_device",
    "runtime_options",
]
GOLDEN_REFERENCE_PREFIX = "reference/"
GOLDEN_OUTPUT_PREFIX = "output/"
GOLDEN_INPUT_PREFIX = "input/"


@dataclass
class GraphEntry:
    """One graph of a bundle as the manifest states it."""

    name: str
    files: list[str]
    format: str
    precision: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    golden: str | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def file(self) -> str:
        """The file a runtime loads (first of ``files``)."""
        return self.files[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "format": self.format,
            "precision": self.precision,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "golden": self.golden,
            "tolerance": self.tolerance,
            "details": self.details,
        }

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any], files: Mapping[str, str]) -> GraphEntry:
        """The entry ``data`` states, checked (bundle.policy.check_graph) against the
        bundle's checksum table ``files``."""
        check_graph(name, data, files, MANIFEST)
        try:
            return cls(
                name=name,
                files=list(data["files"]),
                format=data["format"],
                precision=data["precision"],
                inputs=[TensorSpec.from_json(s) for s in data["inputs"]],
                outputs=[TensorSpec.from_json(s) for s in data["outputs"]],
                golden=data.get("golden"),
                tolerance=dict(data.get("tolerance") or {}),
                details=dict(data.get("details") or {}),
            )
        except (KeyError, TypeError, ValueError, InputError) as exc:
            raise BundleError(f"graph '{name}' in {MANIFEST} is malformed: {exc}") from exc


class Bundle:
    """A bundle loaded from disk, integrity-checked.

    ``Bundle.load(path)`` checks the manifest against edgekit.bundle.policy, that every
    listed file exists and has the recorded sha256, that nothing unlisted lies in the folder,
    and that ONNX graphs read external data only from listed files.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        graphs = manifest.get("graphs")
        if not isinstance(graphs, dict) or not graphs:
            raise BundleError(f"{path / MANIFEST} lists no graphs")
        files = manifest.get("files")
        self.graphs: dict[str, GraphEntry] = {
            name: GraphEntry.from_json(name, entry, files if isinstance(files, dict) else {})
            for name, entry in graphs.items()
        }
        self._external_checked: set[str] = set()

    # ---- loading --------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], verify_checksums: bool = True) -> Bundle:
        """Open the bundle directory at ``path``; raise BundleError on any integrity problem."""
        root = Path(path)
        if root.is_file() and root.suffix == ".tar":
            raise BundleError(
                f"{root} is a bundle archive; unpack it first (edgekit.bundle.archive.unpack)"
            )
        manifest_path = root / MANIFEST
        if manifest_path.is_symlink() or not manifest_path.is_file():
            raise BundleError(f"{root} is not a bundle: {MANIFEST} is missing (or not a file)")
        try:
            with open(manifest_path, "rb") as fh:
                raw = fh.read(MAX_MANIFEST_BYTES + 1)
        except OSError as exc:
            raise BundleError(f"cannot read {manifest_path}: {exc}") from exc
        bundle = cls(root, parse_manifest(raw, str(manifest_path)))
        if verify_checksums:
            problems = bundle.integrity_problems()
            if problems:
                more = [f"and {len(problems) - 10} more"] if len(problems) > 10 else []
                raise BundleError(
                    f"bundle {root} failed its integrity check: " + "; ".join(problems[:10] + more)
                )
            for entry in bundle.graphs.values():
                bundle.check_external_data(entry)
        return bundle

    def integrity_problems(self) -> list[str]:
        """Every checksum, missing-file and unlisted-file problem, as sentences."""
        files = self.manifest.get("files")
        if not isinstance(files, dict):
            return [f"{MANIFEST} has no 'files' checksum table"]
        problems = []
        for rel, expected in sorted(files.items()):
            target = self._resolve(rel)
            try:
                if not target.is_file():
                    problems.append(f"file '{rel}' is missing")
                elif sha256_file(target) != expected:
                    problems.append(f"file '{rel}' has the wrong sha256 (corrupt or modified)")
            except OSError as exc:
                problems.append(f"file '{rel}' cannot be read ({exc.strerror or exc})")
        for entry in self.graphs.values():
            for rel in [*entry.files, *([entry.golden] if entry.golden else [])]:
                if rel not in files:
                    problems.append(f"graph '{entry.name}' file '{rel}' has no recorded checksum")
        return problems + unlisted_paths(self.path, files)

    def check_external_data(self, entry: GraphEntry) -> None:
        """BundleError unless the ONNX files of ``entry`` read external data only from listed
        files inside the bundle (once per graph and Bundle)."""
        if entry.name in self._external_checked:
            return
        files = self.manifest.get("files") or {}
        for rel in entry.files:
            if rel.lower().endswith(".onnx") or (entry.format == "onnx" and rel == entry.file):
                self._resolve(rel)
                check_external_data(self.path, rel, files)
        self._external_checked.add(entry.name)

    def _resolve(self, rel: str) -> Path:
        candidate = (self.path / rel).resolve()
        if not candidate.is_relative_to(self.path.resolve()):
            raise BundleError(f"{MANIFEST} names '{rel}', which lies outside the bundle")
        return candidate

    # ---- facts ----------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return str(self.manifest.get("model", ""))

    @property
    def target(self) -> str:
        t = self.manifest.get("target") or {}
        return f"{t.get('format')}-{t.get('precision')}"

    @property
    def format(self) -> str:
        return str((self.manifest.get("target") or {}).get("format", ""))

    @property
    def precision(self) -> str:
        return str((self.manifest.get("target") or {}).get("precision", ""))

    @property
    def report(self) -> dict[str, Any]:
        return dict(self.manifest.get("report") or {})

    def graph(self, name: str | None = None) -> GraphEntry:
        """The graph called ``name``, or the only/first graph when ``name`` is None."""
        if name is None:
            return next(iter(self.graphs.values()))
        if name not in self.graphs:
            raise InputError(f"bundle has no graph '{name}'; graphs: {', '.join(self.graphs)}")
        return self.graphs[name]

    def file(self, rel: str) -> Path:
        """Absolute path of a bundle-relative file."""
        return self._resolve(rel)

    def golden(
        self, graph: str | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(inputs, artifact outputs, reference outputs) recorded at export time for ``graph``."""
        entry = self.graph(graph)
        if not entry.golden:
            raise BundleError(f"graph '{entry.name}' has no golden I/O")
        return read_golden(self.file(entry.golden), f"graph '{entry.name}' golden file")

    # ---- running --------------------------------------------------------------------------
    def default_runtime(self, graph: str | None = None) -> str:
        """The first runtime that loads this graph's format and is usable here."""
        from edgekit.errors import MissingDependencyError
        from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, get_runtime

        fmt = self.graph(graph).format
        reasons = []
        for name in DEFAULT_RUNTIME_FOR_FORMAT.get(fmt, []):  # import only what is tried
            try:
                if get_runtime(name).devices():
                    return name
                reasons.append(f"runtime '{name}' has no usable device here")
            except MissingDependencyError as exc:
                reasons.append(str(exc))
        raise BundleError(
            f"no runtime here can load format '{fmt}': {'; '.join(reasons) or 'no runtime known'}"
        )

    def session(
        self,
        graph: str | None = None,
        runtime: str | None = None,
        device: str | None = None,
        threads: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Any:
        """Load ``graph`` with ``runtime`` (default: the format's first usable runtime).

        ``device`` defaults to "cpu" where the runtime has it, else the runtime's first device
        (TensorRT: "cuda"). The session's inputs and outputs are checked against the manifest: a graph whose I/O
        names, dtypes or ranks differ from what bundle.json states is a BundleError.
        """
        from edgekit.runtimes import get_runtime

        entry = self.graph(graph)
        rt = get_runtime(runtime or self.default_runtime(entry.name))
        if entry.format not in rt.formats:
            raise InputError(
                f"runtime '{rt.name}' loads {', '.join(rt.formats)}, not '{entry.format}' "
                f"(graph '{entry.name}')"
            )
        device = device or default_device(rt)
        self.check_external_data(entry)
        sess = rt.load(
            self.file(entry.file), device, runtime_options(entry, rt.name, threads, extra)
        )
        check_io_matches(entry, *sess.io())
        return sess

    def sessions(self, **kwargs: Any) -> dict[str, Any]:
        """A session for every graph, keyed by graph name."""
        return {name: self.session(name, **kwargs) for name in self.graphs}


class BundleWriter:
    """Builds a bundle in a temporary sibling directory and moves it into place on ``commit``.

    Nothing is visible at ``dest`` until commit; an existing bundle there is replaced only once
    the new one is complete (rename of the old one aside, rename of the new one in, delete old).
    """

    def __init__(self, dest: str | os.PathLike[str]) -> None:
        self.dest = Path(dest).resolve()
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dest.name}.", dir=self.dest.parent))
        self.graphs: dict[str, GraphEntry] = {}
        self._committed = False

    def add_file(self, src: str | os.PathLike[str], rel: str) -> str:
        """Copy ``src`` into the bundle at ``rel`` (bundle-relative, forward slashes)."""
        target = self.tmp / rel
        if not target.resolve().is_relative_to(self.tmp.resolve()):
            raise InputError(f"bundle path '{rel}' escapes the bundle")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        return rel

    def add_golden(
        self,
        graph: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Mapping[str, np.ndarray],
        reference: Mapping[str, np.ndarray],
    ) -> str:
        """Store golden inputs, the artifact's outputs and the reference outputs for ``graph``."""
        rel = f"golden/{graph}.npz"
        arrays = {GOLDEN_INPUT_PREFIX + k: np.asarray(v) for k, v in inputs.items()}
        arrays.update({GOLDEN_OUTPUT_PREFIX + k: np.asarray(v) for k, v in outputs.items()})
        arrays.update({GOLDEN_REFERENCE_PREFIX + k: np.asarray(v) for k, v in reference.items()})
        (self.tmp / "golden").mkdir(exist_ok=True)
        np.savez(self.tmp / rel, **arrays)
        return rel

    def add_graph(self, entry: GraphEntry) -> None:
        self.graphs[entry.name] = entry

    def path(self, rel: str) -> Path:
        """Absolute path inside the (uncommitted) bundle, e.g. for loading a graph before commit."""
        return self.tmp / rel

    def commit(self, manifest: dict[str, Any]) -> Bundle:
        """Write bundle.json with checksums of every file, then move the bundle to ``dest``."""
        files = {
            p.relative_to(self.tmp).as_posix(): sha256_file(p)
            for p in sorted(self.tmp.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        full = {
            "schema_version": SCHEMA_VERSION,
            **manifest,
            "graphs": {name: e.to_json() for name, e in self.graphs.items()},
            "files": files,
        }
        (self.tmp / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=False) + "\n")
        old = None
        if self.dest.exists():
            old = self.dest.with_name(f".{self.dest.name}.old-{os.getpid()}")
            os.replace(self.dest, old)
        os.replace(self.tmp, self.dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self._committed = True
        return Bundle.load(self.dest)

    def abort(self) -> None:
        """Remove the temporary directory (called on any failure before commit)."""
        if not self._committed:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()
