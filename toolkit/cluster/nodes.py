"""Ray clusters and the bundles on their nodes, for edgekit's fan-out (cluster.fanout) and Serve
deployments (cluster.serve).

- ``require_ray``: the ``ray`` module, or one clear error naming the ``edgekit[ray]`` extra.
- ``ray_cluster``: connect (``local`` starts a Ray instance on this machine; anything
  ``ray.init`` takes otherwise) with the job runtime_env of ``$EDGEKIT_RAY_RUNTIME_ENV``.
- ``ship_bundle`` / ``local_bundle``: a bundle packed once here into Ray's object store and
  unpacked once per node into the edgekit cache, integrity-checked (no shared filesystem).
- ``node_facts``: where a task ran (node, pid, seconds), for the reports.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.errors import InputError, MissingDependencyError

RUNTIME_ENV_VAR = "EDGEKIT_RAY_RUNTIME_ENV"
LOCAL = "local"


# ---- connecting ---------------------------------------------------------------------------
def require_ray(what: str, serve: bool = False) -> Any:
    """The ``ray`` module, or MissingDependencyError naming the ``edgekit[ray]`` extra."""
    try:
        import ray

        if serve:
            import ray.serve  # noqa: F401
    except ImportError as exc:
        package = "ray[serve]" if serve else "ray"
        raise MissingDependencyError(what, package, extra="ray", detail=f"({exc})") from None
    return ray


def runtime_env_from(value: str | Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """A Ray runtime_env from ``value`` (a dict, JSON text or a JSON file), else from
    ``$EDGEKIT_RAY_RUNTIME_ENV``; None when neither is set. InputError if it is not a JSON object."""
    value = os.environ.get(RUNTIME_ENV_VAR) if value is None else value
    if not value:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    text = value
    with contextlib.suppress(OSError):
        if not value.lstrip().startswith("{") and Path(value).is_file():
            text = Path(value).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(
            f"Ray runtime_env {value!r} is neither JSON nor a JSON file: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"Ray runtime_env must be a JSON object, got {type(data).__name__}")
    return data


@contextlib.contextmanager
def ray_cluster(
    address: str = LOCAL,
    runtime_env: str | Mapping[str, Any] | None = None,
    num_cpus: int | None = None,
    quiet: bool = True,
) -> Iterator[dict[str, Any]]:
    """Connect to (or, for ``local``, start) a Ray cluster; yields its facts {address, nodes,
    cpus}. Reuses a connection already open in this process; shuts down only what it started."""
    ray = require_ray(f"--ray {address}")
    started = False
    if not ray.is_initialized():
        options: dict[str, Any] = dict(runtime_env=runtime_env_from(runtime_env))
        if quiet:
            options.update(logging_level=logging.WARNING, log_to_driver=False)
        try:
            if address == LOCAL:
                # address="local" always starts a new instance, never joins one found here
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **options)
            else:
                ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            hint = ""
            if address != LOCAL and not os.environ.get("RAY_AUTH_MODE"):
                hint = (
                    " (a cluster with token authentication needs RAY_AUTH_MODE=token here and "
                    "the cluster's token in ~/.ray/auth_token)"
                )
            raise InputError(
                f"cannot connect to the Ray cluster at {address!r}: {exc}{hint}"
            ) from None
        started = True
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = ray.cluster_resources().get("CPU", 0)
        yield {"address": address, "nodes": len(nodes), "cpus": cpus}
    finally:
        if started:
            ray.shutdown()


# ---- bundles on the nodes -----------------------------------------------------------------
@dataclass(frozen=True)
class ShippedBundle:
    """A bundle handed to tasks: ``path`` here, and (when shipped) its .tar bytes in the object
    store under ``archive`` with ``key`` = its content id."""

    path: str
    key: str
    archive: Any = None


def ship_bundle(path: str | os.PathLike[str], ship: bool) -> ShippedBundle:
    """Integrity-check the bundle at ``path``; when ``ship``, put its archive in the object store."""
    import tempfile

    from edgekit.bundle.archive import pack
    from edgekit.bundle.format import Bundle
    from edgekit.daemon.store import content_id

    bundle = Bundle.load(path)
    key = content_id(bundle.manifest)[:16]
    if not ship:
        return ShippedBundle(str(path), key)
    ray = require_ray("shipping bundles to Ray nodes")
    with tempfile.TemporaryDirectory(prefix="edgekit-ship-") as tmp:
        data = pack(bundle.path, Path(tmp) / "bundle.tar").read_bytes()
    return ShippedBundle(str(path), key, ray.put(data))


def local_bundle(shipped: ShippedBundle) -> str:
    """On a node: the directory of ``shipped`` (unpacked once per node into the edgekit cache
    ``ray-bundles/<content id>``, under a lock, integrity-checked by ``archive.unpack``)."""
    if shipped.archive is None:
        return shipped.path
    import fcntl
    import tempfile

    import ray

    from edgekit.bundle.archive import unpack
    from edgekit.bundle.format import Bundle
    from edgekit.cache import cache_dir
    from edgekit.errors import BundleError

    root = cache_dir("ray-bundles")
    dest = root / shipped.key
    with open(root / f".{shipped.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(BundleError):
            return str(Bundle.load(dest).path)
        with tempfile.TemporaryDirectory(prefix="ship-", dir=root) as tmp:
            archive = Path(tmp) / "bundle.tar"
            archive.write_bytes(ray.get(shipped.archive))
            return str(unpack(archive, dest).path)


def node_facts(started: float) -> dict[str, Any]:
    """Where a task ran: node IP, hostname, pid, attempt (1 = first try), seconds."""
    import socket

    import ray

    attempt = None
    with contextlib.suppress(Exception):  # a private call: the attempt is a nicety, not a need
        core = ray._private.worker.global_worker.core_worker
        attempt = int(core.get_current_task_attempt_number()) + 1
    return {
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "attempt": attempt,
        "task_s": round(time.perf_counter() - started, 3),
    }
