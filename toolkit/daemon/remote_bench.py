"""The cross-device matrix: the same bundles benched on several devices' daemons (and here),
merged into one report with each device's recorded environment.

For every device: the bundle is deployed unless the device already serves identical files
(same ``content_id``), then the device runs ``POST /bench`` itself — the numbers are that
device's, measured the same way ``edgekit bench`` measures locally.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from edgekit.bench.engine import SCHEMA, BenchConfig
from edgekit.errors import EdgekitError


def ensure_deployed(client: Any, bundle_dir: str) -> tuple[str, str]:
    """Deploy ``bundle_dir`` to ``client``'s daemon unless it already serves the same files.
    Returns (deployed name, "deployed" | "unchanged")."""
    from edgekit.bundle.format import Bundle
    from edgekit.daemon.client import DaemonError
    from edgekit.daemon.store import content_id

    bundle = Bundle.load(bundle_dir)
    name = f"{bundle.model}-{bundle.target}".replace("/", "-")[:64]
    try:
        served = client._call("GET", f"/bundles/{name}")
        if served.get("content_id") == content_id(bundle.manifest):
            return name, "unchanged"
    except DaemonError:
        pass
    client.deploy(bundle.path, name)
    return name, "deployed"


def bench_devices(
    bundles: Sequence[str],
    devices: Sequence[str],
    runtimes: Sequence[str] = (),
    config: BenchConfig | None = None,
    local: bool | dict[str, Any] = False,
    token: str | None = None,
    progress: bool = True,
    state_dir: Any = None,
) -> dict[str, Any]:
    """One report (schema edgekit.bench.engine/1) with a row per bundle x runtime x device.

    ``devices``: daemon addresses HOST:PORT; ``local``: also bench here (or a bench report
    measured here before, e.g. while no daemon competed for the CPU). Each row's ``device``
    names where it ran ("HOST:PORT/cpu"); ``device_environments`` maps each device to the
    environment its daemon recorded. A device that cannot be reached or fails gives failed
    rows naming the reason, never a silent gap.
    """
    from edgekit.bench.engine import bench_many, expand_targets
    from edgekit.bench.environment import environment
    from edgekit.daemon.client import DaemonClient
    from edgekit.progress import step_progress

    config = config or BenchConfig()
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": environment(),
        "config": config.to_json(),
        "results": [],
        "device_environments": {},
    }
    if local:
        here = (
            local
            if isinstance(local, dict)
            else bench_many(expand_targets(bundles, runtimes), config, progress=progress)
        )
        for row in here["results"]:
            row["device"] = f"local/{row.get('device') or 'cpu'}"
        report["results"] += here["results"]
        report["device_environments"]["local"] = here["environment"]
    with step_progress("remote bench", len(devices) * len(bundles), enabled=progress) as step:
        for address in devices:
            client = DaemonClient(address, token=token, state_dir=state_dir)
            for bundle_dir in bundles:
                step(f"{address} {bundle_dir}")
                try:
                    name, _ = ensure_deployed(client, bundle_dir)
                    remote = client.bench(name, list(runtimes), config.to_json())
                except EdgekitError as exc:
                    report["results"].append(_failed_row(address, bundle_dir, exc))
                    continue
                for row in remote["results"]:
                    row["device"] = f"{address}/{row.get('device') or 'cpu'}"
                    row["source"] = address
                report["results"] += remote["results"]
                report["device_environments"][address] = remote.get("environment")
            client.close()
    return report


def _failed_row(address: str, bundle_dir: str, exc: BaseException) -> dict[str, Any]:
    import json
    from pathlib import Path

    try:
        model = json.loads((Path(bundle_dir) / "bundle.json").read_text())["model"]
    except (OSError, ValueError, KeyError):
        model = Path(bundle_dir).name
    return {
        "label": f"{bundle_dir} on {address}",
        "model": model,
        "device": address,
        "status": "failed",
        "error": f"{type(exc).__name__}: {exc}",
    }


def print_devices(report: dict[str, Any], console: Any) -> None:
    """One line per device: where it ran (CPU, cores, OS, runtime versions it recorded)."""
    from rich.markup import escape

    for device, env in (report.get("device_environments") or {}).items():
        env = env or {}
        cpu = env.get("cpu") or {}
        cores = (cpu.get("cores") or {}).get("physical", "?")
        system = (env.get("os") or {}).get("platform", "")
        host = env.get("hostname", "?")
        console.print(
            escape(f"{device}: host {host} · {cpu.get('model', '?')} · {cores} cores · {system}"),
            highlight=False,
        )
