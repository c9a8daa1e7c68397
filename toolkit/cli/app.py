"""The ``edgekit`` command line. Every heavy import happens inside a command, so --help is instant.

Exit codes: 0 success; 1 a check failed (verification, self-test, accuracy budget);
2 bad input or a missing dependency (the message says what and how to fix it).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgekit.cli.common import console as _console
from edgekit.cli.common import handle_errors, renamed, runtime_device
from edgekit.cli.options import OptionsArg, parse_options

app = typer.Typer(
    name="edgekit",
    help="Export, quantize, verify and benchmark research models for edge devices.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


RuntimeArg = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="RUNTIME\\[@DEVICE] to compute on, e.g. onnxruntime@cuda (default: the bundle "
        "format's first runtime, on cpu or the runtime's first device)",
    ),
]
OldDeviceArg = Annotated[str | None, typer.Option("--device", hidden=True)]  # now --runtime R@D


def _parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    from edgekit.module_card import parse_input_shapes

    return parse_input_shapes(items or [])


@app.command("models")
@handle_errors
def models_cmd() -> None:
    """List the registered models (name, tier, task)."""
    from rich.table import Table

    from edgekit.registry import card_class, names

    table = Table(title="edgekit models")
    for col in ("name", "tier", "task", "summary"):
        table.add_column(col)
    for name in names():
        cls = card_class(name)
        table.add_row(name, cls.tier, cls.task, cls.summary)
    _console().print(table)


@app.command("runtimes")
@handle_errors
def runtimes_cmd() -> None:
    """List runtime backends, whether they import here, and their devices."""
    from rich.markup import escape
    from rich.table import Table

    from edgekit.runtimes import available_runtimes, get_runtime

    table = Table(title="edgekit runtimes")
    for col in ("runtime", "status", "formats", "devices"):
        table.add_column(col)
    for name, problem in available_runtimes().items():
        if problem:
            table.add_row(name, "[yellow]unavailable[/]", "", escape(problem))
        else:
            rt = get_runtime(name)
            table.add_row(name, "[green]ok[/]", ", ".join(rt.formats), ", ".join(rt.devices()))
    _console().print(table)


@app.command("train")
@handle_errors
def train_cmd(
    model: Annotated[str, typer.Argument(help="registered model name")], option: OptionsArg = None
) -> None:
    """Train a model's compact variant in-repo (cached under ~/.cache/edgekit)."""
    from edgekit.registry import get_card

    result = get_card(model, **parse_options(option)).train()
    if result is None:
        _console().print(f"{model}: pretrained, nothing to train")
        return
    import dataclasses

    names = [f.name for f in dataclasses.fields(result)] if dataclasses.is_dataclass(result) else []
    names += [k for k in ("heldout_accuracy", "seconds", "cached", "path") if k not in names]
    facts = {  # the result's scalar facts (weights, histories and configs left out)
        k: getattr(result, k)
        for k in names
        if isinstance(getattr(result, k, None), (int, float, str, bool, Path))
    }
    shown = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in facts.items())
    _console().print(f"trained {model}: " + ", ".join(shown))


@app.command("export")
@handle_errors
def export_cmd(
    model: Annotated[str, typer.Argument(help="registered model name, or path/to/file.py:factory")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="export format(s): onnx, openvino, tensorrt, torch (comma list; default onnx)",
        ),
    ] = None,
    precision: Annotated[
        str, typer.Option(help="fp32 | fp16 | bf16 (openvino) | int8 (comma list)")
    ] = "fp32",
    out: Annotated[
        Path | None,
        typer.Option(help="output: the bundle directory (default bundles/<model>-<target>)"),
    ] = None,
    input_shape: Annotated[
        list[str] | None, typer.Option("--input-shape", help="for module files: name=1x3x224x224")
    ] = None,
    calibration: Annotated[
        str | None, typer.Option(help="int8 calibration: minmax | entropy | percentile")
    ] = None,
    int8_mode: Annotated[
        str | None, typer.Option(help="int8: static (QDQ, calibrated) | dynamic")
    ] = None,
    per_channel: Annotated[bool, typer.Option(help="per-channel int8 weights")] = True,
    int8_weights: Annotated[
        str | None,
        typer.Option(
            help="ONNX int8 weights: int8 (u8 x s8 kernels, fastest on x86) | uint8 (u8 x u8: "
            "never saturate; default: int8, with a uint8 rebuild where x86 without VNNI fails "
            "verification)"
        ),
    ] = None,
    keep_float: Annotated[
        list[str] | None,
        typer.Option(
            "--keep-float", help="int8: regex of node names kept in floating point (repeat)"
        ),
    ] = None,
    fuse: Annotated[
        bool | None,
        typer.Option(
            help="ONNX Runtime transformer fusions (default: when the card declares them)"
        ),
    ] = None,
    opset: Annotated[int | None, typer.Option(help="ONNX opset (default: the card's)")] = None,
    budget: Annotated[
        float | None, typer.Option(help="accepted relative drop of the task metric")
    ] = None,
    verify: Annotated[
        bool, typer.Option(help="verify against the torch reference before writing")
    ] = True,
    threads: Annotated[int | None, typer.Option(help="threads for verification sessions")] = None,
    option: OptionsArg = None,
    to: Annotated[str | None, typer.Option("--to", hidden=True)] = None,
) -> None:
    """Export MODEL to one or more targets (format x precision) as verified bundles."""
    from edgekit.build.pipeline import build_bundle
    from edgekit.exporters import ExportOptions, Target
    from edgekit.sources import card_from_spec

    formats = renamed("export", "--format", fmt, "--to", to) or "onnx"
    card = card_from_spec(model, _parse_shapes(input_shape), **parse_options(option))
    options = ExportOptions(
        opset,
        int8_mode,
        calibration,
        per_channel=per_channel,
        fuse=fuse,
        float_nodes=tuple(keep_float) if keep_float else None,
        extra={"weight_type": int8_weights} if int8_weights else {},
    )
    targets = [Target.parse(f, p) for f in formats.split(",") for p in precision.split(",")]
    if out is not None and len(targets) > 1:
        from edgekit.errors import InputError

        raise InputError("--out names one bundle; drop it to export several targets")
    from edgekit.build.reports import verify_table
    from edgekit.errors import ParityError

    for target in targets:
        try:
            bundle, report = build_bundle(
                card, target, out, options, verify=verify, budget=budget, threads=threads
            )
        except ParityError as exc:
            if exc.verify_report is not None:
                _console().print(verify_table(exc.verify_report))
            raise
        _console().print(f"[green]wrote[/] {bundle.path} ({target})")
        if report is not None:
            _console().print(verify_table(report))


@app.command("verify")
@handle_errors
def verify_cmd(
    bundle: Annotated[Path, typer.Argument(help="bundle directory")],
    runtime: RuntimeArg = None,
    budget: Annotated[
        float | None, typer.Option(help="accepted relative drop of the task metric")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="intra-op threads")] = None,
    out: Annotated[Path | None, typer.Option(help="output: write the report JSON here")] = None,
    device: OldDeviceArg = None,
    json_out: Annotated[Path | None, typer.Option("--json", hidden=True)] = None,
) -> None:
    """Verify BUNDLE on this machine against its torch reference; exit 1 on any miss."""
    from edgekit.build.reports import verify_table
    from edgekit.build.verify import require_pass, verify_bundle

    name, at = runtime_device("verify", runtime, device)
    out = renamed("verify", "--out", out, "--json", json_out)
    report = verify_bundle(str(bundle), runtime=name, device=at, threads=threads, budget=budget)
    _console().print(verify_table(report))
    if out:
        from edgekit.cache import atomic_write_text

        atomic_write_text(out, json.dumps(report.to_json(), indent=2, default=float))
    require_pass(report)


@app.command("selftest")
@handle_errors
def selftest_cmd(
    bundle: Annotated[Path, typer.Argument(help="bundle directory")],
    runtime: RuntimeArg = None,
    device: OldDeviceArg = None,
) -> None:
    """Re-run BUNDLE's golden I/O here; exit 1 if this machine does not reproduce it."""
    from rich.markup import escape

    from edgekit.bundle.selftest import selftest

    rt, at = runtime_device("selftest", runtime, device)
    result = selftest(str(bundle), runtime=rt, device=at)
    for graph, outputs in result.graphs.items():
        for name, stats in outputs.items():
            line = f"{graph}/{name}: max|d| {stats['max_abs']:.3g} on {result.runtime}"
            _console().print(f"[green]ok[/] {escape(line)}")


@app.command("bench")
@handle_errors
def bench_cmd(
    items: Annotated[
        list[str], typer.Argument(help="bundle directories and/or model names (eager torch row)")
    ],
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            help="RUNTIME\\[@DEVICE] to run each bundle on, e.g. onnxruntime@cuda (repeat: "
            "one table; torch@cuda moves a model name's eager row)",
        ),
    ] = None,
    threads: Annotated[int | None, typer.Option(help="intra-op threads")] = None,
    batch: Annotated[
        int, typer.Option(help="batch size (golden inputs tiled along the batch axis)")
    ] = 1,
    iterations: Annotated[int, typer.Option(help="timed iterations")] = 100,
    warmup: Annotated[int, typer.Option(help="untimed warm-up iterations")] = 10,
    duration: Annotated[
        float | None, typer.Option(help="time each target for this many seconds instead")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="output: write the report JSON here")] = None,
    plot: Annotated[Path | None, typer.Option(help="also write a latency plot PNG here")] = None,
    extra_results: Annotated[
        list[Path] | None,
        typer.Option(
            "--extra-results", help="merge rows of another bench JSON (e.g. the Optimum peer)"
        ),
    ] = None,
    check_overhead: Annotated[
        bool,
        typer.Option(
            "--overhead", help="also time edgekit's Session.run against a bare onnxruntime session"
        ),
    ] = False,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target", help="bench on this device daemon HOST:PORT (repeat; 'local' = here)"
        ),
    ] = None,
    token: Annotated[str | None, typer.Option(help="daemon token for --target")] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="fan the targets out as Ray tasks on the Ray cluster ADDRESS: 'local' (start "
            "one here), auto, HOST:6379, ray://HOST:10001; --target daemons become Ray tasks",
        ),
    ] = None,
    device: Annotated[list[str] | None, typer.Option("--device", hidden=True)] = None,
    json_out: Annotated[Path | None, typer.Option("--json", hidden=True)] = None,
) -> None:
    """Benchmark bundles and models side by side: p50/p90/p99, load, first run, RSS, size.
    With --target, the same bundles on several devices' daemons: one cross-device table.
    With --ray, every target is a Ray task on a cluster (retried if its worker dies)."""
    from edgekit.bench.engine import BenchConfig, bench_many, expand_targets, overhead
    from edgekit.bench.plots import plot_report
    from edgekit.bench.tables import print_overhead, print_report, rows_summary, write_report

    daemons = renamed("bench", "--target", target, "--device", device)
    out = renamed("bench", "--out", out, "--json", json_out)
    config = BenchConfig(
        warmup=warmup, iterations=iterations, duration_s=duration, threads=threads, batch=batch
    )
    if ray:
        from edgekit.cli.cluster import bench_on_ray

        report = bench_on_ray(
            items, runtime or [], config, ray, daemons or [], token, extra_results or [], _console()
        )
    elif daemons:
        from edgekit.daemon.remote_bench import bench_devices, print_devices

        remote = [d for d in daemons if d != "local"]
        report = bench_devices(items, remote, runtime or [], config, "local" in daemons, token)
        print_report(report, title="edgekit bench across devices")
        print_devices(report, _console())
    else:
        targets = expand_targets(items, runtime or [])
        report = bench_many(targets, config, extra_results=extra_results or [])
        print_report(report)
    if out:
        _console().print(f"wrote {write_report(report, out)}")
    if plot:
        _console().print(f"wrote {plot_report(report, plot)}")
    if check_overhead:
        for item in items:
            if (Path(item) / "bundle.json").is_file():
                print_overhead(overhead(item, threads=threads, batch=batch))
    if rows_summary(report["results"])["failed"]:
        raise typer.Exit(1)


@app.command("demo")
@handle_errors
def demo_cmd(
    threads: Annotated[
        int | None, typer.Option(help="intra-op threads for verification and bench")
    ] = 2,
    out: Annotated[
        Path, typer.Option(help="output: the directory of the bench JSON and plots")
    ] = Path("out/demo"),
    bundles: Annotated[
        Path, typer.Option(help="also: the directory the bundles are exported to")
    ] = Path("bundles"),
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="a registered model NAME to limit the demo to (repeat)"),
    ] = None,
    iterations: Annotated[int, typer.Option(help="timed iterations per bench row")] = 100,
    daemon_seconds: Annotated[
        float, typer.Option(help="seconds to run the local daemon's pipelines (0 = skip it)")
    ] = 20.0,
) -> None:
    """Export the demo models to every target this machine supports, verify, benchmark, then
    deploy them to a local daemon on the simulated camera and run its pipelines."""
    from edgekit.cli.demo import DEMO_MODELS, run_demo

    failures = run_demo(
        threads,
        out,
        bundles,
        tuple(model or DEMO_MODELS),
        iterations=iterations,
        daemon_seconds=daemon_seconds,
    )
    if failures:
        raise typer.Exit(1)


@app.command("info")
@handle_errors
def info_cmd(bundle: Annotated[Path, typer.Argument(help="bundle directory")]) -> None:
    """Show what a bundle holds (integrity-checked)."""
    # Manifest text is printed verbatim, never as rich markup: a bundle is untrusted, and a
    # closing tag in a model name must not break the output.
    from rich.markup import escape

    from edgekit.bundle.format import Bundle

    b = Bundle.load(bundle)
    m = b.manifest
    out = _console()
    facts = f"{b.target}  tier={m.get('tier')} task={m.get('task')}"
    out.print(f"[bold]{escape(b.model)}[/] {escape(facts)}")
    for entry in b.graphs.values():
        out.print(escape(f"  graph {entry.name}: {', '.join(entry.files)}"))
        for spec in entry.inputs:
            out.print(escape(f"    in  {spec.describe()}"))
        for spec in entry.outputs:
            out.print(escape(f"    out {spec.describe()}"))
    report = m.get("report") or {}
    out.print(
        escape(f"  verified: {report.get('passed', 'not verified')}  versions: {m.get('versions')}")
    )


@app.command("pack")
@handle_errors
def pack_cmd(bundle: Path, archive: Path) -> None:
    """Pack BUNDLE into a .tar archive for transfer."""
    from edgekit.bundle.archive import pack

    _console().print(f"wrote {pack(bundle, archive)}")


@app.command("unpack")
@handle_errors
def unpack_cmd(archive: Path, dest: Path) -> None:
    """Unpack and integrity-check a bundle archive."""
    from edgekit.bundle.archive import unpack

    _console().print(f"unpacked {unpack(archive, dest).path}")


# commands kept in their own modules (module-level functions; register(app) adds them):
# device / daemon commands, Ray, eval, run, the SAM 2 stream commands
for _module in ("daemon", "cluster", "eval", "run", "stream"):
    importlib.import_module(f"edgekit.cli.{_module}").register(app)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="edgekit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
