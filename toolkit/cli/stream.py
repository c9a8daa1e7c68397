"""CLI for SAM 2 streaming: ``edgekit bench-stream`` (a module-level function; ``register`` adds
it to the app) and the paired
comparison that ``edgekit eval NAME --against KEY=VALUE`` prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli.common import console, handle_errors


@handle_errors
def bench_stream_cmd(
    bundles: Annotated[
        list[Path] | None, typer.Argument(help="SAM 2 bundle directories (graph sets)")
    ] = None,
    runtime: Annotated[
        list[str] | None,
        typer.Option(
            "--runtime",
            help="RUNTIME\\[@DEVICE] per bundle, e.g. onnxruntime@cuda (repeat; default: all "
            "here on cpu); torch@DEVICE places the --torch rows",
        ),
    ] = None,
    frames: Annotated[
        int | None, typer.Option(help="frames streamed per row (default 1000; 24 with --meta)")
    ] = None,
    threads: Annotated[int, typer.Option(help="intra-op threads")] = 2,
    torch_model: Annotated[
        str | None, typer.Option("--torch", help="also stream this card's torch graphs")
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(help="card option KEY=VALUE for --torch / --meta (repeat)"),
    ] = None,
    meta: Annotated[
        bool,
        typer.Option(
            "--meta",
            help="side by side with Meta's SAM2VideoPredictor (PyPI sam2) on the same weights: "
            "the sam2 card (--option) on torch, ONNX Runtime, OpenVINO and the bundles given, "
            "speed-up and mask agreement per row",
        ),
    ] = False,
    out: Annotated[
        Path, typer.Option(help="output: the directory of stream-bench.json and stream-bench.png")
    ] = Path("out/bench-stream"),
) -> None:
    """Stream a long clip through SAM 2 bundles per runtime: per-frame p50/p90, FPS, early
    vs late frame cost and RSS (a flat line means a bounded memory bank)."""
    from edgekit.bench.tables import write_report
    from edgekit.cli.options import parse_options
    from edgekit.errors import InputError
    from edgekit.segmentation.bench import bench_streams, plot_stream_report, print_stream_report

    options = parse_options(option)
    if meta:
        from edgekit.registry import get_card
        from edgekit.segmentation.meta_compare import compare_with_meta, print_meta_report

        if runtime:
            raise InputError("--meta picks its runtimes itself; leave --runtime out")
        card = get_card(torch_model or "sam2", **options)
        report = compare_with_meta(card, bundles or [], frames or 24, threads)
        print_meta_report(report, console())
    else:
        if not bundles and not torch_model:
            raise InputError("give SAM 2 bundle directories and/or --torch MODEL")
        report = bench_streams(
            bundles or [], runtime or [], frames or 1000, threads, torch_model, options=options
        )
        print_stream_report(report, console())
    json_path = write_report(report, out / "stream-bench.json")
    png = plot_stream_report(report, out / "stream-bench.png")
    console().print(f"report: {json_path}, plot: {png}")
    if any("error" in r for r in report["results"]):
        raise typer.Exit(1)


def register(app: typer.Typer, *_: Any) -> None:
    """Add ``bench-stream`` to ``app`` (further arguments, the error handler and console older
    callers pass, are not needed: the command imports its own)."""
    app.command("bench-stream")(bench_stream_cmd)


def paired_table(
    card: Any, runners: Any, label: str, options: dict[str, Any], from_bundle: bool
) -> str:
    """``edgekit eval NAME --against ...``: A = ``card`` on ``runners``, B = the card with
    ``options`` on top (A's graphs when only stream options change; other weights build
    their own torch graphs, which a bundle cannot); returns evaluation.format_paired's table with a title."""
    from edgekit.build.verify import reference_runners
    from edgekit.errors import InputError
    from edgekit.models.sam2_edge.evaluation import format_paired
    from edgekit.models.sam2_edge.stream_card import PREDICTOR_OPTIONS
    from edgekit.segmentation.realclips import REAL_SET_TITLES, REAL_SETS

    if not hasattr(card, "compare"):
        raise InputError(
            f"--against compares two settings of a SAM 2 card on the same clips; "
            f"'{card.name}' is not one"
        )
    other = card.against(options)
    weights = sorted(k for k in options if k not in PREDICTOR_OPTIONS)
    if weights and from_bundle:
        raise InputError(
            f"with --bundle, --against may change only stream options "
            f"({', '.join(PREDICTOR_OPTIONS)}); {', '.join(weights)} would need other "
            "graphs: compare on torch instead"
        )
    # stream options only: B runs A's very graphs (no second load, same weights for sure)
    other_runners = reference_runners(other) if weights else runners
    rows = card.compare(runners, other, other_runners)
    shown = {k: v for k, v in card.options.items() if k != getattr(card, "out_option", None)}
    given = ", ".join(f"{k}={v}" for k, v in shown.items()) or "the card's options"
    changed = ", ".join(f"{k}={v}" for k, v in options.items())
    which = str(card.options.get("eval_set", "heldout"))
    if which in REAL_SETS:
        clips = len(card.real_clips())
        units = f"{rows['box IoU']['objects']:.0f} annotated frames, box IoU in percent"
        which = REAL_SET_TITLES[which]
    else:
        clips = len(card.heldout())
        units = f"{rows['J&F']['objects']:.0f} objects"
        which = which.replace("heldout", "held-out")
    title = (
        f"{card.name} [{label}], paired on {clips} {which} clips ({units}): "
        f"A = {given}; B = A with {changed}"
    )
    return format_paired(rows, title)
