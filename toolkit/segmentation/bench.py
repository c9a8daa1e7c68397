"""``edgekit bench-stream``: the SAM 2 streaming predictor end to end, per runtime.

Per (bundle, runtime) and the torch reference: one object prompted with its true mask on frame
0 of a synthetic held-out clip (``edgekit.models.sam2_edge.clips``, looped to ``frames``
frames), then ``SAM2Stream.track`` timed on every frame (frame resize, all graphs, memory bank
and mask upsampling included). Reported: p50 / p90 per frame, FPS, the mean cost of frames
10-59 against the last 50 (the memory bank is bounded, so a long stream must not get slower),
and RSS at frame 10 against the last frame (no growth). JSON + a table + a PNG of latency over
the frame index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import InputError

WINDOW = 50  # frames averaged at the start (from frame 10) and at the end of the stream


@dataclass
class StreamBenchRow:
    """One graph set streamed for ``frames`` frames."""

    target: str
    runtime: str
    frames: int
    latency_ms: list[float] = field(repr=False)
    rss_start: float = 0.0  # MiB
    rss_end: float = 0.0
    error: str = ""

    def stats(self) -> dict[str, Any]:
        if self.error:
            return {"target": self.target, "runtime": self.runtime, "error": self.error}
        lat = np.asarray(self.latency_ms)
        early = lat[10 : 10 + WINDOW].mean()
        late = lat[-WINDOW:].mean()
        return {
            "target": self.target,
            "runtime": self.runtime,
            "frames": self.frames,
            "p50_ms": float(np.percentile(lat[1:], 50)),
            "p90_ms": float(np.percentile(lat[1:], 90)),
            "fps": float(1e3 / lat[1:].mean()),
            "early_ms": float(early),
            "late_ms": float(late),
            "late_vs_early": float(late / early),
            "rss_start_mb": self.rss_start,
            "rss_end_mb": self.rss_end,
            "rss_growth_mb": self.rss_end - self.rss_start,
        }


def looped_clip(frames: int, index: int = 0, length: int = 48) -> tuple[np.ndarray, Any]:
    """(frames (length, H, W, 3) uint8, the first frame's mask prompt) of held-out clip
    ``index``; the stream loops over them for ``frames`` frames."""
    from edgekit.models.sam2_edge import clips
    from edgekit.segmentation.stream import Prompt

    clip = clips.make_clip("heldout", index, frames=min(frames, length))
    return clip.frames, {clip.object_ids[0]: Prompt(mask=clip.masks[0, 0])}


def stream_one(
    graphs: Mapping[str, Callable], frames: int, target: str, runtime: str, config: Any
) -> StreamBenchRow:
    """Stream ``frames`` frames through ``graphs`` with StreamConfig ``config``, timing each."""
    from edgekit.bench.environment import process_rss_mb
    from edgekit.segmentation.region import open_stream

    if frames < 10 + 2 * WINDOW:
        raise InputError(f"bench-stream needs at least {10 + 2 * WINDOW} frames, got {frames}")
    clip, prompts = looped_clip(frames)
    stream = open_stream(graphs, config)
    latency = []
    rss_start = 0.0
    for i in range(frames):
        frame = clip[i % len(clip)]
        started = time.perf_counter()
        if i == 0:
            stream.start(frame, prompts)
        else:
            stream.track(frame)
        latency.append(1e3 * (time.perf_counter() - started))
        if i == 10:
            rss_start = process_rss_mb() or 0.0
    return StreamBenchRow(target, runtime, frames, latency, rss_start, process_rss_mb() or 0.0)


def bench_streams(
    bundles: Sequence[str | Path],
    runtimes: Sequence[str] = (),
    frames: int = 1000,
    threads: int | None = 2,
    torch_model: str | None = None,
    progress: bool = True,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Rows for every bundle x ``RUNTIME[@DEVICE]`` spec in ``runtimes`` (default: each bundle's
    runtimes that run here, on cpu) and, with ``torch_model`` (a registered SAM 2 card), its
    torch graphs on each ``torch@DEVICE`` spec's device (default cpu), built with card
    ``options``. Errors become rows."""
    from edgekit.bench.environment import environment
    from edgekit.bundle.format import Bundle
    from edgekit.progress import step_progress
    from edgekit.runtimes import parse_runtime_spec, runtime_spec
    from edgekit.segmentation.run import bundle_graph_set, bundle_stream_config

    specs = [parse_runtime_spec(r) for r in runtimes]
    bundle_specs = [(r, d) for r, d in specs if r != "torch"]
    plan: list[tuple[str, str, Callable[[], Mapping[str, Callable]], Any]] = []
    if torch_model:
        from edgekit.registry import get_card

        card = get_card(torch_model, **(options or {}))
        for device in [d for r, d in specs if r == "torch"] or [None]:

            def torch_graphs(card: Any = card, device: str = device or "cpu") -> Mapping:
                import torch

                torch.set_num_threads(threads or torch.get_num_threads())
                return {name: r.run for name, r in card_runners(card, device).items()}

            label = runtime_spec("torch", device)
            plan.append((f"{torch_model} (torch)", label, torch_graphs, card.stream_config()))
    for path in bundles:
        bundle = Bundle.load(path)
        config = bundle_stream_config(bundle)
        for runtime, device in bundle_specs or [(r, None) for r in bundle_runtimes(bundle)]:
            plan.append(
                (
                    bundle.target,
                    runtime_spec(runtime, device),
                    lambda b=bundle, r=runtime, d=device: bundle_graph_set(
                        b, runtime=r, device=d, threads=threads
                    ),
                    config,
                )
            )
    rows = []
    with step_progress("bench-stream", len(plan), progress) as step:
        for target, runtime, make, config in plan:
            step(f"{target} on {runtime}")
            try:
                rows.append(stream_one(make(), frames, target, runtime, config))
            except Exception as exc:  # noqa: BLE001 - a failed target is a row, not a crash
                rows.append(StreamBenchRow(target, runtime, frames, [], error=str(exc)[:300]))
    return {
        "kind": "sam2-stream-bench",
        "frames": frames,
        "threads": threads,
        "environment": environment(),
        "results": [r.stats() for r in rows],
        "latency_ms": {f"{r.target} / {r.runtime}": r.latency_ms for r in rows if not r.error},
    }


def bundle_runtimes(bundle: Any) -> list[str]:
    """The runtimes that run ``bundle``'s graph format on this machine, default first."""
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, runtime_formats

    fmt = bundle.graph("image_encoder").format
    return [r for r in DEFAULT_RUNTIME_FOR_FORMAT[fmt] if fmt in runtime_formats(r)]


def card_runners(card: Any, device: str = "cpu") -> dict[str, Any]:
    """The card's torch graphs as runners on ``device`` (edgekit.build.verify.reference_runners)."""
    from edgekit.build.verify import reference_runners

    return reference_runners(card, device)


def print_stream_report(report: Mapping[str, Any], console: Any) -> None:
    """The rows as one table."""
    title = (
        f"SAM 2 stream, {report['frames']} frames, {report['threads']} threads "
        "(per frame, end to end)"
    )
    cols = ("target", "runtime", "p50 ms", "p90 ms", "FPS", "frames 10-59 ms", "last 50 ms",
            "last/early", "RSS@10 MB", "RSS end MB")  # fmt: skip

    def cells(r: Mapping[str, Any]) -> list[str]:
        return [
            f"{r['p50_ms']:.2f}", f"{r['p90_ms']:.2f}", f"{r['fps']:.1f}", f"{r['early_ms']:.2f}",
            f"{r['late_ms']:.2f}", f"{r['late_vs_early']:.3f}", f"{r['rss_start_mb']:.0f}",
            f"{r['rss_end_mb']:.0f}",
        ]  # fmt: skip

    console.print(rows_table(title, cols, report["results"], cells))


def rows_table(
    title: str,
    columns: Sequence[str],
    results: Sequence[Mapping[str, Any]],
    cells: Callable[[Mapping[str, Any]], list[str]],
) -> Any:
    """A rich Table: per result its target, runtime and ``cells(result)``, or the error in red."""
    from rich.table import Table

    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for r in results:
        if "error" in r:
            table.add_row(r["target"], r["runtime"], f"[red]FAILED: {r['error']}[/]")
        else:
            table.add_row(r["target"], r["runtime"], *cells(r))
    return table


def plot_stream_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Latency per frame (a 25-frame rolling median) over the frame index, one line per row."""
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    from edgekit.cache import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(8, 4))
    for label, lat in report["latency_ms"].items():
        lat = np.asarray(lat)
        k = 25
        smooth = [np.median(lat[max(1, i - k) : i + 1]) for i in range(1, len(lat))]
        ax.plot(range(1, len(lat)), smooth, label=label)
    ax.set_xlabel("frame")
    ax.set_ylabel("ms per frame (rolling median)")
    ax.set_title("SAM 2 streaming: cost per frame over a long stream")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
