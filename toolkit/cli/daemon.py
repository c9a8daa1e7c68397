"""CLI commands for devices: ``edgekit daemon``, ``edgekit deploy`` and ``edgekit rollback``
(module-level functions; ``register`` adds them to the app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli.common import console, handle_errors, renamed

TargetArg = Annotated[
    list[str] | None, typer.Option("--target", help="device daemon HOST:PORT (repeat)")
]
TokenArg = Annotated[
    str | None, typer.Option(help="daemon token (default $EDGEKIT_TOKEN or the local file)")
]
OldToArg = Annotated[list[str] | None, typer.Option("--to", hidden=True)]  # now --target


@handle_errors
def daemon_cmd(
    camera: Annotated[
        str,
        typer.Option(
            help="sim[:size=128,lighting=dim-room] | v4l2:/dev/video0 | picamera2 | "
            "gstreamer:0 | file:clip.mp4"
        ),
    ] = "sim",
    pipeline: Annotated[
        str,
        typer.Option(help="pipelines to run, kind[:bundle] comma separated: lens, classify"),
    ] = "lens",
    host: Annotated[
        str, typer.Option(help="address to bind (loopback unless you open it on purpose)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8700,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="deployed bundles + token (default $EDGEKIT_STATE or ~/.local/state)"),
    ] = None,
    bundle: Annotated[
        list[str] | None,
        typer.Option(help="deploy NAME=BUNDLE_DIR at start (skipped when unchanged; repeat)"),
    ] = None,
    fps: Annotated[float, typer.Option(help="camera frame-rate cap (0 = uncapped)")] = 15.0,
    duration: Annotated[
        float | None,
        typer.Option(help="stop after this many seconds (default: run until Ctrl-C)"),
    ] = None,
    profile: Annotated[
        str,
        typer.Option(help="device profile that picks the runtimes (auto = detect)"),
    ] = "auto",
    max_upload_mb: Annotated[
        float | None, typer.Option(help="largest bundle archive accepted (default 2048 MB)")
    ] = None,
    max_unpacked_mb: Annotated[
        float | None,
        typer.Option(
            help="most bytes a deploy may unpack to, counted while decompressing "
            "(default 4096 MB; a gzip bomb stops here)"
        ),
    ] = None,
    lens_prior: Annotated[
        Path | None,
        typer.Option(
            help="a calibrated Lens setting prior (JSON from `edgekit eval lens`) for the "
            "lens pipelines, which then score with its VisiT variant"
        ),
    ] = None,
    rollback_after: Annotated[
        float,
        typer.Option(
            help="seconds a pipeline may fail on every frame after a deploy before the "
            "daemon rolls the bundle back to the previous version (0 = never)"
        ),
    ] = 10.0,
    header_timeout: Annotated[
        float,
        typer.Option(help="seconds a connection may take to send a request head"),
    ] = 5.0,
    max_connections: Annotated[
        int,
        typer.Option(help="open connections (beyond: the longest-idle one is closed)"),
    ] = 4096,
    max_requests: Annotated[
        int, typer.Option(help="requests in flight (beyond: 503; /health always answers)")
    ] = 64,
    ssl_certfile: Annotated[
        Path | None, typer.Option(help="serve HTTPS with this PEM certificate (+ key)")
    ] = None,
    ssl_keyfile: Annotated[
        Path | None, typer.Option(help="the PEM private key of --ssl-certfile")
    ] = None,
) -> None:
    """Run the on-device daemon: camera, pipelines, HTTP API and live page."""
    from edgekit.daemon.http_protocol import HttpLimits
    from edgekit.daemon.serve import serve
    from edgekit.errors import InputError

    initial = {}
    for item in bundle or []:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InputError(f"--bundle {item!r} must be NAME=BUNDLE_DIR")
        initial[name] = path
    serve(
        camera, pipeline, host, port, state_dir, initial, fps, duration,
        profile=profile, max_upload_mb=max_upload_mb, max_unpacked_mb=max_unpacked_mb,
        lens_prior=lens_prior,
        rollback_after_s=rollback_after,
        http_limits=HttpLimits(header_timeout, max_connections=max_connections,
                               max_requests=max_requests),
        ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
    )  # fmt: skip


@handle_errors
def deploy_cmd(
    bundle_dir: Annotated[
        str,
        typer.Argument(
            help="bundle directory, or a registered model: exported for each device's profile"
        ),
    ],
    target: TargetArg = None,
    name: Annotated[
        str | None, typer.Option(help="deployed name (default: the bundle's model name)")
    ] = None,
    token: TokenArg = None,
    to: OldToArg = None,
) -> None:
    """Deploy a bundle to device daemons: checksums verified and self-tested there, then
    swapped in atomically (the old bundle keeps serving on any failure)."""
    from edgekit.daemon.client import DaemonClient

    for address in daemon_targets("deploy", target, to):
        with DaemonClient(address, token=token) as client:
            path = bundle_dir
            if not Path(bundle_dir).is_dir():
                path, target = bundle_for_device(bundle_dir, client.health().get("profile"))
                console().print(f"{address}: profile picks {target} for {bundle_dir}")
            out = client.deploy(path, name)
        check = out.get("check") or {}
        console().print(
            f"{address}: deployed {out['name']} version {out['version']} "
            f"(self-test passed on {check.get('runtime', '?')})"
        )


@handle_errors
def rollback_cmd(
    name: Annotated[str, typer.Argument(help="deployed bundle name")],
    target: TargetArg = None,
    token: TokenArg = None,
    to: OldToArg = None,
) -> None:
    """Put the daemons' previous version of a bundle back in service."""
    from edgekit.daemon.client import DaemonClient

    for address in daemon_targets("rollback", target, to):
        with DaemonClient(address, token=token) as client:
            out = client.rollback(name)
        console().print(f"{address}: {out['name']} is back on version {out['version']}")


def daemon_targets(command: str, target: list[str] | None, to: list[str] | None) -> list[str]:
    """The daemons ``--target`` names (the old ``--to`` too, with its deprecation line)."""
    from edgekit.errors import InputError

    addresses = renamed(command, "--target", target, "--to", to)
    if not addresses:
        raise InputError(f"{command} needs the device daemon: --target HOST:PORT (repeat)")
    return addresses


def register(app: typer.Typer, *_: Any) -> None:
    """Add the daemon, deploy and rollback commands to ``app`` (further arguments, the error
    handler and console older callers pass, are not needed: the commands import their own)."""
    app.command("daemon")(daemon_cmd)
    app.command("deploy")(deploy_cmd)
    app.command("rollback")(rollback_cmd)


def bundle_for_device(model: str, profile: dict[str, Any] | None) -> tuple[str, str]:
    """(bundle dir, target) of registered ``model`` for a device's profile: its first default
    target this machine can export (built once, cached). InputError if none can be built."""
    from edgekit.build.cache import cached_bundles
    from edgekit.cli.demo import target_available
    from edgekit.errors import InputError
    from edgekit.registry import names

    if model not in names():
        raise InputError(
            f"'{model}' is neither a bundle directory nor a model ({', '.join(names())})"
        )
    targets = list((profile or {}).get("targets") or ["onnx-fp32"])
    reasons = {t: target_available(t) for t in targets}
    usable = [t for t in targets if reasons[t] is None]
    if not usable:
        why = "; ".join(f"{t}: {r}" for t, r in reasons.items())
        raise InputError(f"none of the device profile's targets can be built here ({why})")
    bundle = cached_bundles(((model, usable[0]),))[f"{model} {usable[0]}"]
    return str(bundle.path), usable[0]
