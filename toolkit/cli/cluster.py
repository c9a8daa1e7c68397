"""CLI for Ray: ``edgekit serve BUNDLE --ray ADDRESS`` (a module-level command that ``register``
adds to the app, with the blocking ``run_serve`` behind it), and what ``edgekit bench ... --ray
ADDRESS`` and ``edgekit eval MODEL --ray ADDRESS`` call from cli.py: fan out, then print the
table, hosts and Ray summary.

Nothing here imports Ray at module level: without the ``edgekit[ray]`` extra these commands
answer with one MissingDependencyError line (exit code 2).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from edgekit.cli.common import console as cli_console
from edgekit.cli.common import deprecated, handle_errors, renamed

RAY_ADDRESS_HELP = (
    "Ray cluster ADDRESS: 'local' (start one here), auto, HOST:6379 or ray://HOST:10001"
)


class ServeCommand(TyperCommand):
    """``edgekit serve``'s parser: the old bare ``--ray`` flag (last, or before another option
    or a bundle directory) reads as ``--ray ""``, which serve_cmd takes as ``--ray local``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, bare_ray_flag(args))


def bare_ray_flag(args: list[str]) -> list[str]:
    """``args`` with each bare ``--ray`` (no ADDRESS after it) given the empty address."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        out.append(arg)
        if arg == "--ray":
            nxt = args[i + 1] if i + 1 < len(args) else None
            bundle = nxt is not None and (Path(nxt.partition("=")[2] or nxt) / "bundle.json")
            if nxt is None or nxt.startswith("-") or (bundle and bundle.is_file()):
                out.append("")
    return out


@handle_errors
def serve_cmd(
    bundles: Annotated[
        list[str],
        typer.Argument(help="bundle directories; NAME=DIR sets the name POST /score takes"),
    ],
    ray: Annotated[str | None, typer.Option("--ray", help=RAY_ADDRESS_HELP)] = None,
    host: Annotated[str, typer.Option(help="HTTP address the Serve proxies bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    runtime: Annotated[
        str | None,
        typer.Option(
            help="RUNTIME\\[@cpu] the replicas load the bundles with (default: the format's)"
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="intra-op threads (default: the replica's CPUs)")
    ] = None,
    min_replicas: Annotated[int, typer.Option(help="fewest replicas")] = 1,
    max_replicas: Annotated[int, typer.Option(help="most replicas (autoscaling)")] = 1,
    target_ongoing: Annotated[
        float, typer.Option(help="autoscaling: ongoing requests per replica")
    ] = 2.0,
    upscale_delay: Annotated[
        float | None,
        typer.Option(help="autoscaling: seconds a load must last to add replicas"),
    ] = None,
    cpus_per_replica: Annotated[float, typer.Option(help="CPUs each replica reserves")] = 1.0,
    batching: Annotated[bool, typer.Option(help="batch requests where the graph allows it")] = True,
    max_batch_size: Annotated[int, typer.Option(help="most requests per batch")] = 16,
    batch_wait_ms: Annotated[float, typer.Option(help="longest wait to fill a batch")] = 2.0,
    duration: Annotated[
        float | None, typer.Option(help="stop after this many seconds (default: Ctrl-C)")
    ] = None,
    ray_env: Annotated[
        str | None,
        typer.Option(help="Ray runtime_env JSON or file (default $EDGEKIT_RAY_RUNTIME_ENV)"),
    ] = None,
    address: Annotated[str | None, typer.Option("--address", hidden=True)] = None,
) -> None:
    """Serve bundles over HTTP on Ray Serve with the daemon's contract (POST /score,
    GET /health): autoscaling replicas, requests batched where the model allows."""
    from edgekit.cluster.nodes import require_ray
    from edgekit.errors import InputError
    from edgekit.runtimes import parse_runtime_spec

    bare = ray == ""  # the old flag: --ray [--address ADDRESS]
    if bare:
        deprecated("--ray without an ADDRESS", "serve", "--ray local (or --ray ADDRESS)")
    ray = renamed("serve", "--ray ADDRESS", None if bare else ray, "--address", address)
    if ray is None and not bare:
        raise InputError(
            "edgekit serve runs on Ray Serve: add --ray local (or --ray ADDRESS for a cluster); "
            "on one device, `edgekit daemon --bundle NAME=DIR` serves the same POST /score"
        )
    ray = ray or "local"
    name, device = parse_runtime_spec(runtime) if runtime else (None, None)
    if device not in (None, "cpu"):
        raise InputError(
            f"serve's replicas compute on cpu; --runtime takes RUNTIME[@cpu], not {runtime}"
        )
    require_ray("edgekit serve --ray", serve=True)
    from edgekit.cluster.serve import BatchPolicy, ReplicaPolicy

    run_serve(
        parse_bundle_args(bundles),
        address=ray,
        duration_s=duration,
        console=cli_console(),
        runtime_env=ray_env,
        runtime=name,
        threads=threads,
        replicas=ReplicaPolicy(
            min_replicas, max_replicas, target_ongoing, cpus_per_replica, upscale_delay
        ),
        batching=BatchPolicy(batching, max_batch_size, batch_wait_ms),
        host=host,
        port=port,
    )


def register(app: typer.Typer, *_: Any) -> None:
    """Add ``serve`` to ``app`` (further arguments, the error handler and console older callers
    pass, are not needed: the command imports its own)."""
    app.command("serve", cls=ServeCommand)(serve_cmd)


# ---- serve --ray ADDRESS -------------------------------------------------------------------------
def parse_bundle_args(items: Sequence[str]) -> dict[str, str]:
    """``NAME=DIR`` or ``DIR`` (named after its model) -> {name: dir}; InputError on clashes."""
    import json

    from edgekit.daemon.store import check_name
    from edgekit.errors import InputError

    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            name, path = "", item
        manifest = Path(path) / "bundle.json"
        if not manifest.is_file():
            raise InputError(f"{path!r} is not a bundle directory (no bundle.json)")
        name = name or str(json.loads(manifest.read_text(encoding="utf-8")).get("model") or "")
        if check_name(name) in out:
            raise InputError(f"two bundles are named '{name}'; name them NAME=DIR")
        out[name] = path
    return out


def run_serve(
    bundles: Mapping[str, str],
    address: str = "local",
    duration_s: float | None = None,
    console: Any = None,
    runtime_env: str | Mapping[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """``edgekit serve BUNDLE --ray ADDRESS``: connect (``local`` starts Ray here), serve, print the
    URL, block until Ctrl-C or ``duration_s``, then delete the app. Options as serve_bundles."""
    from edgekit.cluster.nodes import ray_cluster
    from edgekit.cluster.serve import serve_bundles, stop_serving

    with ray_cluster(address, runtime_env, quiet=False) as cluster:
        options.setdefault("ship", address != "local")
        info = serve_bundles(bundles, **options)
        if console is not None:
            names = ", ".join(info["bundles"])
            console.print(
                f"serving {names} at {info['url']}/score (GET {info['url']}/health) on Ray "
                f"{address}: {cluster['nodes']} node(s), {cluster['cpus']:g} CPUs; Ctrl-C stops",
                highlight=False,
            )
            if info["note"]:
                console.print(f"note: {info['note']}", highlight=False)
        deadline = None if duration_s is None else time.monotonic() + duration_s
        try:
            with _sigterm_as_interrupt():
                while deadline is None or time.monotonic() < deadline:
                    left = 0.5 if deadline is None else deadline - time.monotonic()
                    time.sleep(min(0.5, max(0.0, left)))
        except KeyboardInterrupt:
            pass
        finally:
            stop_serving(info["app"])
    return info


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (systemd, docker stop) stops serving like Ctrl-C: the app is deleted cleanly."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---- bench --ray ------------------------------------------------------------------------------
def bench_on_ray(
    items: Sequence[str],
    runtimes: Sequence[str],
    config: Any,
    address: str,
    devices: Sequence[str] = (),
    token: str | None = None,
    extra_results: Sequence[str | os.PathLike[str]] = (),
    console: Any = None,
) -> dict[str, Any]:
    """``edgekit bench ... --ray ADDRESS``: fan out, print the table, hosts and Ray summary;
    returns the report (cli.py writes --out / --plot and sets the exit code as usual)."""
    from edgekit.bench.tables import print_report
    from edgekit.cluster.fanout import bench_ray
    from edgekit.daemon.remote_bench import print_devices

    report = bench_ray(
        items, runtimes, config, address, devices, token, extra_results=extra_results
    )
    print_report(report, console, title="edgekit bench on Ray")
    if console is not None:
        print_devices(report, console)
        print_ray_summary(report, console)
    return report


# ---- eval --ray -------------------------------------------------------------------------------
def eval_on_ray(
    model: str,
    bundles: Sequence[str | os.PathLike[str]],
    runtimes: Sequence[str],
    address: str,
    out: Path,
    seeds: int = 3,
    environments: Sequence[str] | None = None,
    test_per_class: int = 4,
    console: Any = None,
    json_out: Path | None = None,
    lens_models: Sequence[str] | None = None,
    variant: str = "top1",
    calib_per_class: int = 2,
) -> int:
    """``edgekit eval MODEL|lens --ray ADDRESS``: fan out, print, write JSON; returns the number
    of failed cells (cli.py exits 1 when it is not 0). ``lens_models``, ``variant``,
    ``calib_per_class``: ``eval lens``'s options ``classifier``, ``variant``,
    ``calib_per_class``; ``json_out``: the grid report (``--out``) of a model's grid."""
    from edgekit.bench.tables import write_report
    from edgekit.cluster.fanout import eval_lens_ray, eval_ray
    from edgekit.console import wide_console

    console = console or wide_console()
    if model == "lens":
        from edgekit.lens.bench import lens_targets

        targets = lens_targets(list(lens_models or []))
        report = eval_lens_ray(
            seeds, environments, test_per_class, address, targets=targets, variant=variant,
            calib_per_class=calib_per_class,
        )  # fmt: skip
        print_lens(report, Path(out), console)
        return len(report["failed_seeds"])
    report = eval_ray(model, [str(b) for b in bundles], runtimes, address)
    print_eval(report, console)
    print_ray_summary(report, console)
    if json_out is not None:
        console.print(f"wrote {write_report(report, json_out)}")
    return int(report["ray"]["failed"])


def print_ray_summary(report: Mapping[str, Any], console: Any) -> None:
    """One line: tasks, nodes, CPUs, wall time, retried and failed tasks of a fan-out report."""
    facts = report.get("ray") or {}
    console.print(
        f"ray {facts.get('address')}: {facts.get('tasks')} tasks on {facts.get('nodes')} node(s)"
        f" ({facts.get('cpus'):g} CPUs) in {facts.get('wall_s', 0):.1f} s"
        f" (+{facts.get('connect_s', 0):.1f} s to connect) · "
        f"{facts.get('retried', 0)} retried · {facts.get('failed', 0)} failed",
        highlight=False,
    )


def print_eval(report: dict[str, Any], console: Any) -> None:
    """The eval grid as a table (one row per cell, one column per metric) and failure notes."""
    from rich.markup import escape
    from rich.table import Table

    rows = report["results"]
    metrics = sorted({k for r in rows for k in r.get("metrics") or {}})
    table = Table(title=f"edgekit eval {report['model']} on Ray")
    for name in ("Model", "Target", "Runtime", "Node", "Status", *metrics, "Seconds"):
        table.add_column(name, justify="left" if name in ("Model", "Target") else "right")
    failed = 0
    for r in rows:
        ok = r.get("status") == "ok"
        failed += not ok
        cells = [str(r.get("model")), str(r.get("target") or "-"), str(r.get("runtime") or "-")]
        cells += [str((r.get("ray") or {}).get("hostname") or "-")]
        cells += ["[green]ok[/]" if ok else f"[bold red]FAILED[/] [{failed}]"]
        cells += [
            f"{r['metrics'][m]:.4f}" if m in (r.get("metrics") or {}) else "-" for m in metrics
        ]
        cells += [f"{r['seconds']:.1f}" if isinstance(r.get("seconds"), float) else "-"]
        table.add_row(*cells)
    console.print(table)
    bad = [r for r in rows if r.get("status") != "ok"]
    for i, r in enumerate(bad, 1):
        text = f"[{i}] {r.get('bundle') or 'torch'}: {r.get('error')}"
        console.print(f"[red]{escape(text)}[/]", highlight=False)


def print_lens(report: dict[str, Any], out: Path, console: Any) -> None:
    """The Lens report's tables, checks and notes (as ``edgekit eval lens``), written to
    ``out/lens.json`` and ``out/lens.png``, and each bundle's deployable Lens prior."""
    from edgekit.bench.tables import write_report
    from edgekit.lens.report import add_summaries, lens_plot, print_report, write_priors

    add_summaries(report)
    write_report(report, out / "lens.json")
    write_priors(report, out)
    lens_plot(report, out / "lens.png")
    print_report(report, console)
    facts = report.get("ray") or {}
    console.print(
        f"wrote {out / 'lens.json'} and {out / 'lens.png'} ({report['elapsed_s']:.0f} s, "
        f"{facts.get('tasks')} seeds as Ray tasks on {facts.get('nodes')} node(s))"
    )
