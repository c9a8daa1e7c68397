"""CLI command ``edgekit run``: an on-device pipeline (Lens or sam2-stream) live on a camera
(a module-level function; ``register`` adds it to the app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from edgekit.cli.common import console, handle_errors, renamed


@handle_errors
def run_cmd(
    pipeline: Annotated[str, typer.Argument(help="pipeline to run live: lens | sam2-stream")],
    camera: Annotated[
        str,
        typer.Option(
            help="sim[:seed=1,lighting=dim-room] | v4l2:/dev/video0 | picamera2 | gstreamer:0 | "
            "file:DIR; sam2-stream also clip:heldout:N (a synthetic clip with ground truth, "
            "its default)"
        ),
    ] = "sim",
    model: Annotated[
        str | None,
        typer.Option(
            help="a registered model NAME (exported on first use; NAME:RECIPE picks a training "
            "recipe, e.g. photo-cnn:sensor-aware) or a bundle directory "
            "(default: photo-cnn for lens, sam2-edge for sam2-stream)"
        ),
    ] = None,
    k: Annotated[int, typer.Option("--k", help="lens: candidate captures per decision")] = 6,
    frames: Annotated[int, typer.Option(help="decisions (lens) or frames (sam2-stream)")] = 20,
    out: Annotated[
        Path | None,
        typer.Option(
            help="output: lens, the JSON-lines decision log (default out/lens-run.jsonl; a PNG "
            "strip is written beside it); sam2-stream, the directory of stream.mp4, sheet.png "
            "and frames.jsonl (default out/sam2-stream)"
        ),
    ] = None,
    variant: Annotated[
        str,
        typer.Option(
            help="VisiT variant: top1 | entropy | margin, or one of them with -flip "
            "(scored over each capture and its mirror image)"
        ),
    ] = "top1",
    latency_budget: Annotated[
        float | None, typer.Option(help="seconds per decision, shutter times included")
    ] = None,
    decision: Annotated[
        str,
        typer.Option(
            help="lens: select (the paper's: the best-VisiT capture's label) | fuse "
            "(VisiT-weighted vote of the K captures)"
        ),
    ] = "select",
    prior: Annotated[
        Path | None,
        typer.Option(
            help="lens: a calibrated setting prior (JSON written by `edgekit eval lens`): "
            "rank candidates by VisiT + prior"
        ),
    ] = None,
    runtime: Annotated[
        str | None, typer.Option(help="sam2-stream: RUNTIME\\[@DEVICE], e.g. onnxruntime@cuda")
    ] = None,
    point: Annotated[
        list[str] | None, typer.Option(help="sam2-stream: positive click x,y (frame pixels)")
    ] = None,
    negative: Annotated[
        list[str] | None, typer.Option(help="sam2-stream: negative click x,y")
    ] = None,
    box: Annotated[str | None, typer.Option(help="sam2-stream: box x0,y0,x1,y1")] = None,
    log: Annotated[Path | None, typer.Option("--log", hidden=True)] = None,
) -> None:
    """Run an on-device pipeline live on a camera: Lens logs each decision; sam2-stream draws
    the tracked masks over every frame (MP4 + PNG sheet) and prints its latency."""
    from edgekit.errors import InputError

    out = renamed("run", "--out", out, "--log", log)
    given = {"--out": out is not None, "--runtime": bool(runtime)}
    given |= {"--point": bool(point), "--negative": bool(negative), "--box": bool(box)}
    given |= {"--k": k != 6, "--variant": variant != "top1"}
    given |= {
        "--latency-budget": latency_budget is not None,
        "--decision": decision != "select",
        "--prior": prior is not None,
    }
    foreign = {"lens": ("--runtime", "--point", "--negative", "--box")}
    foreign["sam2-stream"] = ("--k", "--variant", "--latency-budget", "--decision", "--prior")
    wrong = [name for name in foreign.get(pipeline, ()) if given[name]]
    if wrong:
        raise InputError(
            f"{', '.join(wrong)} {'is not an option' if len(wrong) == 1 else 'are not options'}"
            f" of the {pipeline} pipeline; its options: "
            + ", ".join(n for n in given if n not in foreign[pipeline])
        )
    if pipeline == "sam2-stream":
        from edgekit.segmentation.run import parse_prompt, run_sam2_stream

        source = "clip:heldout:0" if camera == "sim" and not (point or box) else camera
        run = run_sam2_stream(
            source, model or "sam2-edge", frames, out or Path("out/sam2-stream"), runtime,
            parse_prompt(point or [], negative or [], box), show_progress=True,
        )  # fmt: skip
        summary = run.summary()
        console().print(
            f"sam2-stream on {source}: {summary['frames']} frames, p50 {summary['p50_ms']:.1f} ms, "
            f"p90 {summary['p90_ms']:.1f} ms ({summary['fps']:.1f} FPS)"
            + "".join(f", {key} {summary[key]:.1f}" for key in ("J&F", "J", "F") if key in summary)
        )
        for name, path in run.files.items():
            console().print(f"  {name}: {path}")
        return
    if pipeline != "lens":
        raise InputError(f"unknown pipeline '{pipeline}'; available: lens, sam2-stream")
    from edgekit.lens.run import run_lens

    log = out or Path("out/lens-run.jsonl")
    decisions = run_lens(
        camera, model or "photo-cnn", k, frames, log, variant, latency_budget,
        decision=decision, prior=prior,
    )  # fmt: skip
    console().print(f"{len(decisions)} decisions logged to {log}")


def register(app: typer.Typer, *_: Any) -> None:
    """Add ``run`` to ``app`` (further arguments, the error handler and console older callers
    pass, are not needed: the command imports its own)."""
    app.command("run")(run_cmd)
