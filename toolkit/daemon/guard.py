"""What the daemon shows callers without the token, and the last line of defence of its routes.

- ``scrub_paths``: absolute file-system paths in a message become ``…/<last part>`` (install
  paths, the state folder, temp files stay private); ``public_status`` is a pipeline status as
  /health shows it: no traceback, no private keys, short error strings without paths.
- ``Guard``: ASGI middleware that caps the requests in flight (HTTP 503 beyond it; /health is
  never refused) and turns any exception a route did not expect into a 500 with a generic
  body, logged as one line (the type, the message, where it was raised) instead of a traceback.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

log = logging.getLogger("edgekit.daemon")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_PUBLIC_ERROR_CHARS = 300
PRIVATE_STATUS_KEYS = frozenset({"last_error_trace", "traceback", "trace"})
# the daemon's own URL paths and device nodes are not private
PUBLIC_PATH_ROOTS = frozenset(
    {"dev", "bundles", "pipelines", "health", "score", "bench", "metrics", "frame.png"}
)
_PATH_RE = re.compile(
    r"(?<![\w.~:/-])(~/|/)((?:[^\s'\"/:,;()\[\]{}<>|]+/)*[^\s'\"/:,;()\[\]{}<>|]*)"
)


def scrub_paths(text: str) -> str:
    """``text`` with each absolute (or ``~``) path replaced by ``…/`` + its last part, e.g.
    "bundle /root/.local/state/x/bundle.json is bad" -> "bundle …/bundle.json is bad"."""

    def replace(m: re.Match[str]) -> str:
        parts = m.group(2).split("/")
        if m.group(1) == "/" and (len(parts) < 2 or parts[0] in PUBLIC_PATH_ROOTS):
            return m.group(0)  # "/score", "/bundles/x", "/dev/video0": not private
        return "…/" + (parts[-1] or "")

    return _PATH_RE.sub(replace, text)


def public_text(text: str, limit: int = MAX_PUBLIC_ERROR_CHARS) -> str:
    """A message fit for callers without the token: paths scrubbed, one line, ``limit`` chars."""
    out = " ".join(scrub_paths(text).split())
    return out if len(out) <= limit else out[: limit - 1] + "…"


def public_status(status: dict[str, Any]) -> dict[str, Any]:
    """A pipeline status (or latest result) as callers without the token see it: keys starting
    with "_" and tracebacks dropped, strings at any depth through ``public_text``."""
    return _public_value(status)


def _public_value(value: Any) -> Any:
    if isinstance(value, str):
        return public_text(value)
    if isinstance(value, dict):
        return {
            k: _public_value(v)
            for k, v in value.items()
            if not (isinstance(k, str) and (k.startswith("_") or k in PRIVATE_STATUS_KEYS))
        }
    if isinstance(value, (list, tuple)):
        return [_public_value(v) for v in value]
    return value


def one_line(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` of ``exc``, for a log line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = (
        f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    )
    message = " ".join(str(exc).split())[:500]
    return f"{type(exc).__name__}: {message}{where}"


class Guard:
    """ASGI middleware: at most ``max_requests`` requests in flight (others get 503 with
    Retry-After; paths in ``exempt`` are neither counted nor refused), and a 500 with a
    generic body for any exception that escapes the routes (one log line each)."""

    def __init__(
        self, app: ASGIApp, max_requests: int = 64, exempt: tuple[str, ...] = ("/health",)
    ) -> None:
        self.app = app
        self.max_requests = max_requests
        self.exempt = frozenset(exempt)
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counted = scope.get("path") not in self.exempt
        if counted and self.in_flight >= self.max_requests:
            await send_json(
                send,
                503,
                {"error": "Busy", "detail": f"over {self.max_requests} requests in flight"},
                [(b"retry-after", b"1")],
            )
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        self.in_flight += counted
        try:
            await self.app(scope, receive, tracked_send)
        except Exception as exc:  # noqa: BLE001 - the catch-all: one line, a generic 500
            method, path = scope.get("method", "?"), scope.get("path", "?")
            log.error("%s %s -> 500: %s", method, path, one_line(exc))
            if not started:
                body = {"error": "InternalError", "detail": "internal error (see the daemon log)"}
                await send_json(send, 500, body)
        finally:
            self.in_flight -= counted


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Send a complete JSON response through ASGI ``send``."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def configure_logging(level: str = "warning") -> None:
    """Send the ``edgekit.daemon`` log to stderr, one line per record (once per process)."""
    if log.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:  edgekit: %(message)s"))
    log.addHandler(handler)
    log.setLevel(min(logging.getLevelNamesMapping().get(level.upper(), 30), logging.WARNING))
    log.propagate = False
