"""The daemon's HTTP connections: the limits uvicorn lacks, so slow clients cannot starve it.

uvicorn waits for a request head forever (its keep-alive timeout stops at the first byte) and
its ``limit_concurrency`` counts open connections, so idle sockets would get every request a
503. The protocol classes here (uvicorn's httptools or h11 protocol, subclassed) add:

- a header timeout: a connection that has not sent a complete request head within
  ``header_timeout_s`` of opening, or of its previous response, is closed;
- a head size cap: a request line + headers over ``max_head_bytes`` get 431 and a close
  (h11: its ``max_incomplete_event_size``);
- a connection cap: beyond ``max_connections`` the connection that has waited longest for a
  request head is closed (the new one when none waits), so a new client always gets in.

Requests in flight are capped by ``edgekit.daemon.guard.Guard`` (``max_requests``, 503).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

from edgekit.errors import InputError

FD_RESERVE = 64  # descriptors kept for files, the camera and threads beyond the connections
_idle_order = itertools.count()  # orders the starts of idle periods (loop.time() can tie)


@dataclass(frozen=True)
class HttpLimits:
    """Limits of the daemon's HTTP server (see the module doc)."""

    header_timeout_s: float = 5.0
    max_head_bytes: int = 64 * 1024
    max_connections: int = 4096
    max_requests: int = 64
    keep_alive_s: int = 5

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "max_head_bytes", "max_connections", "max_requests"):
            if not getattr(self, name) > 0:
                raise InputError(f"HTTP limit {name} must be > 0, got {getattr(self, name)}")


class _HeadDeadline:
    """Mixin over a uvicorn HTTP protocol: header timeout and connection cap."""

    limits: HttpLimits
    # provided by the uvicorn protocol
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._head_since, self._idle_seq = self.loop.time(), next(_idle_order)
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.limits.header_timeout_s, self._check_head
        )
        if len(self.connections) > self.limits.max_connections:
            self._shed()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._head_since, self._idle_seq = self.loop.time(), next(_idle_order)

    def waiting_for_head(self) -> bool:
        """True while no request is in flight: the next thing due is a request head."""
        cycle = self.cycle
        return (cycle is None or cycle.response_complete) and not getattr(self, "pipeline", None)

    def _check_head(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        wait = self.limits.header_timeout_s
        if self.waiting_for_head():
            wait = self._head_since + self.limits.header_timeout_s - self.loop.time()
            if wait <= 0:  # no complete request head in time: a slow or idle client
                self.transport.close()
                return
        self._head_timer = self.loop.call_later(max(wait, 0.05), self._check_head)

    def _shed(self) -> None:
        idle = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, _HeadDeadline)
            and not c.transport.is_closing()
            and c.waiting_for_head()
        ]
        victim = min(idle, key=lambda c: c._idle_seq, default=self)
        victim.transport.close()


def protocol_class(limits: HttpLimits, http: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (h11 when httptools is missing or ``http="h11"``) with the
    header timeout, head size cap and connection cap of ``limits``."""
    use_httptools = http in ("auto", "httptools")
    if use_httptools:
        try:
            import httptools  # noqa: F401
        except ImportError:
            use_httptools = http == "httptools"
    if use_httptools:
        return type("GuardedHttpToolsProtocol", (_HttpToolsHead,), {"limits": limits})
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("GuardedH11Protocol", (_HeadDeadline, H11Protocol), {"limits": limits})


def _httptools_base() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return HttpToolsProtocol


try:
    _HttpToolsBase: type = _httptools_base()
except ImportError:  # no httptools: protocol_class picks h11
    _HttpToolsBase = object


class _HttpToolsHead(_HeadDeadline, _HttpToolsBase):  # type: ignore[misc, valid-type]
    """httptools protocol with a cap on the bytes of a request head (the parser has none)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._reading_head, self._head_bytes = True, 0
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        counting = self._reading_head
        if counting:
            self._head_bytes += len(data)
        super().data_received(data)
        if (
            counting
            and self._reading_head
            and self._head_bytes > self.limits.max_head_bytes
            and not self.transport.is_closing()
        ):
            msg = f"request head over {self.limits.max_head_bytes} bytes".encode()
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(msg), msg)
            )
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._reading_head, self._head_bytes = False, 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head, self._head_bytes = True, 0


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to its hard limit; returns the soft limit now
    (large when the platform has no such limit)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(limits: HttpLimits, fd_limit: int) -> HttpLimits:
    """``limits`` with max_connections lowered to what ``fd_limit`` descriptors allow."""
    from dataclasses import replace

    room = max(fd_limit - FD_RESERVE, 16)
    return replace(limits, max_connections=min(limits.max_connections, room))
