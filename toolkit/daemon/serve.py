"""``edgekit daemon``: open the camera, start the pipelines, serve the HTTP API until stopped.

State (deployed bundles, the token, partial uploads) lives in ``--state-dir``: default
``$EDGEKIT_STATE`` or ``~/.local/state/edgekit/daemon``. The token is generated on first start
and stored with 0600 permissions; the server binds to loopback unless told otherwise.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
from pathlib import Path
from typing import Any

from edgekit.errors import InputError

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


def deploy_local(store: Any, name: str, bundle_dir: str | os.PathLike[str]) -> str:
    """Deploy ``bundle_dir`` as ``name`` unless the serving version has identical files;
    returns "deployed" or "unchanged". Same path as an HTTP deploy: pack, unpack, self-test."""
    import json

    from edgekit.archive import pack
    from edgekit.bundle import Bundle
    from edgekit.selftest import selftest

    bundle = Bundle.load(bundle_dir)
    current = store.current_path(name)
    if current is not None:
        served = json.loads((current / "bundle.json").read_text())
        if served.get("files") == bundle.manifest.get("files"):
            return "unchanged"
    with tempfile.TemporaryDirectory() as tmp:
        archive = pack(bundle.path, Path(tmp) / "bundle.tar")
        store.deploy(name, archive, lambda p: selftest(str(p)).passed)
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
    lens_prior: str | os.PathLike[str] | None = None,
) -> None:
    """Run the daemon in this process until SIGINT/SIGTERM or ``duration_s`` seconds."""
    import uvicorn

    from edgekit.daemon.app import DaemonState, create_app
    from edgekit.daemon.loop import FrameLoop
    from edgekit.daemon.metrics import DaemonMetrics
    from edgekit.daemon.pipelines import parse_pipelines
    from edgekit.daemon.store import BundleStore, check_name
    from edgekit.devices.camera import open_camera

    state = Path(state_dir) if state_dir else default_state_dir()
    token = load_or_create_token(state)
    store = BundleStore(state / "bundles")
    removed = store.recover()
    for name, path in (bundles or {}).items():
        print(f"bundle {check_name(name)}: {deploy_local(store, name, path)} from {path}")
    from edgekit.devices.profiles import detect_profile, get_profile

    device_profile = detect_profile() if profile == "auto" else get_profile(profile)
    pipes = parse_pipelines(pipelines)
    with open_camera(camera) as cam:  # fail fast on a bad spec or a missing device
        attach_lens_prior(pipes, lens_prior, cam)
    metrics = DaemonMetrics()
    loop = FrameLoop(
        lambda: open_camera(camera), pipes, store, metrics, fps, max_frames, device_profile
    )
    daemon_state = DaemonState(store, metrics, loop, token, state, camera, profile=device_profile)
    if max_upload_mb is not None:
        daemon_state.max_upload_bytes = int(max_upload_mb * 2**20)
    app = create_app(daemon_state)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    server = uvicorn.Server(config)
    if duration_s:
        timer = threading.Timer(duration_s, lambda: setattr(server, "should_exit", True))
        timer.daemon = True
        timer.start()
    print(
        f"edgekit daemon on http://{host}:{port}  camera={camera}  "
        f"pipelines={','.join(p.name for p in pipes) or 'none'}  profile={device_profile.name}  "
        f"state={state}"
        + (f"  (removed {len(removed)} leftovers of an interrupted deploy)" if removed else ""),
        flush=True,
    )
    server.run()  # the app's lifespan starts and stops the frame loop


def attach_lens_prior(pipes: list[Any], path: str | os.PathLike[str] | None, camera: Any) -> None:
    """Give every Lens pipeline the calibrated setting prior at ``path`` (lens_prior JSON),
    checked against ``camera``'s Lens grid before the daemon starts (InputError otherwise);
    the pipelines then score with the prior's VisiT variant (top-1 without a prior)."""
    if path is None:
        return
    from edgekit.daemon.pipelines import LensPipeline
    from edgekit.lens import LensController, camera_grid
    from edgekit.lens_prior import SettingPrior

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
