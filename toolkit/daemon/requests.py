"""What clients send the daemon, read and checked before any handler sees it.

Bodies are read as a stream with a size cap (a ``Content-Length`` over the cap is refused
before reading, and the cap holds while reading whatever the header said), a per-chunk timeout
and an overall deadline. JSON bodies are capped at ``MAX_JSON_BYTES`` and ``MAX_JSON_DEPTH``
levels; ``NaN``/``Infinity`` are refused. ``score_request``, ``bench_request`` and
``prompt_request`` check the bodies of POST /score, POST /bench and POST
/pipelines/{name}/prompt field by field. Anything wrong is an InputError (400) or one of the
subclasses here, whose ``status_code`` the app answers with; a message says what was expected.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request

from edgekit.errors import InputError

MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 32
BODY_CHUNK_TIMEOUT_S = 10.0  # a JSON body that stalls this long between chunks is dropped
BODY_TIMEOUT_S = 60.0  # ... or that takes longer than this in all
MAX_PROMPT_OBJECTS = 32
MAX_PROMPT_POINTS = 64
MAX_MASK_SIDE = 4096
BENCH_LIMITS: dict[str, tuple[type, float, float]] = {
    # field: (type, lowest, highest); None is allowed for the optional ones (see BenchConfig)
    "warmup": (int, 0, 10_000),
    "iterations": (int, 1, 100_000),
    "duration_s": (float, 0.001, 600.0),
    "threads": (int, 1, 256),
    "batch": (int, 1, 1024),
    "timeout_s": (float, 1.0, 3600.0),
}
OPTIONAL_BENCH_FIELDS = ("iterations", "duration_s", "threads")
DEVICE_RE = re.compile(r"[a-z][a-z0-9_]{0,15}(:[0-9]{1,3})?")
OBJECT_ID_RE = re.compile(r"[0-9]{1,9}")


class RequestTooLarge(InputError):
    """A request body over the endpoint's size cap (HTTP 413)."""

    status_code = 413


class RequestTimeout(InputError):
    """A client that stalled while sending its body (HTTP 408)."""

    status_code = 408


class ClientGone(InputError):
    """The client disconnected before it had sent the whole body (logged, nobody to answer)."""

    status_code = 400


def content_length(request: Request) -> int | None:
    """The request's Content-Length, None when absent; InputError when it is not a number."""
    raw = request.headers.get("content-length")
    if raw is None:
        return None
    if not raw.strip().isdigit() or len(raw.strip()) > 18:
        raise InputError(f"Content-Length must be a byte count, got {raw[:40]!r}")
    return int(raw)


async def iter_body(
    request: Request,
    limit: int,
    chunk_timeout_s: float = BODY_CHUNK_TIMEOUT_S,
    total_timeout_s: float | None = BODY_TIMEOUT_S,
    what: str = "request body",
) -> AsyncIterator[bytes]:
    """The body of ``request`` chunk by chunk, at most ``limit`` bytes in all (RequestTooLarge
    otherwise, refused up-front when Content-Length says so). RequestTimeout when no chunk
    arrives for ``chunk_timeout_s`` or the body takes over ``total_timeout_s``; ClientGone when
    the client disconnects first."""
    declared = content_length(request)
    if declared is not None and declared > limit:
        raise RequestTooLarge(f"the {what} of {declared} bytes is over the cap of {limit} bytes")
    stream = request.stream().__aiter__()
    deadline = None if total_timeout_s is None else time.monotonic() + total_timeout_s
    total = 0
    while True:
        wait = chunk_timeout_s
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), max(wait, 0.0))
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise RequestTimeout(
                f"the {what} stalled: {total} bytes received, then nothing for "
                f"{wait:.0f} s (or over {total_timeout_s} s in all)"
            ) from None
        except ClientDisconnect:
            raise ClientGone(f"the client went away after {total} bytes of the {what}") from None
        total += len(chunk)
        if total > limit:
            raise RequestTooLarge(f"the {what} is over the cap of {limit} bytes")
        yield chunk


async def json_body(request: Request, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """The request's JSON object, read under ``limit`` bytes and checked by ``parse_json``."""
    chunks = [chunk async for chunk in iter_body(request, limit, what="JSON body")]
    return parse_json(b"".join(chunks))


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """A JSON object from ``raw`` UTF-8 bytes nested at most ``max_depth`` levels; InputError
    for anything else (not UTF-8, not JSON, NaN/Infinity, too deep, not an object)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"the request body is not UTF-8: {exc.reason} at byte {exc.start}"
        ) from None
    try:
        body = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InputError(f"the JSON body is nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InputError(f"the request body is not JSON: {str(exc)[:200]}") from None
    check_depth(body, max_depth)
    if not isinstance(body, dict):
        raise InputError(f"the request body must be a JSON object, got {_kind(body)}")
    return body


def check_depth(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """InputError when parsed JSON ``value`` nests lists/objects deeper than ``max_depth``."""
    if not isinstance(value, (dict, list)):
        return
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise InputError(f"the JSON body is nested deeper than {max_depth} levels")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


# ---- POST /score --------------------------------------------------------------------------
def score_request(body: Mapping[str, Any]) -> tuple[str, list[str] | None, list[list[str]] | None]:
    """(bundle name, texts, pairs) of a /score body: ``{"bundle": NAME, "texts": [str, ...]}``
    or ``{"bundle": NAME, "pairs": [[str, str], ...]}``, within TextScorer's limits."""
    from edgekit.daemon.store import check_name
    from edgekit.text_scorer import check_pairs, check_texts

    usage = "POST /score needs {'bundle': NAME, 'texts': [str, ...]} or {'bundle', 'pairs'}"
    _check_keys(body, {"bundle", "texts", "pairs"}, usage)
    name = body.get("bundle")
    if not isinstance(name, str):
        raise InputError(f"{usage}; 'bundle' is {_kind(name)}")
    check_name(name)
    texts, pairs = body.get("texts"), body.get("pairs")
    if (texts is None) == (pairs is None):
        raise InputError(f"{usage}: give exactly one of 'texts' and 'pairs'")
    if texts is not None:
        return name, check_texts(texts), None
    return name, None, check_pairs(pairs, allow_empty_first=True)  # re-checked per task


# ---- POST /bench --------------------------------------------------------------------------
def bench_request(body: Mapping[str, Any]) -> tuple[str, list[str], Any, bool]:
    """(bundle name, runtime specs, BenchConfig, pause pipelines) of a /bench body:
    ``{"bundle": NAME, "runtimes": ["onnxruntime", ...], "config": {...},
    "pause_pipelines": true}``; config fields are typed and bounded (``BENCH_LIMITS``)."""
    from edgekit.bench.engine import BenchConfig
    from edgekit.daemon.store import check_name
    from edgekit.runtimes import parse_runtime_spec

    usage = "POST /bench needs {'bundle': NAME, 'runtimes': [...], 'config': {...}}"
    _check_keys(body, {"bundle", "runtimes", "config", "pause_pipelines"}, usage)
    name = body.get("bundle")
    if not isinstance(name, str):
        raise InputError(f"{usage}; 'bundle' is {_kind(name)}")
    runtimes = body.get("runtimes") or []
    if not isinstance(runtimes, list) or len(runtimes) > 16:
        raise InputError("'runtimes' must be a list of at most 16 runtime names")
    for i, spec in enumerate(runtimes):
        if not isinstance(spec, str) or not 0 < len(spec) <= 64:
            raise InputError(f"runtimes[{i}] must be a runtime name such as 'onnxruntime'")
        parse_runtime_spec(spec)
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise InputError(f"'config' must be an object, got {_kind(config)}")
    fields = {*BENCH_LIMITS, "device"}
    _check_keys(config, fields, f"bench 'config' takes {', '.join(sorted(fields))}")
    for key, value in config.items():
        if key == "device":
            if not isinstance(value, str) or not DEVICE_RE.fullmatch(value):
                raise InputError("config.device must be a device name such as 'cpu' or 'cuda:0'")
        elif value is not None or key not in OPTIONAL_BENCH_FIELDS:
            _check_number(f"config.{key}", value, *BENCH_LIMITS[key])
    pause = body.get("pause_pipelines", True)
    if not isinstance(pause, bool):
        raise InputError(f"'pause_pipelines' must be true or false, got {_kind(pause)}")
    return check_name(name), list(runtimes), BenchConfig.from_json(config), pause


def _check_number(what: str, value: Any, kind: type, low: float, high: float) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and kind is int and not isinstance(value, int):
        ok = False
    if not ok or not math.isfinite(value):
        name = "an integer" if kind is int else "a number"
        raise InputError(f"{what} must be {name} in [{low:g}, {high:g}], got {_kind(value)}")
    if not low <= value <= high:
        raise InputError(f"{what} must be in [{low:g}, {high:g}], got {value:g}")


# ---- POST /pipelines/{name}/prompt --------------------------------------------------------
def prompt_request(
    body: Mapping[str, Any], frame_hw: tuple[int, int] | None = None
) -> tuple[dict[int, dict[str, Any]], bool]:
    """(objects, reset) of a prompt body ``{"objects": {"1": {"points": [[x, y], ...],
    "labels": [1, ...], "box": [x0, y0, x1, y1]}}, "reset": true}`` (or ``"mask"``, (H, W) of
    0/1, alone). Points and boxes are frame pixels, inside ``frame_hw`` (H, W) when given."""
    usage = "POST .../prompt needs {'objects': {'1': {'points': [[x, y]], 'labels': [1]}}}"
    _check_keys(body, {"objects", "reset"}, usage)
    objects = body.get("objects")
    if not isinstance(objects, dict) or not objects:
        got = "empty" if isinstance(objects, dict) else _kind(objects)
        raise InputError(f"{usage}; 'objects' is {got}")
    if len(objects) > MAX_PROMPT_OBJECTS:
        raise InputError(f"at most {MAX_PROMPT_OBJECTS} objects per prompt, got {len(objects)}")
    reset = body.get("reset", True)
    if not isinstance(reset, bool):
        raise InputError(f"'reset' must be true or false, got {_kind(reset)}")
    parsed = {}
    for key, prompt in objects.items():
        if not OBJECT_ID_RE.fullmatch(key):
            raise InputError(f"object ids must be integers 0..999999999, got {key[:20]!r}")
        parsed[int(key)] = _check_prompt(f"objects[{key}]", prompt, frame_hw)
    return parsed, reset


def _check_prompt(what: str, prompt: Any, frame_hw: tuple[int, int] | None) -> dict[str, Any]:
    if not isinstance(prompt, dict):
        raise InputError(f"{what} must be an object with points/labels, box or mask")
    _check_keys(
        prompt, {"points", "labels", "box", "mask"}, f"{what} takes points, labels, box, mask"
    )
    h, w = frame_hw or (math.inf, math.inf)
    out: dict[str, Any] = {}
    if "mask" in prompt:
        if len(prompt) > 1:
            raise InputError(f"{what}: a mask prompt cannot be combined with points or a box")
        out["mask"] = _check_mask(f"{what}.mask", prompt["mask"], frame_hw)
        return out
    if ("points" in prompt) != ("labels" in prompt):
        raise InputError(f"{what}: points and labels must be given together")
    if "points" in prompt:
        points, labels = prompt["points"], prompt["labels"]
        if not isinstance(points, list) or not 0 < len(points) <= MAX_PROMPT_POINTS:
            raise InputError(f"{what}.points must be a list of 1 to {MAX_PROMPT_POINTS} [x, y]")
        for i, point in enumerate(points):
            _check_xy(f"{what}.points[{i}]", point, 2, w, h)
        if not isinstance(labels, list) or len(labels) != len(points):
            raise InputError(f"{what}.labels must be a list of {len(points)} values (1 or 0)")
        if any(isinstance(v, bool) or v not in (0, 1) for v in labels):
            raise InputError(f"{what}.labels must hold only 1 (positive) or 0 (negative)")
        out.update(points=[[float(x), float(y)] for x, y in points], labels=list(labels))
    if "box" in prompt:
        box = prompt["box"]
        _check_xy(f"{what}.box", box, 4, w, h)
        if box[0] > box[2] or box[1] > box[3]:
            raise InputError(f"{what}.box must be [x0, y0, x1, y1] with x0 <= x1, y0 <= y1")
        out["box"] = [float(v) for v in box]
    if not out:
        raise InputError(f"{what} is empty: give points with labels, a box, or a mask")
    return out


def _check_xy(what: str, value: Any, n: int, w: float, h: float) -> None:
    if not isinstance(value, list) or len(value) != n:
        raise InputError(f"{what} must be a list of {n} numbers")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"{what} must hold {n} finite numbers, got {_kind(v)} at {i}")
        if v < 0 or v > (w if i % 2 == 0 else h):
            raise InputError(f"{what} = {value} is outside the {w:g}x{h:g} frame")


def _check_mask(what: str, mask: Any, frame_hw: tuple[int, int] | None) -> list[list[int]]:
    if not isinstance(mask, list) or not 0 < len(mask) <= MAX_MASK_SIDE:
        raise InputError(f"{what} must be a list of rows (H, W) of 0/1")
    width = len(mask[0]) if isinstance(mask[0], list) else -1
    if not 0 < width <= MAX_MASK_SIDE:
        raise InputError(f"{what} must be a list of rows (H, W) of 0/1")
    for row in mask:
        if not isinstance(row, list) or len(row) != width:
            raise InputError(f"{what} rows must all be lists of {width} values")
        if any(v not in (0, 1) for v in row):  # True/False compare equal to 1/0
            raise InputError(f"{what} must hold only 0 and 1")
    if frame_hw is not None and (len(mask), width) != tuple(frame_hw):
        raise InputError(f"{what} must be (H, W) = {tuple(frame_hw)} like the frame")
    return [[int(v) for v in row] for row in mask]


# ---- helpers ------------------------------------------------------------------------------
def _check_keys(body: Mapping[str, Any], allowed: set[str], usage: str) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise InputError(f"unknown field(s) {shown}; {usage}")


def _kind(value: Any) -> str:
    """The JSON type name of ``value`` (what a client sent), for messages."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null/missing"
    return names.get(type(value), "a number" if isinstance(value, (int, float)) else "unknown")
