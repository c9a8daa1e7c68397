"""The device half of ``edgekit demo``: a real daemon on the simulated camera, deployed to over
loopback HTTP, its pipelines run for a bounded time, then benched through it and stopped.

Writes under ``out``: rendered frames (PNG, with what the pipelines found drawn in), the
pipelines' results (JSON lines), the cross-device bench report (JSON + PNG) and the daemon log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DEMO_CAMERA = "sim:size=96,tour_every=40"  # a new scene and lighting every 40 captures


def start_daemon(
    state: Path, pipelines: str, log: Path, fps: float = 15.0, camera: str = DEMO_CAMERA
) -> tuple[Any, str]:
    """Start ``edgekit daemon`` on a free loopback port; returns (process, "127.0.0.1:PORT")."""
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "edgekit.cli.app", "daemon", "--state-dir", str(state)]
    cmd += ["--port", str(port), "--pipeline", pipelines, "--fps", str(fps), "--camera", camera]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EdgekitError(f"the daemon exited at start; see {log}:\n{log.read_text()[-1500:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0)
            return proc, f"127.0.0.1:{port}"
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise EdgekitError(f"the daemon did not answer within 120 s; see {log}")


def stop_daemon(proc: Any) -> int:
    """SIGTERM, wait for the graceful shutdown; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def run_daemon_loop(
    deploy: dict[str, str],
    pipelines: str,
    out: Path,
    console: Any,
    seconds: float = 20.0,
    bench_bundles: tuple[str, ...] = (),
    texts: dict[str, list[list[str]]] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """Start a daemon, deploy ``deploy`` {name: bundle dir}, run ``pipelines`` for ``seconds``
    saving rendered frames, score ``texts`` {bundle: pairs}, bench ``bench_bundles`` here and
    on the daemon, stop it. Returns a summary (also written to ``out/daemon-summary.json``)."""
    import httpx

    from edgekit.bench.engine import BenchConfig
    from edgekit.bench.plots import plot_report
    from edgekit.bench.tables import print_report, rows_summary, write_report
    from edgekit.daemon.client import DaemonClient
    from edgekit.daemon.remote_bench import bench_devices, print_devices
    from edgekit.progress import step_progress

    local_report = None
    if bench_bundles:  # measured here first, while no daemon competes for the CPU
        from edgekit.bench.engine import bench_many, expand_targets

        config = BenchConfig(warmup=5, iterations=50, threads=threads)
        local_report = bench_many(expand_targets(bench_bundles), config)
    state = out / "daemon-state"
    frames_dir = out / "daemon-frames"
    frames_dir.mkdir(parents=True, exist_ok=True)
    for old in frames_dir.glob("*.png"):
        old.unlink()
    proc, address = start_daemon(state, pipelines, out / "daemon.log")
    summary: dict[str, Any] = {"address": address, "pipelines": pipelines, "deployed": {}}
    try:
        client = DaemonClient(address, state_dir=state)
        for name, path in deploy.items():
            answer = client.deploy(path, name)
            summary["deployed"][name] = answer["version"]
            console.print(
                f"deployed {name} to {address}: self-test passed on {answer['check']['runtime']}"
            )
        results_log = out / "daemon-results.jsonl"
        saved = 0
        with (
            open(results_log, "w", encoding="utf-8") as log,
            step_progress("daemon", int(seconds)) as step,
        ):
            start = time.monotonic()
            for tick in range(int(seconds)):
                step(f"{tick + 1} s")
                time.sleep(max(0.0, start + tick + 1 - time.monotonic()))
                png = httpx.get(f"http://{address}/frame.png", timeout=10)
                if png.status_code == 200:
                    (frames_dir / f"frame-{tick:03d}.png").write_bytes(png.content)
                    saved += 1
                for name in client.health()["pipelines"]:
                    log.write(json.dumps(client.latest(name)) + "\n")
        health = client.health()
        summary.update(health=health, frames_saved=saved, metrics=client.metrics_text())
        scores = {b: client.score(b, pairs=p) for b, p in (texts or {}).items()}
        summary["scores"] = scores
        for b, s in scores.items():
            console.print(f"/score {b}: " + ", ".join(f"{c:.3f}" for c in s.get("cosine", [])))
        print_pipeline_table(health, summary["metrics"], console)
        if local_report is not None:
            report = bench_devices(
                bench_bundles, [address], (), config, local_report, state_dir=state
            )
            summary["bench_failed"] = rows_summary(report["results"])["failed"]
            print_report(report, console, title="edgekit bench: here vs through the daemon")
            print_devices(report, console)
            summary["bench"] = [
                str(write_report(report, out / "devices-bench.json")),
                str(plot_report(report, out / "devices-bench.png")),
            ]
        client.close()
    finally:
        summary["exit_status"] = stop_daemon(proc)
    stopped = "edgekit daemon stopped" in (out / "daemon.log").read_text()
    summary["stopped_cleanly"] = stopped
    write_report(summary, out / "daemon-summary.json")
    console.print(
        f"daemon stopped {'cleanly' if stopped else 'NOT cleanly'}; frames: {frames_dir}/ "
        f"({saved} PNG), results: {results_log}, log: {out / 'daemon.log'}"
    )
    return summary


def print_pipeline_table(health: dict[str, Any], metrics_text: str, console: Any) -> None:
    """Per pipeline: state, frames processed / dropped / failed, mean capture-to-decision."""
    from rich.table import Table

    from edgekit.daemon.metrics import parse_prometheus

    m = parse_prometheus(metrics_text)
    table = Table(title=f"daemon: {health['frames']} camera frames, status {health['status']}")
    for col in ("pipeline", "state", "processed", "dropped", "errors", "capture→result ms"):
        table.add_column(col)
    for name, p in health["pipelines"].items():
        total = m.get(f'edgekit_capture_to_decision_seconds_sum{{pipeline="{name}"}}', 0.0)
        count = m.get(f'edgekit_capture_to_decision_seconds_count{{pipeline="{name}"}}', 0.0)
        mean = f"{1e3 * total / count:.1f}" if count else "-"
        row = (name, p["state"], str(p["processed"]), str(p["dropped"]), str(p["errors"]), mean)
        table.add_row(*row)
    console.print(table)
