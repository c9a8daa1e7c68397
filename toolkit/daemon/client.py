"""Talk to a device's daemon: deploy a bundle, roll back, bench remotely, read health/metrics.

The token comes from ``token=``, else ``$EDGEKIT_TOKEN``, else (for a daemon on this machine)
the local state folder's ``token`` file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from edgekit.errors import EdgekitError, InputError, SelfTestError

TOKEN_ENV = "EDGEKIT_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class DaemonError(EdgekitError):
    """The daemon answered with an error (its message is included)."""


def parse_address(address: str) -> str:
    """``HOST:PORT`` (or a full http:// URL) -> base URL; InputError for anything else."""
    if address.startswith(("http://", "https://")):
        return address.rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"device address {address!r} must be HOST:PORT, e.g. 127.0.0.1:8700")
    return f"http://{host}:{int(port)}"


def resolve_token(address: str, token: str | None = None, state_dir: Path | None = None) -> str:
    """The token to send to ``address`` (see module doc); InputError when none is found."""
    from edgekit.daemon.serve import default_state_dir

    if token:
        return token
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    host = parse_address(address).split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    path = (state_dir or default_state_dir()) / "token"
    if host in LOOPBACK and path.is_file():
        return path.read_text(encoding="utf-8").strip()
    raise InputError(
        f"no token for {address}: pass --token, set {TOKEN_ENV}, or run on the device where "
        f"the daemon keeps it in {path}"
    )


class DaemonClient:
    """A client for one daemon. ``timeout_s`` bounds each request (bench may take minutes)."""

    def __init__(
        self,
        address: str,
        token: str | None = None,
        timeout_s: float = 600.0,
        state_dir: Path | None = None,
    ) -> None:
        import httpx

        self.address = address
        self.base = parse_address(address)
        self._token = token
        self._state_dir = state_dir
        self.http = httpx.Client(base_url=self.base, timeout=timeout_s)

    def _auth(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {resolve_token(self.address, self._token, self._state_dir)}"
        }

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DaemonError(f"cannot reach the daemon at {self.base}: {exc}") from exc
        if response.status_code >= 400:
            try:
                body = response.json()
                detail = body.get("detail", body)
                kind = body.get("error", "")
            except ValueError:
                detail, kind = response.text[:500], ""
            cls = SelfTestError if kind == "SelfTestError" else DaemonError
            raise cls(f"{self.base}{path}: HTTP {response.status_code}: {detail}")
        ctype = response.headers.get("content-type", "")
        return response.json() if ctype.startswith("application/json") else response.content

    # ---- read -------------------------------------------------------------------------------
    def health(self, detail: bool = False) -> dict[str, Any]:
        """The daemon's /health; ``detail``: with the token, full pipeline statuses (their
        tracebacks) and the state folder, which callers without it do not see."""
        if detail:
            return self._call("GET", "/health", params={"detail": 1}, headers=self._auth())
        return self._call("GET", "/health")

    def metrics_text(self) -> str:
        return self._call("GET", "/metrics").decode()

    def latest(self, pipeline: str) -> dict[str, Any]:
        return self._call("GET", f"/pipelines/{pipeline}/latest")

    def bundles(self) -> list[dict[str, Any]]:
        return self._call("GET", "/bundles")["bundles"]

    # ---- write ------------------------------------------------------------------------------
    def deploy(self, bundle_dir: str | os.PathLike[str], name: str | None = None) -> dict:
        """Pack ``bundle_dir`` and PUT it as ``name`` (default: the bundle's model name); the
        daemon verifies checksums, self-tests, then swaps. Returns the daemon's answer."""
        from edgekit.bundle.archive import pack
        from edgekit.bundle.format import Bundle

        bundle = Bundle.load(bundle_dir)
        name = name or bundle.model
        with tempfile.TemporaryDirectory() as tmp:
            archive = pack(bundle.path, Path(tmp) / "bundle.tar")
            data = archive.read_bytes()
        headers = {**self._auth(), "X-Edgekit-Sha256": hashlib.sha256(data).hexdigest()}
        headers["Content-Type"] = "application/x-tar"
        return self._call("PUT", f"/bundles/{name}", content=data, headers=headers)

    def rollback(self, name: str) -> dict[str, Any]:
        return self._call("POST", f"/bundles/{name}/rollback", headers=self._auth())

    def bench(
        self, name: str, runtimes: list[str] | None = None, config: dict | None = None
    ) -> dict:
        """The device's own bench report (schema edgekit.bench.engine/1) of deployed bundle ``name``."""
        body = {"bundle": name, "runtimes": runtimes or [], "config": config or {}}
        return self._call("POST", "/bench", json=body, headers=self._auth())

    def score(self, name: str, texts: list[str] | None = None, pairs: list | None = None) -> dict:
        body: dict[str, Any] = {"bundle": name}
        body.update({"texts": texts} if texts is not None else {"pairs": pairs})
        return self._call("POST", "/score", json=body)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
