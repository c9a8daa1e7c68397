"""What a ``bundle.json`` may say: a bundle is untrusted data, so every manifest field that reaches
a runtime, a file path or an app is typed and allow-listed here, and anything else is refused
with a BundleError naming the field, what it held and what is accepted.

Rules (``validate_manifest``):

- ``schema_version``: an int in SUPPORTED_SCHEMAS; the manifest is a JSON object of at most
  MAX_MANIFEST_BYTES, nested at most MAX_JSON_DEPTH deep.
- ``files``: {bundle-relative path: 64-hex sha256}, at most MAX_FILES entries; a path is relative,
  forward-slashed, without ``.``/``..``/empty parts, backslashes or control characters
  (``check_relpath``), and never ``bundle.json`` itself.
- ``graphs``: a non-empty {name: entry}; ``files`` a non-empty list of listed paths, ``format`` and
  ``precision`` strings, ``inputs``/``outputs`` lists of {name, dtype in DTYPES, shape of ints and
  axis names}, ``golden`` null or a listed path, ``tolerance`` only TOLERANCE_BOUNDS keys with
  finite numbers inside their bounds, ``details`` an object whose ``ort_session_config`` holds only
  ORT_SESSION_CONFIG_KEYS (today: the disabled-optimizer list edgekit's fusion writes).
- ``preprocessing.tokenizer``: a plain file name listed as ``assets/<name>``; ``max_length`` a
  positive int; thresholds finite numbers; ``stream_config`` an object.
- ``target``/``report``/``versions``/``source``/``export_options``: objects; ``labels``: strings.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from edgekit.errors import BundleError

MANIFEST = "bundle.json"
SCHEMA_VERSION = 1
SUPPORTED_SCHEMAS = (1,)
MAX_MANIFEST_BYTES = 16 << 20  # 16 MiB of JSON
MAX_JSON_DEPTH = 64  # objects/arrays nested deeper than this are refused
MAX_FILES = 10_000  # entries of the checksum table (and members of an archive)
MAX_GRAPHS = 256
MAX_TENSORS = 1024  # inputs or outputs of one graph
MAX_RANK = 16
MAX_PATH_CHARS = 1024
MAX_NAME_BYTES = 255  # one path component, as the file system allows

# The ONNX Runtime session config entries a manifest may set, with a check for the value. The
# only one edgekit writes keeps a fusion the exporter disabled disabled at load time
# (exporters/onnx_fusion.py); anything else, e.g. ``session.model_external_initializers_file_
# folder_path``, which moves where external weights are read from, is refused.
DISABLE_OPTIMIZERS_KEY = "optimization.disable_specified_optimizers"
_OPTIMIZER_LIST = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}(\s*[,;]\s*[A-Za-z][A-Za-z0-9_]{0,127})*")
ORT_SESSION_CONFIG_KEYS: dict[str, str] = {
    DISABLE_OPTIMIZERS_KEY: "a comma/semicolon list of optimizer names, e.g. 'SkipLayerNormFusion'"
}

# Tolerance keys the exporters write (Tolerance.to_json) and the accepted closed ranges. The
# largest card tolerance is sae-polysemy int8 atol 3.0 (sparse codes switching at boundaries).
TOLERANCE_BOUNDS: dict[str, tuple[float, float]] = {"atol": (0.0, 10.0), "rtol": (0.0, 1.0)}
DTYPES = frozenset(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "object",
    ]
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _fail(where: str, what: str) -> BundleError:
    return BundleError(f"{where}: {what}")


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def parse_manifest(raw: bytes | str, where: str) -> dict[str, Any]:
    """Parse and validate manifest text; BundleError for bad JSON, nesting, size or content."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise _fail(where, f"is {len(raw)} bytes; a manifest holds at most {MAX_MANIFEST_BYTES}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        manifest = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, int limit
        raise BundleError(f"{where} is not valid JSON: {type(exc).__name__}: {exc}") from None
    validate_manifest(manifest, where)
    return manifest


def _check_depth(value: Any, where: str) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise _fail(where, f"nests objects/arrays deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def validate_manifest(manifest: Any, where: str = MANIFEST) -> None:
    """Raise BundleError unless ``manifest`` (parsed JSON) follows the module doc's rules."""
    if not isinstance(manifest, dict):
        raise _fail(where, f"must hold a JSON object, not {_kind(manifest)}")
    _check_depth(manifest, where)
    version = manifest.get("schema_version")
    if type(version) is not int or version not in SUPPORTED_SCHEMAS:
        raise BundleError(
            f"{where} has schema_version {version!r:.40}; this edgekit reads "
            f"{', '.join(map(str, SUPPORTED_SCHEMAS))} (upgrade edgekit or re-export)"
        )
    for key in ("model", "tier", "task", "summary", "runtime", "device_profile"):
        _optional(manifest, key, str, where)
    for key in ("target", "report", "versions", "source", "export_options", "preprocessing"):
        _optional(manifest, key, dict, where)
    target = manifest.get("target") or {}
    for key in ("format", "precision"):
        _optional(target, key, str, f"{where} target")
    _optional(manifest.get("source") or {}, "options", dict, f"{where} source")
    labels = manifest.get("labels")
    if labels is not None and not (
        isinstance(labels, list) and all(isinstance(s, str) for s in labels)
    ):
        raise _fail(where, f"labels must be a list of strings or null, not {_kind(labels)}")
    files = check_files_table(manifest.get("files"), where)
    graphs = manifest.get("graphs")
    if not isinstance(graphs, dict) or not graphs:
        raise _fail(where, "lists no graphs ('graphs' must be a non-empty object)")
    if len(graphs) > MAX_GRAPHS:
        raise _fail(where, f"lists {len(graphs)} graphs; at most {MAX_GRAPHS}")
    for name, entry in graphs.items():
        check_graph(name, entry, files, where)
    check_preprocessing(manifest.get("preprocessing") or {}, files, where)


def _optional(data: Mapping[str, Any], key: str, kind: type, where: str) -> None:
    value = data.get(key)
    if value is not None and not isinstance(value, kind):
        raise _fail(where, f"'{key}' must be {kind.__name__} or null, not {_kind(value)}")


def check_relpath(rel: Any, what: str) -> str:
    """``rel`` when it is a safe bundle-relative path ("graphs/model.onnx"), else BundleError."""
    if not isinstance(rel, str) or not rel:
        raise BundleError(f"{what} must be a non-empty path string, not {rel!r}")
    shown = rel if len(rel) <= 120 else rel[:120] + "..."
    if len(rel) > MAX_PATH_CHARS:
        raise BundleError(f"{what} '{shown}' is longer than {MAX_PATH_CHARS} characters")
    if _CONTROL.search(rel) or "\\" in rel:
        raise BundleError(f"{what} {shown!r} holds a control character or backslash")
    if rel.startswith("/"):
        raise BundleError(f"{what} '{shown}' is absolute (outside the bundle); paths are relative")
    parts = rel.split("/")
    if ".." in parts:
        raise BundleError(f"{what} '{shown}' has a '..' part: it points outside the bundle")
    if any(p in ("", ".") for p in parts):
        raise BundleError(f"{what} '{shown}' has an empty or '.' part; expected e.g. graphs/m.onnx")
    try:
        too_long = any(len(p.encode("utf-8")) > MAX_NAME_BYTES for p in parts)
    except UnicodeEncodeError:
        raise BundleError(f"{what} {shown!r} is not valid UTF-8") from None
    if too_long:
        raise BundleError(f"{what} '{shown}' has a part longer than {MAX_NAME_BYTES} bytes")
    return rel


def check_files_table(files: Any, where: str = MANIFEST) -> dict[str, str]:
    """The ``files`` checksum table {relative path: sha256}, checked."""
    if not isinstance(files, dict):
        raise _fail(where, f"has no 'files' checksum table (an object), got {_kind(files)}")
    if len(files) > MAX_FILES:
        raise _fail(where, f"lists {len(files)} files; a bundle holds at most {MAX_FILES}")
    for rel, digest in files.items():
        check_relpath(rel, f"{where} file")
        if rel == MANIFEST:
            raise _fail(where, f"lists {MANIFEST} in its own checksum table")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise _fail(where, f"file '{rel}' has checksum {digest!r}; expected 64 hex digits")
    return files


def _check_listed(rel: Any, files: Mapping[str, str], what: str) -> None:
    check_relpath(rel, what)
    if rel not in files:
        raise BundleError(f"{what} '{rel}' has no recorded checksum in the 'files' table")


def check_graph(name: Any, entry: Any, files: Mapping[str, str], where: str = MANIFEST) -> None:
    """One ``graphs`` entry: types, listed files, tensor specs, tolerance and details."""
    if not isinstance(name, str) or not name or len(name) > 256 or _CONTROL.search(name):
        raise _fail(where, f"graph name {name!r} must be 1-256 printable characters")
    here = f"{where} graph '{name}'"
    if not isinstance(entry, dict):
        raise _fail(here, f"must be an object, not {_kind(entry)}")
    graph_files = entry.get("files")
    if not isinstance(graph_files, list) or not graph_files:
        raise _fail(here, f"'files' must be a non-empty list of paths, not {graph_files!r:.80}")
    for rel in graph_files:
        _check_listed(rel, files, f"{here} file")
    for key in ("format", "precision"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise _fail(here, f"'{key}' must be a non-empty string, not {entry.get(key)!r:.80}")
    if entry["format"] == "onnx" and not graph_files[0].endswith(".onnx"):
        raise _fail(here, f"loads '{graph_files[0]:.120}'; an onnx graph's file ends in .onnx")
    for kind in ("inputs", "outputs"):
        check_tensor_specs(entry.get(kind), f"{here} {kind}")
    if entry.get("golden") is not None:
        _check_listed(entry["golden"], files, f"{here} golden")
    check_tolerance(entry.get("tolerance") or {}, here)
    details = entry.get("details")
    if details is not None and not isinstance(details, dict):
        raise _fail(here, f"'details' must be an object, not {_kind(details)}")
    details = details or {}
    check_ort_session_config(details.get("ort_session_config") or {}, here)
    if details.get("int8") is not None and not isinstance(details["int8"], dict):
        raise _fail(here, "details.int8 must be an object")
    ops = details.get("ort_contrib_ops")
    if ops is not None and not (isinstance(ops, list) and all(isinstance(o, str) for o in ops)):
        raise _fail(here, "details.ort_contrib_ops must be a list of strings")


def check_tensor_specs(specs: Any, where: str) -> None:
    """A list of {"name": str, "dtype": one of DTYPES, "shape": [int >= 0 | axis name]}."""
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise _fail(where, f"must be a list of at most {MAX_TENSORS} tensor specs")
    names = set()
    for spec in specs:
        if not isinstance(spec, dict):
            raise _fail(where, f"tensor spec {spec!r:.80} must be an object")
        name, dtype, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
        if not isinstance(name, str) or not name or name in names:
            raise _fail(where, f"tensor name {name!r:.80} must be a unique non-empty string")
        names.add(name)
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _fail(
                where, f"'{name}' has dtype {dtype!r:.40}; expected one of {sorted(DTYPES)}"
            )
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise _fail(where, f"'{name}' shape must be a list of at most {MAX_RANK} dims")
        for dim in shape:
            fixed = type(dim) is int and 0 <= dim < 2**31
            if not fixed and not (isinstance(dim, str) and 0 < len(dim) <= 128):
                raise _fail(where, f"'{name}' dim {dim!r:.40} is not a size >= 0 or an axis name")


def check_tolerance(tolerance: Any, where: str = MANIFEST) -> dict[str, float]:
    """{"atol": float, "rtol": float} within TOLERANCE_BOUNDS (missing keys stay missing)."""
    if not isinstance(tolerance, dict):
        raise _fail(where, f"tolerance must be an object, not {_kind(tolerance)}")
    unknown = sorted(set(tolerance) - set(TOLERANCE_BOUNDS))
    if unknown:
        raise _fail(
            where, f"tolerance has unknown key(s) {unknown}; allowed: {list(TOLERANCE_BOUNDS)}"
        )
    out = {}
    for key, value in tolerance.items():
        low, high = TOLERANCE_BOUNDS[key]
        if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
            raise _fail(
                where, f"tolerance {key}={value!r:.40} must be a finite number in [{low}, {high}]"
            )
        out[key] = float(value)
    return out


def check_ort_session_config(config: Any, where: str = MANIFEST) -> dict[str, str]:
    """ONNX Runtime session config entries a manifest may carry: ORT_SESSION_CONFIG_KEYS only."""
    if not isinstance(config, dict):
        raise _fail(where, f"details.ort_session_config must be an object, not {_kind(config)}")
    for key, value in config.items():
        if key not in ORT_SESSION_CONFIG_KEYS:
            raise _fail(
                where,
                f"details.ort_session_config sets '{key:.120}', which a bundle may not set; "
                f"allowed keys: {sorted(ORT_SESSION_CONFIG_KEYS)}",
            )
        if not isinstance(value, str) or len(value) > 4096 or not _OPTIMIZER_LIST.fullmatch(value):
            raise _fail(
                where,
                f"details.ort_session_config '{key}' is {value!r:.80}; expected "
                f"{ORT_SESSION_CONFIG_KEYS[key]}",
            )
    return dict(config)


def check_preprocessing(pre: Mapping[str, Any], files: Mapping[str, str], where: str) -> None:
    """The preprocessing fields apps read: tokenizer file, max_length, thresholds, stream config."""
    if "tokenizer" in pre:
        name = pre["tokenizer"]
        if not isinstance(name, str) or "/" in name:
            raise _fail(where, f"preprocessing.tokenizer {name!r:.80} must be a plain file name")
        check_relpath(name, f"{where} preprocessing.tokenizer")
        if f"assets/{name}" not in files:
            raise _fail(where, f"preprocessing.tokenizer 'assets/{name}' is not a listed file")
    max_length = pre.get("max_length")
    if max_length is not None and not (type(max_length) is int and 0 < max_length <= 1 << 20):
        raise _fail(where, f"preprocessing.max_length {max_length!r:.40} must be an int in 1..2^20")
    for key in ("paraphrase_threshold", "operating_threshold"):
        value = pre.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
            raise _fail(where, f"preprocessing.{key} {value!r:.40} must be a finite number")
    _optional(pre, "stream_config", dict, f"{where} preprocessing")
