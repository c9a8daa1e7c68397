"""CLI command for SAM 2 streaming: ``edgekit bench-stream`` (registered on the app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def register(app: typer.Typer, handle_errors: Any, console: Any) -> None:
    """Add ``bench-stream`` to ``app``."""

    @app.command("bench-stream")
    @handle_errors
    def bench_stream_cmd(
        bundles: Annotated[
            list[Path] | None, typer.Argument(help="SAM 2 bundle directories (graph sets)")
        ] = None,
        runtime: Annotated[
            list[str] | None,
            typer.Option(
                "--runtime",
                help="RUNTIME[@DEVICE] per bundle, e.g. onnxruntime@cuda (repeat; default: all "
                "here on cpu); torch@DEVICE places the --torch rows",
            ),
        ] = None,
        frames: Annotated[int, typer.Option(help="frames streamed per row")] = 1000,
        threads: Annotated[int, typer.Option(help="intra-op threads")] = 2,
        torch_model: Annotated[
            str | None, typer.Option("--torch", help="also stream this card's torch graphs")
        ] = None,
        out: Annotated[
            Path, typer.Option(help="where stream-bench.json and stream-bench.png go")
        ] = Path("out/bench-stream"),
    ) -> None:
        """Stream a long clip through SAM 2 bundles per runtime: per-frame p50/p90, FPS, early
        vs late frame cost and RSS (a flat line means a bounded memory bank)."""
        from edgekit.benchtable import write_report
        from edgekit.errors import InputError
        from edgekit.sam2_bench import bench_streams, plot_stream_report, print_stream_report

        if not bundles and not torch_model:
            raise InputError("give SAM 2 bundle directories and/or --torch MODEL")
        report = bench_streams(bundles or [], runtime or [], frames, threads, torch_model)
        print_stream_report(report, console())
        json_path = write_report(report, out / "stream-bench.json")
        png = plot_stream_report(report, out / "stream-bench.png")
        console().print(f"report: {json_path}, plot: {png}")
        if any("error" in r for r in report["results"]):
            raise typer.Exit(1)
