"""Fan benchmarks and evaluations out over a Ray cluster: one Ray task per cell of the grid.

- ``bench_ray``: one task per BenchTarget (models x precisions x runtimes), each measured the way
  ``edgekit bench`` measures (a fresh ``python -m edgekit.bench.engine --worker`` subprocess on the
  task's node), plus one task per (device daemon, bundle) that runs the daemon's POST /bench.
  The report is the usual ``edgekit.bench.engine/1`` JSON, so the table and plot work unchanged.
- ``eval_ray``: one task per (torch reference | bundle) x runtime of a model's ``evaluate``, or
  one task per simulator seed of ``edgekit eval lens``.

``address`` is ``local`` (start a Ray instance on this machine) or anything ``ray.init`` takes
(``auto``, ``HOST:6379``, ``ray://HOST:10001``). Bundles reach the nodes through Ray's object
store (packed once here, unpacked once per node into the edgekit cache and integrity-checked),
so the nodes need no shared filesystem; ``$EDGEKIT_RAY_RUNTIME_ENV`` (JSON, or a JSON file) adds
a job runtime_env, e.g. ``{"py_modules": ["dist/edgekit-0.1.0-py3-none-any.whl"]}``.

A task whose worker dies (killed, out of memory, node lost) or that raises is retried
``max_retries`` times; one still failing is a failed row naming the error, never a missing row.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit.bench.engine import SCHEMA, BenchConfig, BenchTarget, failure_row
from edgekit.cluster.nodes import (
    LOCAL,
    ShippedBundle,
    local_bundle,
    node_facts,
    ray_cluster,
    require_ray,
    ship_bundle,
)
from edgekit.errors import EdgekitError, InputError


# ---- tasks (plain functions, made Ray tasks by ``_remote``) --------------------------------
def bench_cell(
    target: dict[str, Any], config: dict[str, Any], shipped: ShippedBundle | None
) -> dict:
    """One BenchTarget measured on this node in a fresh subprocess; returns {row, environment}."""
    from edgekit.bench.engine import measure
    from edgekit.bench.environment import environment

    started = time.perf_counter()
    local = BenchTarget(**target)
    if shipped is not None:
        local.bundle = local_bundle(shipped)
    row = measure(local, BenchConfig.from_json(config), isolate=True)
    return {"row": {**row, "ray": node_facts(started)}, "environment": environment()}


def daemon_cell(
    address: str, shipped: ShippedBundle, runtimes: list[str], config: dict, token: str
) -> dict[str, Any]:
    """Deploy the bundle to the daemon at ``address`` unless it serves it already, then run its
    POST /bench; returns the daemon's report. Raises on any failure (so Ray retries it)."""
    from edgekit.daemon.client import DaemonClient
    from edgekit.daemon.remote_bench import ensure_deployed

    started = time.perf_counter()
    with DaemonClient(address, token=token) as client:
        name, _ = ensure_deployed(client, local_bundle(shipped))
        report = client.bench(name, runtimes, config)
    for row in report["results"]:
        row.update(device=f"{address}/{row.get('device') or 'cpu'}", source=address)
        row.update(bundle=shipped.path, ray=node_facts(started))
    return report


def eval_cell(
    model: str, shipped: ShippedBundle | None, runtime: str | None, threads: int | None
) -> dict[str, Any]:
    """``card.evaluate`` of registered ``model`` on the torch reference (``shipped`` None) or
    on the bundle on ``runtime`` (RUNTIME[@DEVICE]): one row {model, target, runtime, status, error, metrics}."""
    from edgekit.registry import get_card

    started = time.perf_counter()
    row: dict[str, Any] = {"model": model, "bundle": shipped.path if shipped else None}
    row.update(target="torch-eager", runtime="torch" if shipped is None else runtime)
    try:
        card = get_card(model)
        if shipped is None:
            from edgekit.build.verify import reference_runners

            runners = reference_runners(card)
        else:
            from edgekit.bundle.format import Bundle
            from edgekit.runtimes import parse_runtime_spec

            bundle = Bundle.load(local_bundle(shipped))
            row.update(target=bundle.target, runtime=runtime or bundle.default_runtime())
            name, device = parse_runtime_spec(row["runtime"])  # RUNTIME[@DEVICE]
            runners = bundle.sessions(runtime=name, device=device, threads=threads)
        metrics = card.evaluate(runners)
        row.update(status="ok", error=None, metrics={k: float(v) for k, v in metrics.items()})
    except EdgekitError as exc:  # a deterministic refusal: report it, retrying cannot help
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}", metrics={})
    return {**row, "seconds": round(time.perf_counter() - started, 3), "ray": node_facts(started)}


def lens_seed_cell(
    seed: int,
    environments: list[str] | None,
    test_per_class: int,
    targets: tuple[tuple[str, ...], ...] | None = None,
    variant: str = "top1",
    calib_per_class: int = 2,
) -> dict:
    """The Lens benchmark for one simulator seed (``run_lens_bench`` on this node) over
    ``targets`` (default: lens.bench.BENCH_TARGETS), VisiT ``variant``, ``calib_per_class``
    calibration scenes per class."""
    from edgekit.lens.bench import BENCH_TARGETS, LensBenchConfig, run_lens_bench

    config = LensBenchConfig(
        seeds=(seed,),
        environments=tuple(environments) if environments else None,
        test_per_class=test_per_class,
        calib_per_class=calib_per_class,
        targets=targets or BENCH_TARGETS,
        variant=variant,
    )
    return run_lens_bench(config, progress=False)


def _remote(fn: Any, max_retries: int, num_cpus: float) -> Any:
    ray = require_ray("Ray fan-out")
    return ray.remote(fn).options(max_retries=max_retries, retry_exceptions=True, num_cpus=num_cpus)


def task_error(exc: BaseException, attempts: int) -> str:
    """ "Ray task failed after N attempt(s): Type: message" from a RayError (its cause if any)."""
    cause = getattr(exc, "cause", None)
    inner = cause if isinstance(cause, BaseException) else exc
    lines = str(inner).strip().splitlines()
    return (
        f"Ray task failed after {attempts} attempt(s): {type(inner).__name__}: "
        f"{lines[0] if lines else ''}"
    )


def gather(
    refs: Sequence[Any], names: Sequence[str], timeout_s: float, attempts: int, progress: bool
) -> tuple[list[Any], list[str | None]]:
    """(values, errors) of ``refs`` in order, under a progress bar; a task that raised after
    its retries, or is still running after ``timeout_s`` (then cancelled), has an error text."""
    import ray

    from edgekit.progress import step_progress

    pending = {ref: i for i, ref in enumerate(refs)}
    values: list[Any] = [None] * len(refs)
    errors: list[str | None] = [None] * len(refs)
    deadline = time.monotonic() + timeout_s
    with step_progress("ray tasks", len(refs), enabled=progress) as step:
        while pending and time.monotonic() < deadline:
            wait_s = min(5.0, max(0.0, deadline - time.monotonic()))
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for ref in done:
                i = pending.pop(ref)
                try:
                    values[i] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    errors[i] = task_error(exc, attempts)
                step(names[i])
    for ref, i in pending.items():
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
        errors[i] = f"timed out: still running after {timeout_s:g} s on the Ray cluster"
    return values, errors


# ---- bench ----------------------------------------------------------------------------------
def bench_ray(
    items: Sequence[str],
    runtimes: Sequence[str] = (),
    config: BenchConfig | None = None,
    address: str = LOCAL,
    devices: Sequence[str] = (),
    token: str | None = None,
    max_retries: int = 2,
    cpus_per_task: float | None = None,
    ship: bool | None = None,
    extra_results: Sequence[str | os.PathLike[str]] = (),
    progress: bool = True,
    runtime_env: str | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``edgekit bench ITEMS --ray ADDRESS``: the report (schema edgekit.bench.engine/1) of every target
    of ``items`` (bundle dirs x ``runtimes``, model names) measured as Ray tasks, plus every
    bundle on every device daemon in ``devices`` ("local" = the cluster's own rows; with no
    devices only those). Each row's ``device`` is "<hostname>/<device>" and ``ray`` says where
    and on which attempt it ran; ``device_environments`` maps each host/daemon to its
    environment. ``cpus_per_task`` (default: ``config.threads`` or 1) is what each task reserves:
    reserve a node's cores for uncontended numbers. ``ship`` (default: unless ``local``) sends
    bundles through the object store."""
    from edgekit.bench.engine import expand_targets
    from edgekit.bench.environment import environment
    from edgekit.bench.tables import load_report, merge_results
    from edgekit.daemon.client import parse_address, resolve_token

    require_ray(f"--ray {address}")
    config = config or BenchConfig()
    remote = [d for d in devices if d != LOCAL]
    targets = expand_targets(items, runtimes) if not devices or LOCAL in devices else []
    bundle_items = [i for i in items if (Path(i) / "bundle.json").is_file()]
    if remote and len(bundle_items) != len(items):
        others = sorted(set(items) - set(bundle_items))
        raise InputError(f"device daemons bench bundle directories, not {others}")
    for device in remote:
        parse_address(device)  # InputError for a malformed HOST:PORT, before any work
    tokens = {device: resolve_token(device, token) for device in remote}
    ship = address != LOCAL if ship is None else ship
    cpus = cpus_per_task or float(config.threads or 1)
    attempts = max_retries + 1
    started, created = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with ray_cluster(address, runtime_env) as cluster:
        cluster["connect_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        shipped = {b: ship_bundle(b, ship) for b in {t.bundle for t in targets if t.bundle}}
        shipped.update(
            {b: ship_bundle(b, ship) for b in bundle_items if remote and b not in shipped}
        )
        bench_task = _remote(bench_cell, max_retries, cpus)
        daemon_task = _remote(daemon_cell, max_retries, 0.1)
        refs = [
            bench_task.remote(vars(t), config.to_json(), shipped.get(t.bundle or ""))
            for t in targets
        ]
        cells = [(d, b) for d in remote for b in bundle_items]
        refs += [
            daemon_task.remote(d, shipped[b], list(runtimes), config.to_json(), tokens[d])
            for d, b in cells
        ]
        names = [t.describe() for t in targets] + [f"{b} on {d}" for d, b in cells]
        values, errors = gather(refs, names, config.timeout_s * attempts + 120, attempts, progress)
    rows: list[dict[str, Any]] = []
    envs: dict[str, Any] = {}
    split = len(targets)
    for target, value, error in zip(targets, values[:split], errors[:split], strict=True):
        if error is not None:
            rows.append(failure_row(target, config, error))
            continue
        row, host = value["row"], value["row"]["ray"]["hostname"]
        row.update(bundle=target.bundle, label=target.describe())
        row["device"] = f"{host}/{row.get('device') or config.device}"
        envs.setdefault(host, value["environment"])
        rows.append(row)
    for (device, bundle), value, error in zip(cells, values[split:], errors[split:], strict=True):
        if error is None:
            rows += value["results"]
            envs[device] = value.get("environment")
            continue
        failed = BenchTarget(bundle=bundle, label=f"{bundle} on {device}")
        rows.append({**failure_row(failed, config, error), "device": device, "source": device})
    report: dict[str, Any] = {"schema": SCHEMA, "created_utc": created}
    report.update(environment=environment(), config=config.to_json(), results=rows)
    report["device_environments"] = envs
    report["ray"] = _ray_facts(cluster, len(refs), rows, started, max_retries, cpus, ship)
    for path in extra_results:
        merge_results(report, load_report(path), source=str(path))
    return report


def _ray_facts(
    cluster: dict[str, Any],
    tasks: int,
    rows: list[dict[str, Any]],
    started: float,
    retries: int,
    cpus: float,
    ship: bool,
) -> dict[str, Any]:
    """The report's "ray" facts: cluster, tasks, wall time, rows measured on a retry
    ("retried") and failed rows."""
    attempts = [(r.get("ray") or {}).get("attempt") or 1 for r in rows]
    return {
        **cluster,
        "tasks": tasks,
        "wall_s": round(time.perf_counter() - started, 3),
        "retried": sum(1 for a in attempts if a > 1),
        "failed": sum(1 for r in rows if r.get("status") != "ok"),
        "max_retries": retries,
        "cpus_per_task": cpus,
        "shipped_bundles": ship,
    }


# ---- eval -----------------------------------------------------------------------------------
EVAL_SCHEMA = "edgekit.eval/1"


def eval_ray(
    model: str,
    bundles: Sequence[str | os.PathLike[str]] = (),
    runtimes: Sequence[str] = (),
    address: str = LOCAL,
    threads: int | None = None,
    include_torch: bool = True,
    max_retries: int = 2,
    cpus_per_task: float | None = None,
    ship: bool | None = None,
    progress: bool = True,
    runtime_env: str | Mapping[str, Any] | None = None,
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """``edgekit eval MODEL --ray ADDRESS``: registered ``model``'s task metrics on the torch
    reference (``include_torch``) and on every bundle x runtime (None = the bundle's default),
    one Ray task per cell. Returns {"schema": "edgekit.eval/1", model, environment, results:
    [{model, bundle, target, runtime, status, error, metrics, seconds, ray}], ray}."""
    from edgekit.bench.environment import environment
    from edgekit.registry import card_class

    require_ray(f"--ray {address}")
    card_class(model)  # InputError naming the known models
    for path in bundles:
        manifest = Path(path) / "bundle.json"
        try:
            owner = json.loads(manifest.read_text(encoding="utf-8"))["model"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path} is not a readable bundle directory ({exc})") from None
        if owner != model:
            raise InputError(f"bundle {path} holds model '{owner}', not '{model}'")
    cells: list[tuple[str | None, str | None]] = [(None, None)] if include_torch else []
    cells += [(str(b), r) for b in bundles for r in (list(runtimes) or [None])]
    if not cells:
        raise InputError("nothing to evaluate: give bundles or keep the torch reference")
    ship = address != LOCAL if ship is None else ship
    cpus = cpus_per_task or float(threads or 1)
    started, created = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with ray_cluster(address, runtime_env) as cluster:
        cluster["connect_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        shipped = {b: ship_bundle(b, ship) for b in {b for b, _ in cells if b}}
        task = _remote(eval_cell, max_retries, cpus)
        refs = [task.remote(model, shipped.get(b or ""), r, threads) for b, r in cells]
        names = [f"{b or 'torch'} on {r or 'default runtime'}" for b, r in cells]
        values, errors = gather(refs, names, timeout_s, max_retries + 1, progress)
    rows = []
    for (bundle, runtime), value, error in zip(cells, values, errors, strict=True):
        if error is None:
            rows.append(value)
            continue
        row = {"model": model, "bundle": bundle, "target": None if bundle else "torch-eager"}
        row.update(runtime=runtime or (None if bundle else "torch"), metrics={})
        rows.append({**row, "status": "failed", "error": error})
    report: dict[str, Any] = {"schema": EVAL_SCHEMA, "created_utc": created, "model": model}
    report.update(environment=environment(), results=rows)
    report["ray"] = _ray_facts(cluster, len(refs), rows, started, max_retries, cpus, ship)
    return report


def eval_lens_ray(
    seeds: int = 3,
    environments: Sequence[str] | None = None,
    test_per_class: int = 4,
    address: str = LOCAL,
    max_retries: int = 2,
    progress: bool = True,
    runtime_env: str | Mapping[str, Any] | None = None,
    timeout_s: float = 7200.0,
    targets: tuple[tuple[str, ...], ...] | None = None,
    variant: str = "top1",
    calib_per_class: int = 2,
) -> dict[str, Any]:
    """``edgekit eval lens --ray ADDRESS``: one Ray task per simulator seed over ``targets``
    (default: lens.bench.BENCH_TARGETS) with VisiT ``variant`` and ``calib_per_class``
    calibration scenes per class, merged into one
    ``edgekit.lens.controller-bench/1`` report (runs in seed order; VisiT timings of the first seed's
    node). A seed that still fails after its retries is listed in ``failed_seeds`` and the
    notes. Each node builds (trains, exports) the Lens bundles once into its own cache."""
    from edgekit.lens.bench import BENCH_TARGETS, bench_bundles
    from edgekit.lens.prior import pool_priors

    require_ray(f"--ray {address}")
    targets = targets or BENCH_TARGETS
    if address == LOCAL:  # build once here, so concurrent tasks only read the cache
        bench_bundles(targets)
    started = time.perf_counter()
    with ray_cluster(address, runtime_env) as cluster:
        task = _remote(lens_seed_cell, max_retries, 1.0)
        envs = list(environments) if environments else None
        args = (envs, test_per_class, targets, variant, calib_per_class)
        refs = [task.remote(seed, *args) for seed in range(seeds)]
        names = [f"seed {seed}" for seed in range(seeds)]
        values, errors = gather(refs, names, timeout_s, max_retries + 1, progress)
    done = [v for v in values if v is not None]
    if not done:
        raise EdgekitError(f"every Lens seed failed on the Ray cluster: {errors[0]}")
    report = done[0]
    for name, entry in report["models"].items():
        entry["runs"] = [run for v in done for run in v["models"][name]["runs"]]
        entry["prior"] = pool_priors([run["prior"] for run in entry["runs"]], name).to_json()
    report["config"]["seeds"] = [s for s in range(seeds) if errors[s] is None]
    report["failed_seeds"] = [{"seed": s, "error": e} for s, e in enumerate(errors) if e]
    report["notes"] = list(report.get("notes") or [])
    report["notes"] += [f"seed {f['seed']} failed: {f['error']}" for f in report["failed_seeds"]]
    report["elapsed_s"] = time.perf_counter() - started
    report["ray"] = {**cluster, "tasks": seeds, "failed": len(report["failed_seeds"])}
    return report
