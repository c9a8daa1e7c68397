"""Start and stop a real ``edgekit daemon`` process on a free loopback port (test helper)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonProcess:
    """``edgekit daemon`` as a subprocess; ``url``, ``address``, ``token``, ``client()``."""

    def __init__(
        self, state_dir: Path, *args: str, port: int | None = None, python: str | None = None
    ) -> None:
        self.state_dir = Path(state_dir)
        self.python = python or sys.executable  # another venv's python: e.g. the lean install
        self.port = port or free_port()
        self.args = args
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.log = self.state_dir.parent / f"daemon-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> DaemonProcess:
        cmd = [self.python, "-m", "edgekit.cli.app", "daemon", "--state-dir", str(self.state_dir)]
        cmd += ["--port", str(self.port), *self.args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        with open(self.log, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"daemon did not answer in {timeout} s:\n{self.log.read_text()[-3000:]}")

    @property
    def token(self) -> str:
        return (self.state_dir / "token").read_text().strip()

    def client(self):  # noqa: ANN201 - DaemonClient
        from edgekit.daemon.client import DaemonClient

        return DaemonClient(self.address, token=self.token)

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=10.0).json()

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "condition") -> dict:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        health = {}
        while time.monotonic() < deadline:
            health = self.health()
            if predicate(health):
                return health
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last health: {health}")

    def kill(self) -> None:
        """SIGKILL: a crash, no clean-up."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM and wait: the clean shutdown path. Returns the exit status (uvicorn
        re-raises the signal after its graceful shutdown, so a clean stop is -SIGTERM)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode if self.proc else None

    def stop_clean(self) -> str:
        """``stop`` and assert a clean exit whose log has no traceback; returns the log."""
        assert self.stop() in (0, -15), self.log.read_text()[-2000:]
        log = self.log.read_text()
        assert "edgekit daemon stopped" in log and "Traceback" not in log, log[-3000:]
        return log
