"""End to end against the real daemon process: hostile request bodies and headers get a 4xx
(never a 500), 2,000 idle or half-sent connections do not starve /health, clients that vanish
mid-body are one log line, and callers without the token see no paths or tracebacks."""

from __future__ import annotations

import json
import resource
import socket
import time

import httpx
import psutil
import pytest
from conftest import make_tiny_bundle
from daemon_proc import DaemonProcess

pytestmark = pytest.mark.slow

HEADER_TIMEOUT_S = 8.0
IDLE_CONNECTIONS = 2000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    tiny = make_tiny_bundle(root / "tiny", root / "work")
    proc = DaemonProcess(
        root / "state", "--bundle", f"tiny={tiny}", "--pipeline", "sam2-stream", "--fps", "2",
        "--max-upload-mb", "1", "--header-timeout", str(HEADER_TIMEOUT_S),
    )  # fmt: skip
    proc.start()
    yield proc
    log = proc.stop_clean()
    assert "-> 500" not in log, log[-3000:]  # no known bad input reached the catch-all


def _auth(daemon) -> dict[str, str]:
    return {"Authorization": f"Bearer {daemon.token}"}


def _nested(depth: int) -> bytes:
    return b'{"bundle": "tiny", "texts": ' + b"[" * depth + b"]" * depth + b"}"


SCORE = [  # (body: JSON-able or raw bytes, status, words the detail must contain)
    (b"{not json", 400, "not JSON"),
    (b"\xff\xfe{}", 400, "not UTF-8"),
    ([1, 2], 400, "JSON object"),
    (_nested(40), 400, "deeper than 32"),
    (b"[" * 200_000, 400, "deeper than 32"),
    (b'{"bundle": "tiny", "texts": [NaN]}', 400, "NaN"),
    (b'{"bundle": "tiny", "texts": ["a"], "n": 1e999}', 400, "unknown field"),
    ({"bundle": 123, "texts": ["a"]}, 400, "'bundle' is a number"),
    ({"bundle": "tiny\n", "texts": ["a"]}, 400, "not allowed"),
    ({"bundle": "../etc", "texts": ["a"]}, 400, "not allowed"),
    ({"bundle": "tiny", "texts": "hello"}, 400, "list of strings"),
    ({"bundle": "tiny", "texts": [1]}, 400, "texts[0]"),
    ({"bundle": "tiny", "texts": [{"a": 1}]}, 400, "texts[0]"),
    ({"bundle": "tiny", "texts": ["a"] * 257}, 400, "1 to 256"),
    ({"bundle": "tiny", "texts": ["a" * 20_001]}, 400, "over 20000"),
    ({"bundle": "tiny", "texts": ["ok", "a\ud800"]}, 400, "texts[1] is not valid Unicode"),
    ({"bundle": "\ud800", "texts": ["a"]}, 400, "not allowed"),
    ({"bundle": "tiny", "pairs": [["a"]]}, 400, "pairs[0]"),
    ({"bundle": "tiny", "pairs": "ab"}, 400, "pairs must be"),
    ({"bundle": "tiny", "pairs": [["a", 2]]}, 400, "pairs[0][1]"),
    ({"bundle": "tiny", "texts": ["a"], "pairs": [["a", "b"]]}, 400, "exactly one"),
    ({"bundle": "tiny"}, 400, "exactly one"),
    ({"bundle": "tiny", "texts": ["a"], "extra": 1}, 400, "unknown field"),
    ({"bundle": "never-deployed", "texts": ["a"]}, 404, "no bundle named"),
    ({"bundle": "tiny", "texts": ["a"]}, 400, "not a text model"),  # its load fails: no paths
]


@pytest.mark.parametrize(
    "body, status, words", SCORE, ids=[f"score-{i}" for i in range(len(SCORE))]
)
def test_hostile_score_bodies(daemon, body, status, words):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{daemon.url}/score", content=raw, timeout=30)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert words in detail, detail
    assert str(daemon.state_dir) not in detail and "/tmp/" not in detail, detail


def test_oversized_bodies_are_413(daemon):
    big = json.dumps({"bundle": "tiny", "texts": ["a" * 1000] * 1100}).encode()
    r = httpx.post(f"{daemon.url}/score", content=big)  # Content-Length: refused up-front
    assert r.status_code == 413 and "over the cap" in r.json()["detail"]

    def chunks():  # no Content-Length: chunked, capped while reading
        yield b'{"bundle": "tiny", "texts": ['
        for _ in range(300):
            yield b'"' + b"a" * 8000 + b'",'
        yield b'"a"]}'

    r = httpx.post(f"{daemon.url}/score", content=chunks())
    assert r.status_code == 413 and "over the cap" in r.json()["detail"]
    # an upload whose Content-Length is over --max-upload-mb: 413 before any byte of it
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as sock:
        sock.sendall(
            f"PUT /bundles/tiny HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.token}\r\n"
            f"Content-Length: {5 << 20}\r\n\r\n".encode()
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    assert not list((daemon.state_dir / "uploads").iterdir())


BENCH = [  # (body, words)
    ({"bundle": "tiny", "config": {"iterations": 10**9}}, "config.iterations must be in"),
    ({"bundle": "tiny", "config": {"iterations": -5}}, "config.iterations must be in"),
    ({"bundle": "tiny", "config": {"warmup": "x"}}, "config.warmup must be an integer"),
    ({"bundle": "tiny", "config": {"warmup": 2.5}}, "config.warmup must be an integer"),
    ({"bundle": "tiny", "config": {"duration_s": "1"}}, "config.duration_s must be a number"),
    ({"bundle": "tiny", "config": {"duration_s": 1e6}}, "config.duration_s must be in"),
    ({"bundle": "tiny", "config": {"threads": 0}}, "config.threads must be in"),
    ({"bundle": "tiny", "config": {"batch": True}}, "config.batch must be an integer"),
    ({"bundle": "tiny", "config": {"timeout_s": -1}}, "config.timeout_s must be in"),
    ({"bundle": "tiny", "config": {"device": 5}}, "config.device"),
    ({"bundle": "tiny", "config": {"device": "../x"}}, "config.device"),
    ({"bundle": "tiny", "config": {"iterations": None}}, "iterations >= 1 or a duration"),
    ({"bundle": "tiny", "config": {"color": "red"}}, "unknown field"),
    ({"bundle": "tiny", "config": [1]}, "'config' must be an object"),
    ({"bundle": "tiny", "runtimes": "onnxruntime"}, "'runtimes' must be a list"),
    ({"bundle": "tiny", "runtimes": [7]}, "runtimes[0]"),
    ({"bundle": "tiny", "runtimes": ["no-such-runtime"]}, "unknown runtime"),
    ({"bundle": "tiny", "runtimes": ["\ud800x"]}, "unknown runtime"),  # echoed, escaped
    ({"bundle": "tiny", "pause_pipelines": "yes"}, "'pause_pipelines' must be"),
    ({"bundle": ["tiny"]}, "'bundle' is a list"),
]


def test_hostile_bench_bodies(daemon):
    for body, words in BENCH:
        raw = json.dumps(body).encode()  # ASCII: escapes lone surrogates
        r = httpx.post(f"{daemon.url}/bench", content=raw, headers=_auth(daemon), timeout=30)
        assert r.status_code == 400 and words in r.json()["detail"], (body, r.text)
    # what DaemonClient.bench sends (BenchConfig.to_json: every field) still runs
    from edgekit.bench.engine import BenchConfig

    with daemon.client() as client:
        report = client.bench("tiny", config=BenchConfig(iterations=5, warmup=1).to_json())
    assert report["results"][0]["status"] == "ok", report["results"]


PROMPT = [  # (body, words); the sim camera's frames are 64x64
    ({"objects": []}, "'objects' is a list"),
    ({"objects": {}}, "'objects' is empty"),
    ({"objects": {"a": {"points": [[1, 1]], "labels": [1]}}}, "object ids must be integers"),
    ({"objects": {"-1": {"points": [[1, 1]], "labels": [1]}}}, "object ids must be integers"),
    ({"objects": {"1": [1, 2]}}, "must be an object"),
    ({"objects": {"1": {"points": "x", "labels": [1]}}}, "points must be a list"),
    ({"objects": {"1": {"points": [[1]], "labels": [1]}}}, "list of 2 numbers"),
    ({"objects": {"1": {"points": [["1", 2]], "labels": [1]}}}, "finite numbers"),
    ({"objects": {"1": {"points": [[True, 2]], "labels": [1]}}}, "finite numbers"),
    ({"objects": {"1": {"points": [[1, 1]] * 65, "labels": [1] * 65}}}, "1 to 64"),
    ({"objects": {"1": {"points": [[1, 1]], "labels": [1, 0]}}}, "labels must be a list of 1"),
    ({"objects": {"1": {"points": [[1, 1]], "labels": [2]}}}, "only 1 (positive) or 0"),
    ({"objects": {"1": {"points": [[1, 1]]}}}, "together"),
    ({"objects": {"1": {"points": [[1e9, 1]], "labels": [1]}}}, "outside the 64x64 frame"),
    ({"objects": {"1": {"box": [10, 10, 5, 5]}}}, "x0 <= x1"),
    ({"objects": {"1": {"box": [1, 2, 3]}}}, "list of 4 numbers"),
    ({"objects": {"1": {"mask": [[1]], "box": [1, 1, 2, 2]}}}, "cannot be combined"),
    ({"objects": {"1": {"mask": [[1, 0], [1]]}}}, "rows must all be"),
    ({"objects": {"1": {"mask": [[0, 1]]}}}, "like the frame"),
    ({"objects": {"1": {"colour": 1}}}, "unknown field"),
    ({"objects": {"1": {}}}, "is empty"),
    ({"objects": {str(i): {"box": [1, 1, 2, 2]} for i in range(33)}}, "at most 32"),
    ({"objects": {"1": {"box": [1, 1, 2, 2]}}, "reset": "no"}, "'reset' must be"),
]


def test_hostile_prompt_bodies(daemon):
    url = f"{daemon.url}/pipelines/sam2-stream/prompt"
    daemon.wait_for(lambda h: h["frames"] >= 1, what="a frame")
    for body, words in PROMPT:
        r = httpx.post(url, json=body, headers=_auth(daemon))
        assert r.status_code == 400 and words in r.json()["detail"], (body, r.text)
    good = {"objects": {"1": {"points": [[32, 32]], "labels": [1]}, "2": {"box": [1, 1, 9, 9]}}}
    r = httpx.post(url, json=good, headers=_auth(daemon))
    assert r.status_code == 200 and r.json()["queued"] == [1, 2], r.text


def test_tokens_and_names(daemon):
    url = f"{daemon.url}/bench"
    for header in (
        b"Bearer \xc3\xa9t\xc3\xa9",  # UTF-8 non-ASCII (hmac.compare_digest refuses such str)
        b"Bearer \xff\xfe\xfd",
        ("Bearer " + daemon.token[:-1] + "\u00e9").encode(),
        b"Bearer",
        b"Basic " + daemon.token.encode(),
        b"bearer  " + b"x" * 5000,
    ):
        r = httpx.post(url, json={"bundle": "tiny"}, headers={"Authorization": header})
        assert r.status_code == 401, (header, r.text)
    r = httpx.post(url, json={"bundle": "tiny"})
    assert r.status_code == 401
    r = httpx.put(f"{daemon.url}/bundles/tiny%0A", content=b"x", headers=_auth(daemon))
    assert r.status_code == 400 and "not allowed" in r.json()["detail"]
    assert httpx.get(f"{daemon.url}/bundles/tiny%0A").status_code == 400
    assert httpx.get(f"{daemon.url}/bundles/tiny").status_code == 200


def test_health_hides_private_details(daemon):
    health = httpx.get(f"{daemon.url}/health")
    text = health.text
    assert health.status_code == 200
    assert str(daemon.state_dir) not in text and "Traceback" not in text and "state_dir" not in text
    assert all("last_error_trace" not in p for p in health.json()["pipelines"].values())
    assert httpx.get(f"{daemon.url}/health?detail=1").status_code == 401
    with daemon.client() as client:
        detail = client.health(detail=True)
    assert detail["state_dir"] == str(daemon.state_dir)
    assert "sam2-stream" in detail["pipelines"]


def _head_bytes_cap(daemon) -> None:
    """A request head that never ends: 431 and a close once it passes the cap (64 KiB)."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as sock:
        try:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(50):  # up to 400 KiB
                sock.sendall(b"a" * 8192)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: what the cap does
        reply = sock.recv(4096)  # a socket.timeout here: the daemon kept reading
    assert reply.startswith(b"HTTP/1.1 431"), reply[:100]


def _still_open(sock: socket.socket) -> bool:
    """Whether the daemon has not closed ``sock`` (a non-blocking peek)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_idle_connections_do_not_starve_health(daemon):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE_CONNECTIONS + 512
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the open-file hard limit ({hard}) is under {need}")
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    d_soft, d_hard = psutil.Process(daemon.proc.pid).rlimit(psutil.RLIMIT_NOFILE)
    assert d_soft == d_hard and d_soft >= need, (d_soft, d_hard)  # serve() raised it
    _head_bytes_cap(daemon)
    socks: list[socket.socket] = []
    try:
        start = time.monotonic()
        for i in range(IDLE_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
            if i % 2:  # half send a partial request line + header, then stall
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(sock)
        opened = time.monotonic() - start
        assert opened < HEADER_TIMEOUT_S - 2, f"opening took {opened:.1f} s"
        latencies = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = httpx.get(f"{daemon.url}/health", timeout=5)
            latencies.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
        assert sum(_still_open(s) for s in socks) == IDLE_CONNECTIONS  # all of them were open
        print(f"/health with {IDLE_CONNECTIONS} idle connections: max {max(latencies):.3f} s")
        assert max(latencies) < 1.0, latencies
        # the header timeout closes every one of them
        deadline = time.monotonic() + HEADER_TIMEOUT_S + 15
        while any(_still_open(s) for s in socks) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_still_open(s) for s in socks), "idle connections outlived the timeout"
    finally:
        for sock in socks:
            sock.close()
    assert httpx.get(f"{daemon.url}/health", timeout=5).status_code == 200


def test_connection_cap_closes_the_longest_idle(tmp_path):
    proc = DaemonProcess(tmp_path / "state", "--pipeline", "", "--fps", "1",
                         "--max-connections", "40")  # fmt: skip
    proc.start()
    socks = []
    try:
        for _ in range(60):
            socks.append(socket.create_connection(("127.0.0.1", proc.port), timeout=10))
            time.sleep(0.005)
        t0 = time.perf_counter()
        assert httpx.get(f"{proc.url}/health", timeout=5).status_code == 200
        assert time.perf_counter() - t0 < 4.0  # no idle one closed: it would wait 5 s
        time.sleep(0.5)
        open_now = [_still_open(s) for s in socks]
        assert not any(open_now[:15]) and all(open_now[-30:]), open_now
    finally:
        for sock in socks:
            sock.close()
        assert proc.stop() in (0, -15)


def test_client_gone_mid_body_is_one_log_line(daemon):
    for path, length in (("/bundles/tiny", 500_000), ("/score", 5_000)):
        sock = socket.create_connection(("127.0.0.1", daemon.port))
        sock.sendall(
            f"{'PUT' if path.startswith('/b') else 'POST'} {path} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {daemon.token}\r\nContent-Length: {length}\r\n\r\n".encode()
            + b"\0" * 2000
        )
        time.sleep(0.3)
        sock.close()
    deadline = time.monotonic() + 10
    while daemon.log.read_text().count("went away") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    log = daemon.log.read_text()
    lines = [line for line in log.splitlines() if "went away" in line]
    assert len(lines) == 2 and "PUT /bundles/tiny" in lines[0] and "POST /score" in lines[1], log
    assert "Traceback" not in log
    assert not list((daemon.state_dir / "uploads").iterdir())
