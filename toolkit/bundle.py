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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import BundleError, InputError
from edgekit.tensorspec import TensorSpec

SCHEMA_VERSION = 1
SUPPORTED_SCHEMAS = (1,)
MANIFEST = "bundle.json"
GOLDEN_REFERENCE_PREFIX = "reference/"
GOLDEN_OUTPUT_PREFIX = "output/"
GOLDEN_INPUT_PREFIX = "input/"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


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
    def from_json(cls, name: str, data: Mapping[str, Any]) -> GraphEntry:
        try:
            return cls(
                name=name,
                files=list(data["files"]),
                format=str(data["format"]),
                precision=str(data["precision"]),
                inputs=[TensorSpec.from_json(s) for s in data["inputs"]],
                outputs=[TensorSpec.from_json(s) for s in data["outputs"]],
                golden=data.get("golden"),
                tolerance=dict(data.get("tolerance") or {}),
                details=dict(data.get("details") or {}),
            )
        except (KeyError, TypeError, InputError) as exc:
            raise BundleError(f"graph '{name}' in {MANIFEST} is malformed: {exc}") from exc


class Bundle:
    """A bundle loaded from disk, integrity-checked.

    ``Bundle.load(path)`` checks the schema version, that every listed file exists and has the
    recorded sha256, and that no graph file is missing from the checksum list.
    """

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        graphs = manifest.get("graphs")
        if not isinstance(graphs, dict) or not graphs:
            raise BundleError(f"{path / MANIFEST} lists no graphs")
        self.graphs: dict[str, GraphEntry] = {
            name: GraphEntry.from_json(name, entry) for name, entry in graphs.items()
        }

    # ---- loading --------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str], verify_checksums: bool = True) -> Bundle:
        """Open the bundle directory at ``path``; raise BundleError on any integrity problem."""
        root = Path(path)
        if root.is_file() and root.suffix == ".tar":
            raise BundleError(
                f"{root} is a bundle archive; unpack it first (edgekit.archive.unpack)"
            )
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            raise BundleError(f"{root} is not a bundle: {MANIFEST} is missing")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BundleError(f"{manifest_path} is not valid JSON: {exc}") from exc
        if not isinstance(manifest, dict):
            raise BundleError(f"{manifest_path} must hold a JSON object")
        version = manifest.get("schema_version")
        if version not in SUPPORTED_SCHEMAS:
            raise BundleError(
                f"{manifest_path} has schema_version {version!r}; this edgekit reads "
                f"{', '.join(map(str, SUPPORTED_SCHEMAS))} (upgrade edgekit or re-export)"
            )
        bundle = cls(root, manifest)
        if verify_checksums:
            problems = bundle.integrity_problems()
            if problems:
                raise BundleError(
                    f"bundle {root} failed its integrity check: " + "; ".join(problems)
                )
        return bundle

    def integrity_problems(self) -> list[str]:
        """Every checksum, missing-file and unlisted-file problem, as sentences."""
        files = self.manifest.get("files")
        if not isinstance(files, dict):
            return [f"{MANIFEST} has no 'files' checksum table"]
        problems = []
        for rel, expected in sorted(files.items()):
            target = self._resolve(rel)
            if not target.is_file():
                problems.append(f"file '{rel}' is missing")
            elif sha256_file(target) != expected:
                problems.append(f"file '{rel}' has the wrong sha256 (corrupt or modified)")
        for entry in self.graphs.values():
            for rel in [*entry.files, *([entry.golden] if entry.golden else [])]:
                if rel not in files:
                    problems.append(f"graph '{entry.name}' file '{rel}' has no recorded checksum")
        return problems

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
        t = self.manifest.get("target", {})
        return f"{t.get('format')}-{t.get('precision')}"

    @property
    def format(self) -> str:
        return str(self.manifest.get("target", {}).get("format", ""))

    @property
    def precision(self) -> str:
        return str(self.manifest.get("target", {}).get("precision", ""))

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
        with np.load(self.file(entry.golden), allow_pickle=False) as data:
            split: dict[str, dict[str, np.ndarray]] = {
                "input/": {},
                "output/": {},
                "reference/": {},
            }
            for key in data.files:
                for prefix, bucket in split.items():
                    if key.startswith(prefix):
                        bucket[key[len(prefix) :]] = data[key]
        return split["input/"], split["output/"], split["reference/"]

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
        sess = rt.load(
            self.file(entry.file), device, runtime_options(entry, rt.name, threads, extra)
        )
        check_io_matches(entry, *sess.io())
        return sess

    def sessions(self, **kwargs: Any) -> dict[str, Any]:
        """A session for every graph, keyed by graph name."""
        return {name: self.session(name, **kwargs) for name in self.graphs}


def runtime_options(
    entry: GraphEntry, runtime: str, threads: int | None, extra: Mapping[str, Any] | None = None
) -> Any:
    """RuntimeOptions for loading ``entry`` on ``runtime``: the artifact's own load-time settings
    (e.g. ``details["ort_session_config"]`` that keeps a disabled fusion disabled) plus ``extra``."""
    from edgekit.runtimes import RuntimeOptions

    merged: dict[str, Any] = dict(extra or {})
    if runtime == "onnxruntime" and entry.details.get("ort_session_config"):
        merged["session_config"] = {
            **entry.details["ort_session_config"],
            **dict(merged.get("session_config") or {}),
        }
    return RuntimeOptions(threads, merged)


def default_device(runtime: Any) -> str:
    """ "cpu" when the runtime offers it, else its first device; DeviceUnavailableError if none."""
    from edgekit.errors import DeviceUnavailableError

    devices = runtime.devices()
    if not devices:
        raise DeviceUnavailableError(
            f"runtime '{runtime.name}' has no usable device on this machine"
        )
    return "cpu" if "cpu" in devices else devices[0]


def check_io_matches(
    entry: GraphEntry, inputs: list[TensorSpec], outputs: list[TensorSpec]
) -> None:
    """Raise BundleError when a loaded graph's I/O differs from the manifest's statement."""
    for kind, stated, actual in (
        ("input", entry.inputs, inputs),
        ("output", entry.outputs, outputs),
    ):
        by_name = {s.name: s for s in actual}
        stated_names = [s.name for s in stated]
        if sorted(by_name) != sorted(stated_names):
            raise BundleError(
                f"graph '{entry.name}' {kind}s are {sorted(by_name)} but {MANIFEST} states "
                f"{sorted(stated_names)}"
            )
        for spec in stated:
            got = by_name[spec.name]
            fixed_mismatch = len(got.shape) != len(spec.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b
                for a, b in zip(got.shape, spec.shape, strict=False)
            )
            if got.dtype != spec.dtype or fixed_mismatch:
                raise BundleError(
                    f"graph '{entry.name}' {kind} '{spec.name}' is {got.describe()} but "
                    f"{MANIFEST} states {spec.describe()}"
                )


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
