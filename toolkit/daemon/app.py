"""The daemon's HTTP API (FastAPI). Blocking work (deploy, self-test, bench, scoring) runs in
worker threads, so the event loop keeps answering while it happens.

Mutating endpoints need ``Authorization: Bearer <token>``: PUT /bundles/{name},
POST /bundles/{name}/rollback, POST /bench, POST /pipelines/{name}/prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
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
from starlette.requests import ClientDisconnect

from edgekit.daemon.loop import FrameLoop
from edgekit.daemon.metrics import DaemonMetrics
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

    @app.exception_handler(EdgekitError)
    async def _edgekit_error(request: Request, exc: EdgekitError) -> JSONResponse:
        code = 422 if isinstance(exc, (BundleError, SelfTestError)) else 400
        if isinstance(exc, BundleNotDeployed):
            code = 404
        return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=code)

    def require_token(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), state.token):
            raise HTTPException(
                401,
                "this endpoint needs 'Authorization: Bearer <token>' (the token is in the "
                "daemon's state folder, file 'token')",
            )

    @app.get("/health")
    def health() -> dict[str, Any]:
        loop = state.loop
        camera = dict(loop.camera_state) if loop else {"connected": False, "error": "no camera"}
        pipelines = {k: _public(v) for k, v in loop.status.items()} if loop else {}
        ok = camera.get("connected") and all(p["state"] == "running" for p in pipelines.values())
        return {
            "status": "ok" if ok else "degraded",
            "uptime_s": round(time.time() - state.started, 3),
            "camera": {"spec": state.camera_spec, **camera},
            "frames": loop.frames if loop else 0,
            "pipelines": pipelines,
            "bundles": state.store.names(),
            "profile": state.profile.to_json() if state.profile else None,
            "version": _version(),
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
        return {"status": _public(loop.status[name]), "latest": _public(result) if result else None}

    @app.post("/pipelines/{name}/prompt")
    async def prompt(name: str, request: Request) -> dict[str, Any]:
        require_token(request)
        loop = state.loop
        pipe = next((p for p in loop.pipelines if p.name == name), None) if loop else None
        if pipe is None or not hasattr(pipe, "set_prompts"):
            raise HTTPException(404, f"no promptable pipeline '{name}' runs here")
        body = await _json_body(request)
        objects = body.get("objects")
        if not isinstance(objects, dict):
            raise InputError("POST .../prompt needs {'objects': {'1': {'points': [[x, y]], ...}}}")
        try:
            parsed = {int(k): v for k, v in objects.items()}
        except ValueError as exc:
            raise InputError(f"object ids must be integers: {exc}") from exc
        pipe.set_prompts(parsed, reset=bool(body.get("reset", True)))
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
    def bundles() -> dict[str, Any]:
        return {"bundles": [state.store.describe(n) for n in state.store.names()]}

    @app.get("/bundles/{name}")
    def bundle(name: str) -> dict[str, Any]:
        check_name(name)
        info = state.store.describe(name)
        if not info["current"]:
            raise HTTPException(404, f"no bundle named '{name}' is deployed here")
        return info

    @app.put("/bundles/{name}")
    async def deploy(name: str, request: Request) -> dict[str, Any]:
        require_token(request)
        check_name(name)
        tmp = await _receive_upload(request, state)
        try:
            expected = request.headers.get("x-edgekit-sha256")
            if expected and _sha256(tmp) != expected.strip().lower():
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
        body = await _json_body(request)
        return await run_in_threadpool(_bench, state, body)

    @app.post("/score")
    async def score(request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        name = body.get("bundle")
        if not isinstance(name, str):
            raise InputError("POST /score needs {'bundle': NAME, 'texts': [...]} or 'pairs'")
        scorer = await run_in_threadpool(state.scorer, check_name(name))
        start = time.perf_counter()
        out = await run_in_threadpool(scorer.score, body.get("texts"), body.get("pairs"))
        return {**out, "bundle": name, "latency_ms": round((time.perf_counter() - start) * 1e3, 3)}

    app.state.edgekit = state
    return app


async def _receive_upload(request: Request, state: DaemonState) -> Path:
    """Stream the request body to a temp file (size-capped, per-chunk timeout); a partial or
    oversized upload is deleted and never reaches the store."""
    length = request.headers.get("content-length")
    if length and int(length) > state.max_upload_bytes:
        raise HTTPException(413, f"archive of {length} bytes is over {state.max_upload_bytes}")
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".tar", dir=state.uploads)
    path, total = Path(name), 0
    try:
        with os.fdopen(fd, "wb") as fh:
            stream = request.stream().__aiter__()
            while True:
                try:
                    chunk = await asyncio.wait_for(stream.__anext__(), UPLOAD_CHUNK_TIMEOUT_S)
                except StopAsyncIteration:
                    break
                except ClientDisconnect:
                    raise HTTPException(400, "the client went away mid-upload") from None
                total += len(chunk)
                if total > state.max_upload_bytes:
                    raise HTTPException(413, f"archive is over {state.max_upload_bytes} bytes")
                fh.write(chunk)
        if total == 0:
            raise InputError("empty upload: PUT the bundle archive (.tar) as the request body")
        return path
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _deploy(state: DaemonState, name: str, archive: Path) -> dict[str, Any]:
    from edgekit.selftest import selftest

    def check(path: Path) -> dict[str, Any]:
        result = selftest(str(path))
        return {"runtime": result.runtime, "passed": result.passed, "graphs": list(result.graphs)}

    with state.deploy_lock:
        return state.store.deploy(name, archive, check)


def _bench(state: DaemonState, body: dict[str, Any]) -> dict[str, Any]:
    from edgekit.bench import BenchConfig, bench_many, expand_targets

    name = body.get("bundle")
    if not isinstance(name, str):
        raise InputError("POST /bench needs {'bundle': NAME, 'runtimes': [...], 'config': {...}}")
    path = state.store.get(check_name(name)).path
    runtimes = body.get("runtimes") or []
    if not isinstance(runtimes, list) or not all(isinstance(r, str) for r in runtimes):
        raise InputError("'runtimes' must be a list of runtime names")
    config = BenchConfig.from_json(body.get("config") or {})
    targets = expand_targets([str(path)], runtimes)
    pause = bool(body.get("pause_pipelines", True)) and state.loop is not None
    with state.loop.paused() if pause else contextlib.nullcontext():  # type: ignore[union-attr]
        report = bench_many(targets, config, progress=False)
    report["pipelines_paused"] = pause
    for row in report["results"]:
        row["bundle_name"] = name
    return report


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise InputError(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InputError("request body must be a JSON object")
    return body


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _version() -> str:
    from edgekit import __version__

    return __version__
