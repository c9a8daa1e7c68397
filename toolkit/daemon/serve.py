"""``edgekit daemon``: open the camera, start the pipelines, serve the HTTP API until stopped.

State (deployed bundles, the token, partial uploads) lives in ``--state-dir``: default
``$EDGEKIT_STATE`` or ``~/.local/state/edgekit/daemon``. The token is generated on first start
and stored with 0600 permissions; the server binds to loopback unless told otherwise, and warns
at start when it does not (the frame, /score and /health are open to anyone who can reach it,
and without TLS the token travels in clear). HTTP limits (header timeout, connection and request
caps) are ``edgekit.daemon.http_protocol.HttpLimits``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.errors import InputError

if TYPE_CHECKING:
    from edgekit.daemon.http_protocol import HttpLimits

STATE_ENV = "EDGEKIT_STATE"
DEFAULT_PORT = 8700


def default_state_dir() -> Path:
    env = os.environ.get(STATE_ENV)
    return (
        Path(env).expanduser() if env else Path.home() / ".local" / "state" / "edgekit" / "daemon"
    )


def load_or_create_token(state_dir: Path) -> str:
    """The daemon's token: read ``state_dir/token``, or create it (0600, never overwritten)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "token"
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
        except FileExistsError:  # another daemon created it first: use theirs
            pass
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise InputError(f"{path} holds no usable token; delete it to generate a new one")
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return token


def deploy_local(
    store: Any, name: str, bundle_dir: str | os.PathLike[str], pipelines: Sequence[Any] = ()
) -> str:
    """Deploy ``bundle_dir`` as ``name`` unless the serving version has identical files;
    returns "deployed" or "unchanged". Same path as an HTTP deploy: pack, unpack, fit check
    against ``pipelines``, self-test."""
    import json

    from edgekit.bundle.archive import pack
    from edgekit.bundle.format import Bundle
    from edgekit.daemon.deploy import deploy_checked

    bundle = Bundle.load(bundle_dir)
    current = store.current_path(name)
    if current is not None:
        served = json.loads((current / "bundle.json").read_text())
        if served.get("files") == bundle.manifest.get("files"):
            return "unchanged"
    with tempfile.TemporaryDirectory() as tmp:
        archive = pack(bundle.path, Path(tmp) / "bundle.tar")
        deploy_checked(store, name, archive, pipelines)
    return "deployed"


def serve(
    camera: str = "sim",
    pipelines: str = "lens",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    state_dir: str | os.PathLike[str] | None = None,
    bundles: dict[str, str] | None = None,
    fps: float = 15.0,
    duration_s: float | None = None,
    max_frames: int | None = None,
    log_level: str = "warning",
    profile: str = "auto",
    max_upload_mb: float | None = None,
    max_unpacked_mb: float | None = None,
    lens_prior: str | os.PathLike[str] | None = None,
    rollback_after_s: float = 10.0,
    http_limits: HttpLimits | None = None,
    ssl_certfile: str | os.PathLike[str] | None = None,
    ssl_keyfile: str | os.PathLike[str] | None = None,
) -> None:
    """Run the daemon in this process until SIGINT/SIGTERM or ``duration_s`` seconds.

    ``rollback_after_s``: a swap after which a pipeline fails on every frame for this long is
    rolled back by the daemon (<= 0: never; ``edgekit.daemon.rollback``). ``http_limits``: an
    ``HttpLimits`` (default: its defaults). ``ssl_certfile``/``ssl_keyfile``: serve HTTPS with
    this PEM certificate and key (both or neither)."""
    import uvicorn

    from edgekit.daemon.app import DaemonState, create_app
    from edgekit.daemon.guard import configure_logging
    from edgekit.daemon.http_protocol import (
        HttpLimits,
        connection_cap,
        protocol_class,
        raise_fd_limit,
    )
    from edgekit.daemon.loop import FrameLoop
    from edgekit.daemon.metrics import DaemonMetrics
    from edgekit.daemon.pipelines import parse_pipelines
    from edgekit.daemon.store import BundleStore, check_name
    from edgekit.devices.camera import open_camera

    tls = check_tls(ssl_certfile, ssl_keyfile)
    limits = connection_cap(http_limits or HttpLimits(), raise_fd_limit())
    configure_logging(log_level)
    state = Path(state_dir) if state_dir else default_state_dir()
    token = load_or_create_token(state)
    unpacked_cap = int(max_unpacked_mb * 2**20) if max_unpacked_mb is not None else None
    if unpacked_cap is not None and unpacked_cap <= 0:
        raise InputError(f"--max-unpacked-mb must be > 0, got {max_unpacked_mb}")
    store = BundleStore(state / "bundles", max_unpacked_bytes=unpacked_cap)
    removed = store.recover()
    pipes = parse_pipelines(pipelines)
    for name, path in (bundles or {}).items():
        deployed = deploy_local(store, name, path, pipes)
        print(f"bundle {check_name(name)}: {deployed} from {path}")
    from edgekit.devices.profiles import detect_profile, get_profile

    device_profile = detect_profile() if profile == "auto" else get_profile(profile)
    with open_camera(camera) as cam:  # fail fast on a bad spec or a missing device
        attach_lens_prior(pipes, lens_prior, cam)
    metrics = DaemonMetrics()
    loop = FrameLoop(
        lambda: open_camera(camera), pipes, store, metrics, fps, max_frames, device_profile,
        rollback_after_s=rollback_after_s,
    )  # fmt: skip
    daemon_state = DaemonState(store, metrics, loop, token, state, camera, profile=device_profile)
    if max_upload_mb is not None:
        daemon_state.max_upload_bytes = int(max_upload_mb * 2**20)
    daemon_state.max_requests = limits.max_requests
    app = create_app(daemon_state)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        http=protocol_class(limits), timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_head_bytes,
        ssl_certfile=tls[0] if tls else None, ssl_keyfile=tls[1] if tls else None,
    )  # fmt: skip
    server = uvicorn.Server(config)
    if duration_s:
        timer = threading.Timer(duration_s, lambda: setattr(server, "should_exit", True))
        timer.daemon = True
        timer.start()
    warning = exposure_warning(host, tls is not None)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(
        f"edgekit daemon on {'https' if tls else 'http'}://{host}:{port}  camera={camera}  "
        f"pipelines={','.join(p.name for p in pipes) or 'none'}  profile={device_profile.name}  "
        f"state={state}"
        + (f"  (removed {len(removed)} leftovers of an interrupted deploy)" if removed else ""),
        flush=True,
    )
    server.run()  # the app's lifespan starts and stops the frame loop


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or "localhost"."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost: may resolve anywhere
        return False


def exposure_warning(host: str, tls: bool) -> str | None:
    """The warning printed at start when the daemon binds beyond loopback (None on loopback)."""
    if is_loopback(host):
        return None
    lines = [
        f"WARNING: edgekit daemon listens on {host!r}, beyond this machine: anyone who can reach "
        "it can read /frame.png, /health, /metrics and /pipelines, and run /score (no token).",
    ]
    if not tls:
        lines.append(
            "WARNING: without TLS the bearer token of deploy/rollback/bench/prompt travels in "
            "clear. Put TLS in front: start with --ssl-certfile CERT.pem --ssl-keyfile KEY.pem, "
            f"or keep --host 127.0.0.1 behind a reverse proxy (Caddy: `caddy reverse-proxy "
            f"--from device.example --to 127.0.0.1:{DEFAULT_PORT}`; nginx: proxy_pass), or "
            "reach it through an SSH tunnel or a VPN."
        )
    return "\n".join(lines)


def check_tls(
    certfile: str | os.PathLike[str] | None, keyfile: str | os.PathLike[str] | None
) -> tuple[str, str] | None:
    """(cert, key) paths for HTTPS, None for plain HTTP; InputError when only one is given or a
    file is missing or unreadable."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        raise InputError("--ssl-certfile and --ssl-keyfile go together: give both PEM files")
    for what, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile)):
        if not Path(path).is_file() or not os.access(path, os.R_OK):
            raise InputError(f"{what} {path}: no such readable file")
    return str(certfile), str(keyfile)


def attach_lens_prior(pipes: list[Any], path: str | os.PathLike[str] | None, camera: Any) -> None:
    """Give every Lens pipeline the calibrated setting prior at ``path`` (lens.prior JSON),
    checked against ``camera``'s Lens grid before the daemon starts (InputError otherwise);
    the pipelines then score with the prior's VisiT variant (top-1 without a prior)."""
    if path is None:
        return
    from edgekit.daemon.pipelines import LensPipeline
    from edgekit.lens.controller import LensController, camera_grid
    from edgekit.lens.prior import SettingPrior

    lens = [p for p in pipes if isinstance(p, LensPipeline)]
    if not lens:
        raise InputError("--lens-prior needs a lens pipeline (e.g. --pipeline lens,classify)")
    prior = SettingPrior.load(path)
    # the pipeline's controller, built now: a prior of another grid fails here; the pipeline
    # scores with the prior's VisiT variant
    grid = camera_grid(camera.capabilities())
    LensController(None, camera, grid, prior=prior, variant=prior.variant)
    for pipe in lens:
        pipe.prior = prior
