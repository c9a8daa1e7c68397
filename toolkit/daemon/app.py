"""The daemon's HTTP API (FastAPI). Blocking work (deploy, self-test, bench, scoring) runs in
worker threads, so the event loop keeps answering while it happens.

Mutating endpoints need ``Authorization: Bearer <token>``: PUT /bundles/{name},
POST /bundles/{name}/rollback, POST /bench, POST /pipelines/{name}/prompt, and
GET /health?detail=1 (pipeline tracebacks, the state folder). Bodies are read capped and
checked field by field (``edgekit.daemon.requests``); what callers without the token see has no
file-system paths or tracebacks (``edgekit.daemon.guard``); any unexpected error is a generic 500
and one log line.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from edgekit.cache import sha256_file
from edgekit.daemon.guard import Guard, log, public_status, public_text
from edgekit.daemon.loop import FrameLoop
from edgekit.daemon.metrics import DaemonMetrics
from edgekit.daemon.requests import (
    MAX_JSON_BYTES,
    ClientGone,
    bench_request,
    iter_body,
    json_body,
    prompt_request,
    score_request,
)
from edgekit.daemon.store import BundleNotDeployed, BundleStore, check_name
from edgekit.errors import BundleError, EdgekitError, InputError, SelfTestError

MAX_UPLOAD_BYTES = 2 << 30
UPLOAD_CHUNK_TIMEOUT_S = 30.0  # a client that sends nothing for this long loses its upload


class DaemonState:
    """Everything the routes share: store, metrics, frame loop, token, upload folder."""

    def __init__(
        self,
        store: BundleStore,
        metrics: DaemonMetrics,
        loop: FrameLoop | None,
        token: str,
        state_dir: Path,
        camera_spec: str,
        max_upload_bytes: int = MAX_UPLOAD_BYTES,
        profile: Any = None,
    ) -> None:
        self.store, self.metrics, self.loop, self.token = store, metrics, loop, token
        self.state_dir = state_dir
        self.uploads = state_dir / "uploads"
        self.uploads.mkdir(parents=True, exist_ok=True)
        for stale in self.uploads.iterdir():  # partial uploads of a previous run
            stale.unlink(missing_ok=True)
        self.camera_spec = camera_spec
        self.profile = profile
        self.max_upload_bytes = max_upload_bytes
        self.max_json_bytes = MAX_JSON_BYTES  # cap on every JSON request body (413 beyond)
        self.max_requests = 64  # requests in flight beyond /health (503 beyond)
        self.started = time.time()
        self.deploy_lock = threading.Lock()
        self.scorers: dict[str, tuple[int, Any]] = {}
        self.scorer_lock = threading.Lock()

    def scorer(self, name: str) -> Any:
        """The TextScorer of deployed bundle ``name``, rebuilt after a swap."""
        from edgekit.text_scorer import TextScorer

        with self.scorer_lock:
            cached = self.scorers.get(name)
            if cached and cached[0] == self.store.generation:
                return cached[1]
            bundle = self.store.get(name)
            runtime, device = (None, None)
            if self.profile is not None:
                from edgekit.devices.profiles import pick_runtime

                runtime, device = pick_runtime(bundle.graph().format, self.profile)
            scorer = TextScorer(bundle, runtime=runtime, device=device)
            self.scorers[name] = (self.store.generation, scorer)
            return scorer


def create_app(state: DaemonState) -> FastAPI:
    """The FastAPI application over ``state``."""
    from edgekit.daemon.page import PAGE_HTML, render_frame

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.loop is not None:
            state.loop.start()
        yield
        if state.loop is not None:
            await run_in_threadpool(state.loop.stop)
        print("edgekit daemon stopped", flush=True)

    app = FastAPI(title="edgekit daemon", version=_version(), lifespan=lifespan)
    app.add_middleware(Guard, max_requests=state.max_requests)

    @app.exception_handler(EdgekitError)
    async def _edgekit_error(request: Request, exc: EdgekitError) -> JSONResponse:
        code = 422 if isinstance(exc, (BundleError, SelfTestError)) else 400
        if isinstance(exc, BundleNotDeployed):
            code = 404
        code = getattr(exc, "status_code", code)
        if isinstance(exc, ClientGone):
            client = request.client.host if request.client else "?"
            log.warning("%s %s from %s: %s", request.method, request.url.path, client, exc)
        detail = str(exc) if authorized(request) else public_text(str(exc), 1000)
        detail = detail.encode("utf-8", "backslashreplace").decode()  # lone surrogates echoed
        headers = {"Connection": "close"} if code in (408, 413) else None
        body = {"error": type(exc).__name__, "detail": detail}
        return JSONResponse(body, status_code=code, headers=headers)

    def authorized(request: Request) -> bool:
        """Whether ``request`` carries the daemon's token (bytes compared in constant time)."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # headers arrive as latin-1 text: compare their bytes (compare_digest refuses non-ASCII str)
        sent = given.strip().encode("latin-1", "replace")
        return scheme.lower() == "bearer" and hmac.compare_digest(sent, state.token.encode())

    def require_token(request: Request) -> None:
        if not authorized(request):
            raise HTTPException(
                401,
                "this endpoint needs 'Authorization: Bearer <token>' (the token is in the "
                "daemon's state folder, file 'token')",
            )

    @app.get("/health")
    async def health(request: Request, detail: bool = False) -> dict[str, Any]:
        """Liveness for anyone (on the event loop: it never waits for a worker thread); with
        ``detail=1`` and the token, full pipeline statuses (tracebacks) and the state folder."""
        if detail:
            require_token(request)
        loop = state.loop
        camera = dict(loop.camera_state) if loop else {"connected": False, "error": "no camera"}
        camera = {"spec": state.camera_spec, **camera}
        statuses = {k: dict(v) for k, v in loop.status.items()} if loop else {}
        pipelines = {k: public_status(v) for k, v in statuses.items()}
        ok = camera.get("connected") and all(p["state"] == "running" for p in pipelines.values())
        extra: dict[str, Any] = {}
        if detail:
            pipelines = {
                k: {key: value for key, value in v.items() if not key.startswith("_")}
                for k, v in statuses.items()
            }
            extra = {"state_dir": str(state.state_dir)}
        else:
            camera = public_status(camera)
        return {
            "status": "ok" if ok else "degraded",
            "uptime_s": round(time.time() - state.started, 3),
            "camera": camera,
            "frames": loop.frames if loop else 0,
            "pipelines": pipelines,
            "bundles": state.store.names(),
            "profile": state.profile.to_json() if state.profile else None,
            "version": _version(),
            **extra,
        }

    @app.get("/metrics")
    def metrics() -> Response:
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/pipelines")
    def pipelines() -> dict[str, Any]:
        loop = state.loop
        return {"pipelines": [] if loop is None else [p.name for p in loop.pipelines]}

    @app.get("/pipelines/{name}/latest")
    def latest(name: str) -> dict[str, Any]:
        loop = state.loop
        if loop is None or name not in loop.status:
            known = ", ".join(loop.status) if loop else "none"
            raise HTTPException(404, f"no pipeline '{name}' runs here (running: {known})")
        result = loop.results.get(name)
        status = public_status(dict(loop.status[name]))
        return {"status": status, "latest": public_status(result) if result else None}

    @app.post("/pipelines/{name}/prompt")
    async def prompt(name: str, request: Request) -> dict[str, Any]:
        require_token(request)
        loop = state.loop
        pipe = next((p for p in loop.pipelines if p.name == name), None) if loop else None
        if pipe is None or not hasattr(pipe, "set_prompts"):
            raise HTTPException(404, f"no promptable pipeline '{name}' runs here")
        body = await json_body(request, state.max_json_bytes)
        frame = loop.latest.frame if loop else None
        hw = frame.image.shape[:2] if frame is not None else None
        frame_hw = (int(hw[0]), int(hw[1])) if hw is not None else None
        parsed, reset = prompt_request(body, frame_hw)
        pipe.set_prompts(parsed, reset=reset)
        return {"pipeline": name, "queued": sorted(parsed)}

    @app.get("/frame.png")
    def frame() -> Response:
        loop = state.loop
        if loop is None or loop.latest.frame is None:
            raise HTTPException(404, "no frame captured yet")
        png = render_frame(loop.latest.frame, loop.results)
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE_HTML

    @app.get("/bundles")
    def bundles(request: Request) -> dict[str, Any]:
        described = [state.store.describe(n) for n in state.store.names()]
        return {"bundles": [_public_bundle(d, authorized(request)) for d in described]}

    @app.get("/bundles/{name}")
    def bundle(name: str, request: Request) -> dict[str, Any]:
        check_name(name)
        info = state.store.describe(name)
        if not info["current"]:
            raise HTTPException(404, f"no bundle named '{name}' is deployed here")
        return _public_bundle(info, authorized(request))

    @app.put("/bundles/{name}")
    async def deploy(name: str, request: Request) -> dict[str, Any]:
        require_token(request)
        check_name(name)
        tmp = await _receive_upload(request, state)
        try:
            expected = request.headers.get("x-edgekit-sha256")
            if expected and sha256_file(tmp) != expected.strip().lower():
                raise InputError("the uploaded archive's sha256 differs from X-Edgekit-Sha256")
            result = await run_in_threadpool(_deploy, state, name, tmp)
        finally:
            tmp.unlink(missing_ok=True)
        state.metrics.swaps.labels(name, "deploy").inc()
        return result

    @app.post("/bundles/{name}/rollback")
    def rollback(name: str, request: Request) -> dict[str, Any]:
        require_token(request)
        with state.deploy_lock:
            result = state.store.rollback(check_name(name))
        state.metrics.swaps.labels(name, "rollback").inc()
        return result

    @app.post("/bench")
    async def bench(request: Request) -> dict[str, Any]:
        require_token(request)
        body = await json_body(request, state.max_json_bytes)
        return await run_in_threadpool(_bench, state, *bench_request(body))

    @app.post("/score")
    async def score(request: Request) -> dict[str, Any]:
        body = await json_body(request, state.max_json_bytes)
        name, texts, pairs = score_request(body)  # every field checked before any model loads
        scorer = await run_in_threadpool(state.scorer, name)
        start = time.perf_counter()
        out = await run_in_threadpool(scorer.score, texts, pairs)
        return {**out, "bundle": name, "latency_ms": round((time.perf_counter() - start) * 1e3, 3)}

    app.state.edgekit = state
    return app


async def _receive_upload(request: Request, state: DaemonState) -> Path:
    """Stream the request body to a temp file (size-capped, per-chunk timeout); a partial or
    oversized upload is deleted and never reaches the store."""
    body = iter_body(
        request, state.max_upload_bytes, UPLOAD_CHUNK_TIMEOUT_S, None, what="bundle archive"
    )
    chunk = await anext(body, b"")  # a Content-Length over the cap is refused before any file
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar", dir=state.uploads)
    path, total = Path(name), 0
    try:
        with os.fdopen(fd, "wb") as fh:
            while chunk:
                total += len(chunk)
                fh.write(chunk)
                chunk = await anext(body, b"")
        if total == 0:
            raise InputError("empty upload: PUT the bundle archive (.tar) as the request body")
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _deploy(state: DaemonState, name: str, archive: Path) -> dict[str, Any]:
    """Deploy ``archive`` as ``name`` through ``deploy_checked`` (fit, self-test, swap)."""
    from edgekit.daemon.deploy import deploy_checked

    pipelines = state.loop.pipelines if state.loop else []
    with state.deploy_lock:
        return deploy_checked(state.store, name, archive, pipelines)


def _bench(
    state: DaemonState, name: str, runtimes: list[str], config: Any, pause: bool
) -> dict[str, Any]:
    """Bench deployed bundle ``name`` (arguments checked by ``requests.bench_request``)."""
    from edgekit.bench.engine import bench_many, expand_targets

    path = state.store.get(name).path
    targets = expand_targets([str(path)], runtimes)
    pause = pause and state.loop is not None
    with state.loop.paused() if pause else contextlib.nullcontext():  # type: ignore[union-attr]
        report = bench_many(targets, config, progress=False)
    report["pipelines_paused"] = pause
    for row in report["results"]:
        row["bundle_name"] = name
    return report


def _public_bundle(info: dict[str, Any], authorized: bool) -> dict[str, Any]:
    """A bundle's description; without the token, history reasons (pipeline errors of an
    auto-rollback) lose their file-system paths."""
    if authorized:
        return info
    history = [public_status(h) for h in info.get("history") or []]
    return {**info, "history": history}


def _version() -> str:
    from edgekit import __version__

    return __version__
