"""Unit tests of the daemon's defences: pruning off the store lock, body reading limits, the
catch-all 500, what callers without the token see, and the TLS / exposure checks at start."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from edgekit.daemon.store import KEEP_PREVIOUS, TRASH, BundleStore, check_name
from edgekit.errors import InputError

pytestmark = pytest.mark.slow


def test_pruning_never_blocks_reads(tmp_path, tiny_bundle, monkeypatch):
    from edgekit.bundle.archive import pack
    from edgekit.daemon import store as store_module

    store = BundleStore(tmp_path / "bundles")
    archive = pack(tiny_bundle, tmp_path / "tiny.tar")
    for _ in range(KEEP_PREVIOUS + 1):
        store.deploy("tiny", archive, lambda path: True)
    versions = tmp_path / "bundles" / "tiny" / "versions"
    (versions / "20990101T000000-inflight").mkdir()  # a deploy still self-testing: kept
    real_rmtree, deleting = shutil.rmtree, threading.Event()

    def slow_rmtree(path, *args, **kwargs):
        deleting.set()
        time.sleep(4.0)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(store_module.shutil, "rmtree", slow_rmtree)
    start = time.monotonic()
    out = store.deploy("tiny", archive, lambda path: True)  # prunes the oldest version
    assert time.monotonic() - start < 2.0  # the deploy did not wait for the 4 s deletion
    assert deleting.wait(4.0)
    for _ in range(5):
        t0 = time.perf_counter()
        assert store.current_path("tiny") == versions / out["version"]
        assert store.get("tiny").model == "tiny"
        assert store.describe("tiny")["current"] == out["version"]
        assert store.names() == ["tiny"]
        assert time.perf_counter() - t0 < 1.0  # not behind the 4 s deletion
    trash = tmp_path / "bundles" / TRASH
    assert len(list(trash.iterdir())) == 1  # being deleted
    kept = {p.name for p in versions.iterdir()}
    assert kept == {out["version"], *out["previous"], "20990101T000000-inflight"}
    assert store.wait_pruned(timeout=10)
    assert not list(trash.iterdir())
    # leftovers of a crash: recover() clears the trash and orphan versions
    (trash / "tiny.v.x" / "graphs").mkdir(parents=True)
    removed = store.recover()
    assert not trash.exists() and f"{TRASH}/tiny.v.x" in removed
    assert "tiny/versions/20990101T000000-inflight" in removed


def test_bundle_names_match_in_full():
    assert check_name("photo-cnn") == "photo-cnn"
    for bad in ("photo-cnn\n", "photo-cnn\n\n", "", ".trash", "a/b", "x" * 65, None, 5):
        with pytest.raises(InputError):
            check_name(bad)  # type: ignore[arg-type]


def _request(messages: list[dict], headers: list[tuple[bytes, bytes]] = ()) -> Request:
    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)  # a client that stalls
        return {}

    scope = {"type": "http", "method": "POST", "path": "/score", "headers": list(headers)}
    return Request(scope, receive)


def test_body_reading_limits():
    from edgekit.daemon.requests import (
        ClientGone,
        RequestTimeout,
        RequestTooLarge,
        iter_body,
        json_body,
    )

    async def read(request: Request, limit: int = 100, chunk_timeout_s: float = 5.0) -> bytes:
        return b"".join([c async for c in iter_body(request, limit, chunk_timeout_s, 5.0)])

    part = {"type": "http.request", "body": b"x" * 60, "more_body": True}
    with pytest.raises(RequestTooLarge, match="over the cap"):  # Content-Length up-front
        asyncio.run(read(_request([part], [(b"content-length", b"1000")])))
    with pytest.raises(RequestTooLarge, match="over the cap"):  # a lying Content-Length
        asyncio.run(read(_request([part, part], [(b"content-length", b"10")])))
    with pytest.raises(InputError, match="Content-Length must be"):
        asyncio.run(read(_request([part], [(b"content-length", b"-1")])))
    with pytest.raises(RequestTimeout, match="stalled"):
        asyncio.run(read(_request([dict(part)]), chunk_timeout_s=0.2))
    with pytest.raises(ClientGone, match="after 60 bytes"):
        asyncio.run(read(_request([dict(part), {"type": "http.disconnect"}])))
    last = {"type": "http.request", "body": b'{"a": [[1]]}', "more_body": False}
    assert asyncio.run(json_body(_request([last]))) == {"a": [[1]]}


def _app(tmp_path: Path, store: BundleStore, loop=None):  # noqa: ANN001, ANN202
    from edgekit.daemon.app import DaemonState, create_app
    from edgekit.daemon.metrics import DaemonMetrics

    state = DaemonState(store, DaemonMetrics(), loop, "t" * 32, tmp_path / "state", "sim")
    return TestClient(create_app(state))


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_unexpected_errors_are_a_generic_500_and_one_log_line(tmp_path):
    class BrokenStore(BundleStore):
        def names(self) -> list[str]:
            raise RuntimeError("disk on fire at /srv/secret/bundles/state.json")

    handler = _ListHandler()
    logging.getLogger("edgekit.daemon").addHandler(handler)
    try:
        r = _app(tmp_path, BrokenStore(tmp_path / "bundles")).get("/bundles")
    finally:
        logging.getLogger("edgekit.daemon").removeHandler(handler)
    assert r.status_code == 500
    assert r.json() == {"error": "InternalError", "detail": "internal error (see the daemon log)"}
    (line,) = handler.lines
    assert line.startswith("GET /bundles -> 500: RuntimeError: disk on fire") and "\n" not in line


class _FakeLoop:
    """What the routes read of a FrameLoop, with a pipeline that failed on a private path."""

    pipelines: list = []
    frames = 3
    results: dict = {}
    camera_state = {"connected": False, "error": "OSError: cannot open /home/me/clip.mp4"}
    status = {
        "classify": {
            "state": "load failed",
            "processed": 0,
            "errors": 4,
            "last_error": "BundleError: /root/.local/state/edgekit/daemon/bundles/x/versions/"
            "v1/bundle.json is not valid JSON " + "x" * 1000,
            "last_error_trace": 'Traceback (most recent call last):\n  File "/usr/lib/a.py"',
            "auto_rollback": {"reason": "OSError: /opt/secret/model.onnx", "_private": 1},
        }
    }


def test_health_without_the_token_has_no_paths_or_tracebacks(tmp_path):
    from edgekit.daemon.guard import public_text, scrub_paths

    client = _app(tmp_path, BundleStore(tmp_path / "bundles"), _FakeLoop())
    health = client.get("/health")
    text = health.text
    assert health.status_code == 200
    assert "/root" not in text and "/home" not in text and "Traceback" not in text
    status = health.json()["pipelines"]["classify"]
    assert status["last_error"].startswith("BundleError: …/bundle.json is not valid JSON")
    assert len(status["last_error"]) <= 300 and "last_error_trace" not in status
    assert status["auto_rollback"] == {"reason": "OSError: …/model.onnx"}
    assert health.json()["camera"]["error"] == "OSError: cannot open …/clip.mp4"
    assert client.get("/health?detail=1").status_code == 401
    full = client.get("/health?detail=1", headers={"Authorization": "Bearer " + "t" * 32}).json()
    assert full["pipelines"]["classify"]["last_error_trace"].startswith("Traceback")
    assert full["state_dir"] == str(tmp_path / "state")
    # the daemon's own routes, URLs and device nodes are not private
    kept = "POST /score needs /bundles/x; see http://host:8700/health or /dev/video0"
    assert scrub_paths(kept) == kept
    assert scrub_paths("at ~/.cache/edgekit/x.onnx and /tmp/a b") == "at …/x.onnx and …/a b"
    assert public_text("a\nb   c") == "a b c"


def test_tls_options_and_the_exposure_warning(tmp_path):
    from typer.testing import CliRunner

    from edgekit.cli.app import app
    from edgekit.daemon.serve import check_tls, exposure_warning

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    assert check_tls(None, None) is None
    assert check_tls(cert, key) == (str(cert), str(key))
    with pytest.raises(InputError, match="go together"):
        check_tls(cert, None)
    with pytest.raises(InputError, match="no such readable file"):
        check_tls(cert, tmp_path / "missing.pem")
    for host in ("127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"):
        assert exposure_warning(host, tls=False) is None, host
    warning = exposure_warning("0.0.0.0", tls=False)
    assert "/score" in warning and "in clear" in warning and "--ssl-certfile" in warning
    assert "Caddy" in warning and "in clear" not in exposure_warning("192.168.1.9", tls=True)
    result = CliRunner().invoke(
        app, ["daemon", "--state-dir", str(tmp_path / "s"), "--ssl-certfile", str(cert)]
    )
    assert result.exit_code == 2 and "go together" in result.output, result.output
    assert not (tmp_path / "s").exists()  # refused before anything started


def test_guard_caps_requests_in_flight_but_never_health():
    from edgekit.daemon.guard import Guard, send_json

    async def main() -> None:
        release = asyncio.Event()

        async def app(scope, receive, send) -> None:  # noqa: ANN001
            if scope["path"] == "/slow":
                await release.wait()
            await send_json(send, 200, {})

        guard = Guard(app, max_requests=1)

        async def call(path: str) -> int:
            sent: list[dict] = []

            async def send(message: dict) -> None:
                sent.append(message)

            await guard({"type": "http", "method": "GET", "path": path}, None, send)
            return sent[0]["status"]

        slow = asyncio.create_task(call("/slow"))
        await asyncio.sleep(0.05)
        assert await call("/bundles") == 503
        assert await call("/health") == 200
        release.set()
        assert await slow == 200
        assert await call("/bundles") == 200

    asyncio.run(main())


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_protocols_close_slow_heads(http):
    import httpx
    import uvicorn
    from daemon_proc import free_port

    from edgekit.daemon.guard import send_json
    from edgekit.daemon.http_protocol import HttpLimits, protocol_class

    if http == "httptools":
        pytest.importorskip("httptools")

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        await send_json(send, 200, {"ok": True})

    limits = HttpLimits(header_timeout_s=0.6, max_head_bytes=4096)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="critical",
        http=protocol_class(limits, http), h11_max_incomplete_event_size=limits.max_head_bytes,
        timeout_keep_alive=30,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        idle = socket.create_connection(("127.0.0.1", port), timeout=15)
        partial = socket.create_connection(("127.0.0.1", port), timeout=15)
        partial.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        kept = socket.create_connection(("127.0.0.1", port), timeout=15)
        kept.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET / HTT")  # a keep-alive connection that stalls in its next head
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=15).status_code == 200
        start = time.monotonic()
        for sock in (idle, partial, kept):
            assert sock.recv(4096) == b""  # closed by the daemon, not by the 15 s recv timeout
        assert time.monotonic() - start < 8.0  # header timeout 0.6 s; recv would wait 15 s
        with socket.create_connection(("127.0.0.1", port), timeout=5) as big:
            # over the 4 KiB cap, under h11's own default (16 KiB): 431 (httptools) / 400 (h11)
            big.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8192)
            assert big.recv(4096)[:12] in (b"HTTP/1.1 431", b"HTTP/1.1 400")
    finally:
        server.should_exit = True
        thread.join(10)
