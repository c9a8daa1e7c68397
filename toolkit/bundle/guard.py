"""Checks on a bundle's files, which are untrusted data: nothing in the bundle folder is unlisted,
an ONNX graph's external data comes only from files the bundle lists, golden I/O is bounded.

ONNX external data: a TensorProto may say its bytes live in another file (``external_data``
entry ``location``, ``data_location`` EXTERNAL), which ONNX Runtime reads relative to the
graph's folder. A hostile graph could name ``../../etc/passwd`` or, with ONNX Runtime's
``*/_ORT_MEM_ADDR_/*`` tag, process memory, and the golden outputs would carry the bytes out. So
every location in every tensor (initializers, sparse initializers, Constant/attribute tensors,
subgraphs, functions, training info) must be a relative path inside the graph's folder tree that
the bundle's checksum table lists. The graph is parsed without loading external data, by a
small protobuf wire-format walker over the ONNX messages that can hold tensors (the device side
has no ``onnx`` package), or with ``onnx.load_model(..., load_external_data=False)`` on request
(``use_onnx=True`` / PARSE_WITH_ONNX); both read the file as binary protobuf, as ONNX Runtime
does, whatever its extension.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import posixpath
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from edgekit.bundle.policy import MANIFEST, MAX_FILES, check_relpath
from edgekit.errors import BundleError

# The wire-format walker is the default parser on every machine: it needs no ``onnx`` package
# (absent on devices), reads a 90 MB MiniLM graph in about 1 ms where importing and parsing with
# ``onnx`` takes seconds, and the tests check that both parsers find the same locations.
PARSE_WITH_ONNX = False
MAX_GOLDEN_BYTES = 1 << 30  # 1 GiB of uncompressed golden arrays per graph
MAX_GOLDEN_ARRAYS = 4096
MAX_MESSAGE_DEPTH = 256  # nested ONNX messages (subgraphs of subgraphs ...)
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

# ONNX message kinds and, per kind, {field number: kind} of sub-messages that can hold tensors
# (onnx.proto: ModelProto.graph = 7, GraphProto.initializer = 5, AttributeProto.t = 5, ...).
_MODEL, _TRAINING, _GRAPH, _NODE, _ATTRIBUTE, _SPARSE, _FUNCTION, _TENSOR = range(8)
_SUBMESSAGES: dict[int, dict[int, int]] = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTRIBUTE},
    _ATTRIBUTE: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},
    _TENSOR: {},
}
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
# What numpy/zipfile raise on a corrupt, truncated, pickled or exotic .npz.
_GOLDEN_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,
    RuntimeError,
    RecursionError,
)


def unlisted_paths(root: Path, files: Mapping[str, str]) -> list[str]:
    """Problems with what lies in the bundle folder: any file, link or special file that is not
    ``bundle.json`` or a listed file, and any listed file that is a link."""
    problems: list[str] = []
    stack, seen = [(root, "")], 0
    while stack:
        folder, prefix = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen += 1
                    if seen > 2 * MAX_FILES:
                        return [*problems, f"the bundle folder holds over {2 * MAX_FILES} entries"]
                    rel = prefix + entry.name
                    if entry.is_symlink():
                        problems.append(f"'{rel}' is a symbolic link; bundles hold plain files")
                    elif entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), rel + "/"))
                    elif rel != MANIFEST and rel not in files:
                        problems.append(
                            f"'{rel}' is in the bundle folder but not in its files table"
                        )
        except OSError as exc:
            problems.append(f"folder '{prefix or '.'}' cannot be listed ({exc.strerror or exc})")
    return sorted(problems)


def check_external_data(root: Path, graph_rel: str, files: Mapping[str, str]) -> int:
    """Raise BundleError unless every external-data location of the ONNX graph ``graph_rel`` is
    a listed bundle file inside the bundle; returns how many tensors use external data."""
    locations = external_data_locations(root / graph_rel)
    folder = posixpath.dirname(graph_rel)
    real_root = root.resolve()
    for tensor, location in locations:
        where = f"graph file '{graph_rel}' tensor '{tensor}'"
        if location is None:
            raise BundleError(f"{where} stores its data externally but names no location")
        try:
            check_relpath(location, f"{where} external data location")
        except BundleError as exc:
            raise BundleError(
                f"{exc} (external data must be a listed file of the bundle)"
            ) from None
        rel = posixpath.normpath(posixpath.join(folder, location))
        if rel not in files:
            raise BundleError(
                f"{where} reads external data from '{location}' ('{rel}'), which the bundle's "
                "files table does not list; external data must be a listed file of the bundle"
            )
        if not (root / rel).resolve().is_relative_to(real_root):
            raise BundleError(f"{where} external data '{rel}' resolves outside the bundle")
    return len(locations)


def external_data_locations(
    path: Path, use_onnx: bool | None = None
) -> list[tuple[str, str | None]]:
    """(tensor name, location or None) of every tensor in the ONNX file at ``path`` that keeps its
    data in another file; external data is never read. ``use_onnx``: parse with the ``onnx``
    package instead of the built-in wire-format walker (default: PARSE_WITH_ONNX)."""
    wanted = PARSE_WITH_ONNX if use_onnx is None else use_onnx
    with_onnx = wanted and importlib.util.find_spec("onnx") is not None  # else: the walker
    try:
        return _locations_onnx(path) if with_onnx else _locations_wire(path)
    except (OSError, ValueError, RecursionError) as exc:
        raise BundleError(f"{path} is not a readable ONNX model: {exc}") from None


def _locations_onnx(path: Path) -> list[tuple[str, str | None]]:
    import onnx
    from google.protobuf.message import DecodeError, Message

    try:
        # binary protobuf, as ONNX Runtime reads it, whatever the file's extension says
        model = onnx.load_model(str(path), format="protobuf", load_external_data=False)
    except DecodeError as exc:
        raise BundleError(f"{path} is not a valid ONNX model: {exc}") from None
    found: list[tuple[str, str | None]] = []
    stack: list[Message] = [model]
    while stack:
        message = stack.pop()
        if isinstance(message, onnx.TensorProto):
            locations = [e.value for e in message.external_data if e.key == "location"]
            found.extend((message.name, loc) for loc in locations)
            if message.data_location == EXTERNAL and not locations:
                found.append((message.name, None))
        for field in message.DESCRIPTOR.fields:
            if field.message_type is None:
                continue
            value = getattr(message, field.name)
            if not isinstance(value, Message):
                stack.extend(value)  # a repeated message field
            elif message.HasField(field.name):
                stack.append(value)
    return found


def _locations_wire(path: Path) -> list[tuple[str, str | None]]:
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return []
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _walk(buf)
            except BundleError as exc:
                raise BundleError(f"{path} is not a valid ONNX model: {exc}") from None


def _varint(buf: mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise BundleError("truncated or invalid protobuf varint")


def _fields(buf: mmap.mmap, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value or payload start, payload end) of one message's fields."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, pos
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise BundleError("truncated protobuf field")
            yield number, wire, pos, pos + length
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise BundleError(f"unsupported protobuf wire type {wire}")
    if pos != end:
        raise BundleError("truncated protobuf message")


def _text(buf: mmap.mmap, start: int, end: int) -> str:
    try:
        return bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        raise BundleError("an ONNX string field is not valid UTF-8") from None


def _walk(buf: mmap.mmap) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    stack = [(_MODEL, 0, len(buf), 0)]
    while stack:
        kind, start, end, depth = stack.pop()
        if depth > MAX_MESSAGE_DEPTH:
            raise BundleError(f"ONNX messages nest deeper than {MAX_MESSAGE_DEPTH}")
        if kind == _TENSOR:
            found.extend(_tensor_locations(buf, start, end))
            continue
        children = _SUBMESSAGES[kind]
        for number, wire, a, b in _fields(buf, start, end):
            if wire == 2 and number in children:
                stack.append((children[number], a, b, depth + 1))
    return found


def _tensor_locations(buf: mmap.mmap, start: int, end: int) -> list[tuple[str, str | None]]:
    name, location_kind, locations = "", 0, []
    for number, wire, a, b in _fields(buf, start, end):
        if number == _TENSOR_NAME and wire == 2:
            name = _text(buf, a, b)
        elif number == _TENSOR_DATA_LOCATION and wire == 0:
            location_kind = a
        elif number == _TENSOR_EXTERNAL_DATA and wire == 2:
            key = value = ""
            for n, w, x, y in _fields(buf, a, b):
                if w == 2 and n in (1, 2):
                    text = _text(buf, x, y)
                    key, value = (text, value) if n == 1 else (key, text)
            if key == "location":
                locations.append(value)
    found: list[tuple[str, str | None]] = [(name, loc) for loc in locations]
    if location_kind == EXTERNAL and not locations:
        found.append((name, None))
    return found


def read_golden(
    path: Path, where: str
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(inputs, outputs, reference) arrays of a golden ``.npz`` whose keys are "input/<name>",
    "output/<name>" and "reference/<name>"; BundleError for a corrupt, pickled or oversized file
    (at most MAX_GOLDEN_ARRAYS arrays, MAX_GOLDEN_BYTES uncompressed)."""
    split: dict[str, dict[str, np.ndarray]] = {"input/": {}, "output/": {}, "reference/": {}}
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
        size = sum(i.file_size for i in infos)
        if len(infos) > MAX_GOLDEN_ARRAYS or size > MAX_GOLDEN_BYTES:
            raise BundleError(
                f"{where} holds {len(infos)} arrays of {size} bytes; at most "
                f"{MAX_GOLDEN_ARRAYS} arrays and {MAX_GOLDEN_BYTES} bytes"
            )
        with np.load(path, allow_pickle=False) as data:
            for key in data.files:
                for prefix, bucket in split.items():
                    if key.startswith(prefix):
                        bucket[key[len(prefix) :]] = data[key]
    except _GOLDEN_ERRORS as exc:
        raise BundleError(f"{where} is not a readable golden .npz: {exc}") from None
    return split["input/"], split["output/"], split["reference/"]
