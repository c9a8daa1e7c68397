"""``edgekit serve BUNDLE --ray``: bundles behind Ray Serve with the daemon's scoring contract.

HTTP, the same JSON as the daemon (toolkit/daemon/app.py), so ``DaemonClient.score`` works:

- ``POST /score`` ``{"bundle": NAME, "texts": [...]}`` or ``{"bundle": NAME, "pairs": [[a, b],
  ...]}`` for text bundles (TextScorer: embeddings, cosine, label probabilities), and
  ``{"bundle": NAME, "inputs": {input: nested list}, "graph": optional}`` for any bundle (its
  graph's outputs as lists; ``logits`` become ``probs`` and ``label`` with the bundle's labels).
  The answer is the scorer's JSON plus ``bundle`` and ``latency_ms``; errors are
  ``{"error", "detail"}`` with 400 (bad input), 404 (no such bundle here), 422 (bad bundle).
- ``GET /health``: status, uptime, the bundles served, and per bundle its runtime, batching
  and the answering replica's counters.

One deployment holds every bundle of the app (Bundle.session / TextScorer, as on the device);
replicas autoscale between ``min_replicas`` and ``max_replicas`` on ongoing requests. Requests
are batched with ``serve.batch`` along the batch axis when every input and output of the graph
has a dynamic batch axis first and batching cannot change an answer (not with dynamic int8
quantization, whose scales are computed over the whole batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edgekit.cluster.nodes import ShippedBundle, local_bundle, require_ray
from edgekit.errors import BundleError, EdgekitError, InputError, SelfTestError

DEFAULT_PORT = 8000
APP_NAME = "edgekit"


@dataclass
class ReplicaPolicy:
    """Replicas between ``min_replicas`` and ``max_replicas`` (equal = a fixed count), scaled
    to keep ``target_ongoing_requests`` per replica; each reserves ``cpus`` CPUs. The delays
    (seconds a load must last before scaling up or down) default to Ray Serve's (None)."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0
    cpus: float = 1.0
    upscale_delay_s: float | None = None
    downscale_delay_s: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas or self.cpus <= 0:
            raise InputError(f"replicas need 1 <= min <= max and cpus > 0 (got {self})")

    def deployment_options(self, max_ongoing: int) -> dict[str, Any]:
        options: dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.cpus},
            "max_ongoing_requests": max_ongoing,
        }
        if self.min_replicas == self.max_replicas:
            return {**options, "num_replicas": self.min_replicas}
        scaling = {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas}
        scaling["target_ongoing_requests"] = self.target_ongoing_requests
        for key in ("upscale_delay_s", "downscale_delay_s"):
            if getattr(self, key) is not None:
                scaling[key] = getattr(self, key)
        return {**options, "autoscaling_config": scaling}


@dataclass
class BatchPolicy:
    """``serve.batch`` settings: up to ``max_batch_size`` requests, waiting ``wait_ms``."""

    enabled: bool = True
    max_batch_size: int = 16
    wait_ms: float = 2.0

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.wait_ms < 0:
            raise InputError(f"batching needs max_batch_size >= 1, wait_ms >= 0 (got {self})")


def batching_blocker(entry: Any) -> str | None:
    """Why requests to graph ``entry`` cannot be batched, or None when they can."""
    from edgekit.bench.engine import is_batch_axis

    for spec in [*entry.inputs, *entry.outputs]:
        if not spec.shape or not is_batch_axis(spec.shape[0]):
            return f"'{spec.name}' has no dynamic batch axis first ({spec.describe()})"
    int8 = (entry.details or {}).get("int8") or {}
    if int8.get("int8_mode") == "dynamic" or "DynamicQuantizeLinear" in (
        int8.get("quant_ops") or {}
    ):
        return "dynamic int8 quantization: its scales depend on every request in the batch"
    return None


def split_rows(out: Mapping[str, Any], counts: Sequence[int]) -> list[dict[str, Any]]:
    """Split a batched JSON answer per request: every list of sum(counts) items is cut."""
    total, parts = sum(counts), []
    start = 0
    for n in counts:
        parts.append({k: v[start : start + n] if _per_row(v, total) else v for k, v in out.items()})
        start += n
    return parts


def _per_row(value: Any, total: int) -> bool:
    return isinstance(value, list) and len(value) == total


class ServedBundle:
    """One bundle inside a replica: its scorer or sessions, and its batch queue."""

    def __init__(self, path: str, runtime: str | None, threads: int | None, batching: BatchPolicy):
        from edgekit.bundle.format import Bundle

        self.bundle = Bundle.load(path)
        self.runtime = runtime or self.bundle.default_runtime()
        self.threads = threads
        self.scorer = None
        self.sessions: dict[str, Any] = {}
        if "tokenizer" in (self.bundle.manifest.get("preprocessing") or {}):
            from edgekit.text_scorer import TextScorer

            self.scorer = TextScorer(self.bundle, runtime=self.runtime, threads=threads)
        else:  # load now: a graph that cannot load fails the deploy, not the first request
            for name in self.bundle.graphs:
                self.session(name)
        self.stats = {"requests": 0, "batches": 0, "batched_requests": 0, "largest_batch": 0}
        self.blockers = {
            name: batching_blocker(entry) if batching.enabled else "turned off"
            for name, entry in self.bundle.graphs.items()
        }
        first = self.blockers[self.bundle.graph().name]
        self.batching = {**asdict(batching), "enabled": first is None, "reason": first}
        if len(self.blockers) > 1:
            self.batching["graphs"] = {k: v or "batched" for k, v in self.blockers.items()}
        self.queue = None
        if any(b is None for b in self.blockers.values()):
            from ray import serve

            wait_s = batching.wait_ms / 1e3
            batch = serve.batch(max_batch_size=batching.max_batch_size, batch_wait_timeout_s=wait_s)
            self.queue = batch(self.run_batch)

    def session(self, graph: str | None) -> Any:
        entry = self.bundle.graph(graph)
        if entry.name not in self.sessions:
            self.sessions[entry.name] = self.bundle.session(
                entry.name, self.runtime, threads=self.threads
            )
        return self.sessions[entry.name]

    def parse(self, body: Mapping[str, Any]) -> tuple[tuple, Any]:
        """A request as (batch key, payload); InputError when it is malformed."""
        from edgekit.tensorspec import check_feeds
        from edgekit.text_scorer import check_pairs, check_texts

        if body.get("inputs") is not None:
            entry = self.bundle.graph(body.get("graph"))
            raw = body["inputs"]
            if not isinstance(raw, Mapping):
                raise InputError("'inputs' must map input names to nested lists")
            feeds = {}
            for spec in (s for s in entry.inputs if s.name in raw):
                try:
                    feeds[spec.name] = np.asarray(raw.get(spec.name), dtype=spec.dtype)
                except (TypeError, ValueError) as exc:
                    raise InputError(
                        f"input '{spec.name}' is not a {spec.describe()}: {exc}"
                    ) from None
            feeds = check_feeds(entry.inputs, {**raw, **feeds})
            key = ("inputs", entry.name, tuple((k, v.shape[1:]) for k, v in feeds.items()))
            return key, feeds
        if self.scorer is None:
            graph = self.bundle.graph()
            raise InputError(
                f"bundle {self.bundle.model} is not a text model: its preprocessing names no "
                f"tokenizer; send 'inputs' for graph '{graph.name}' "
                f"({', '.join(s.describe() for s in graph.inputs)})"
            )
        if body.get("pairs") is not None:
            if self.scorer.task not in ("sentence-embedding", "moderation-severity"):
                raise InputError(
                    "pairs need a sentence-embedding or a query+response moderation bundle, "
                    f"not task '{self.scorer.task}'"
                )
            moderation = self.scorer.task == "moderation-severity"
            return ("pairs",), check_pairs(body["pairs"], allow_empty_first=moderation)
        if body.get("texts") is None:
            raise InputError("give 'texts' (a list of strings) or 'pairs' ([[a, b], ...])")
        return ("texts",), check_texts(body["texts"])

    def run(self, key: tuple, payloads: list[Any]) -> list[dict[str, Any]]:
        """Answers for requests sharing ``key``, run as one batch."""
        from edgekit.text_scorer import MAX_TEXTS, postprocess

        counts = [len(next(iter(p.values()))) if key[0] == "inputs" else len(p) for p in payloads]
        if key[0] == "inputs":
            feeds = {k: np.concatenate([p[k] for p in payloads]) for k in payloads[0]}
            outputs = self.session(key[1]).run(feeds)
            out = {"model": self.bundle.model, **postprocess(outputs, self.bundle.manifest)}
            return split_rows(out, counts)
        limit = MAX_TEXTS // 2 if key[0] == "pairs" else MAX_TEXTS
        if len(payloads) > 1 and sum(counts) > limit:
            return [self.run(key, [p])[0] for p in payloads]
        flat = [item for p in payloads for item in p]
        return split_rows(self.scorer.score(**{key[0]: flat}), counts)

    async def run_batch(self, requests: list[tuple[tuple, Any]]) -> list[dict[str, Any]]:
        """``serve.batch`` handler: group the queued requests by key, one run per group."""
        self.stats["batches"] += 1
        self.stats["batched_requests"] += len(requests)
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(requests))
        groups: dict[tuple, list[int]] = {}
        for i, (key, _) in enumerate(requests):
            groups.setdefault(key, []).append(i)
        answers: list[Any] = [None] * len(requests)
        for key, index in groups.items():
            payloads = [requests[i][1] for i in index]
            for i, answer in zip(
                index, await asyncio.to_thread(self.run, key, payloads), strict=True
            ):
                answers[i] = answer
        return answers

    async def score(self, body: Mapping[str, Any]) -> dict[str, Any]:
        key, payload = self.parse(body)
        self.stats["requests"] += 1
        graph = key[1] if key[0] == "inputs" else self.bundle.graph().name
        if self.queue is not None and self.blockers[graph] is None:
            return await self.queue((key, payload))
        return (await asyncio.to_thread(self.run, key, [payload]))[0]

    def describe(self) -> dict[str, Any]:
        b = self.bundle
        facts = {"model": b.model, "target": b.target, "task": b.manifest.get("task")}
        return {**facts, "runtime": self.runtime, "batching": self.batching, "stats": self.stats}


class BundleReplica:
    """The Ray Serve deployment: every bundle of the app, answering /score and /health."""

    def __init__(
        self,
        bundles: dict[str, ShippedBundle],
        runtime: str | None,
        threads: int | None,
        batching: dict[str, Any],
    ) -> None:
        policy = BatchPolicy(**batching)
        self.served = {
            name: ServedBundle(local_bundle(shipped), runtime, threads, policy)
            for name, shipped in bundles.items()
        }
        self.started = time.time()

    def health(self) -> dict[str, Any]:
        import socket

        from edgekit import __version__

        return {
            "status": "ok",
            "uptime_s": round(time.time() - self.started, 3),
            "bundles": sorted(self.served),
            "served": {name: s.describe() for name, s in self.served.items()},
            "replica": {"hostname": socket.gethostname(), "pid": os.getpid()},
            "backend": "ray-serve",
            "version": __version__,
        }

    async def score(self, body: Mapping[str, Any]) -> dict[str, Any]:
        from edgekit.daemon.store import BundleNotDeployed, check_name

        name = body.get("bundle")
        if not isinstance(name, str):
            raise InputError("POST /score needs {'bundle': NAME, 'texts': [...]} or 'pairs'")
        if check_name(name) not in self.served:
            served = ", ".join(sorted(self.served))
            raise BundleNotDeployed(f"no bundle named '{name}' is served here (serving: {served})")
        start = time.perf_counter()
        out = await self.served[name].score(body)
        return {**out, "bundle": name, "latency_ms": round((time.perf_counter() - start) * 1e3, 3)}

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        from edgekit.daemon.store import BundleNotDeployed

        path = request.url.path.rstrip("/")
        try:
            if request.method == "GET" and path.endswith("/health"):
                return JSONResponse(self.health())
            if request.method == "POST" and path.endswith("/score"):
                try:
                    body = await request.json()
                except ValueError as exc:
                    raise InputError(f"request body is not JSON: {exc}") from None
                if not isinstance(body, dict):
                    raise InputError("request body must be a JSON object")
                return JSONResponse(await self.score(body))
            return JSONResponse({"detail": "Not Found: use POST /score or GET /health"}, 404)
        except EdgekitError as exc:
            code = 422 if isinstance(exc, (BundleError, SelfTestError)) else 400
            code = 404 if isinstance(exc, BundleNotDeployed) else code
            return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, code)


def serve_bundles(
    bundles: Mapping[str, str],
    runtime: str | None = None,
    threads: int | None = None,
    replicas: ReplicaPolicy | None = None,
    batching: BatchPolicy | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    app_name: str = APP_NAME,
    route_prefix: str = "/",
    ship: bool = False,
) -> dict[str, Any]:
    """Deploy ``bundles`` ({name: dir}) as Ray Serve app ``app_name`` on the connected cluster
    and wait until it answers; returns {url, app, bundles, replicas, batching}. Bundles are
    integrity-checked here first; ``ship`` sends them through the object store (for nodes
    that do not share this filesystem). ``threads`` defaults to the replica's CPUs."""
    require_ray("edgekit serve --ray", serve=True)
    from ray import serve
    from ray.serve.exceptions import RayServeException

    from edgekit.bundle.format import Bundle
    from edgekit.cluster.nodes import ship_bundle

    if not bundles:
        raise InputError("serve needs at least one bundle")
    replicas, batching = replicas or ReplicaPolicy(), batching or BatchPolicy()
    for path in bundles.values():
        Bundle.load(path)  # integrity here; runtime problems surface from the replicas
    shipped = {name: ship_bundle(path, ship) for name, path in bundles.items()}
    threads = threads or max(1, int(replicas.cpus))
    max_ongoing = max(8, 2 * batching.max_batch_size)
    deployment = serve.deployment(
        BundleReplica,
        name="bundles",
        max_constructor_retry_count=3,
        **replicas.deployment_options(max_ongoing),
    )
    serve.start(http_options={"host": host, "port": port})
    app = deployment.bind(shipped, runtime, threads, asdict(batching))
    try:
        serve.run(app, name=app_name, route_prefix=route_prefix, blocking=False)
    except (RayServeException, RuntimeError) as exc:  # the replicas could not start: say why
        reason = _deploy_error(app_name, exc)
        with contextlib.suppress(Exception):
            serve.delete(app_name)  # leave no half-deployed app on the cluster
        raise EdgekitError(f"Ray Serve could not start '{app_name}': {reason}") from None
    listening = _serve_http_address() or (host, port)
    note = None
    if listening != (host, port):
        note = f"Ray Serve already listened on {listening[0]}:{listening[1]}; kept that address"
    return {
        "url": f"http://{listening[0]}:{listening[1]}{route_prefix.rstrip('/')}",
        "note": note,
        "app": app_name,
        "bundles": dict(bundles),
        "replicas": asdict(replicas),
        "batching": asdict(batching),
        "threads": threads,
    }


def _deploy_error(app_name: str, exc: BaseException) -> str:
    """The last line of the replicas' own error (Serve's status message), else of ``exc``."""
    from ray import serve

    text = str(exc)
    try:
        app = serve.status().applications[app_name]
        text = "\n".join(d.message for d in app.deployments.values() if d.message) or text
    except Exception:  # the status is a nicety: keep the exception's own text
        pass
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _serve_http_address() -> tuple[str, int] | None:
    """(host, port) the cluster's Serve proxies listen on: Serve keeps the address it was
    first started with, whatever a later ``serve.start`` asks. None if it cannot be read."""
    try:  # no public getter in Ray Serve: read the controller client's config
        from ray.serve.context import _get_global_client

        config = _get_global_client().http_config
        return str(config.host), int(config.port)
    except Exception:
        return None


def stop_serving(app_name: str = APP_NAME) -> None:
    """Delete Serve app ``app_name`` (its replicas stop)."""
    from ray import serve

    serve.delete(app_name)
