"""``edgekit run sam2-stream``: SAM 2 streaming segmentation live on a camera, masks drawn over
the frames (an MP4, a contact sheet PNG, one JSON line per frame) and a latency summary.

Sources: any camera spec (``sim``, ``v4l2:/dev/video0``, ``file:clip.mp4``, ...) or
``clip:SPLIT:INDEX`` — a synthetic sam2-edge clip (``edgekit.models.sam2_edge.clips``) with
ground truth, whose objects are prompted with their frame-0 masks and scored per frame (IoU) and
per clip (J&F). On a camera, objects come from ``points`` / ``box`` (frame pixels; default: one
click at the frame centre).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import BundleError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.segmentation.stream import GraphFn


#: card options the first-use export verifies a SAM 2 card with: rollout parity and J&F on
#: 3 held-out clips instead of 20 (seconds instead of minutes on 2 cores)
FIRST_USE_VERIFY = {"eval_clips": 3}


def sam2_bundle(bundle_or_model: str, target: str = "onnx-fp32", progress: bool = True) -> Any:
    """A SAM 2 graph-set bundle: a bundle directory, or a registered model (e.g. ``sam2-edge``)
    exported to ``target`` into the edgekit cache on first use (verified on FIRST_USE_VERIFY's
    clips; with ``progress``, a bar and how long it took on stderr)."""
    from edgekit.bundle.format import Bundle

    if Path(bundle_or_model).is_dir():
        bundle = Bundle.load(bundle_or_model)
    else:
        from edgekit.build.cache import cached_bundles

        notes: list[str] = []
        built = cached_bundles(
            ((bundle_or_model, target),), notes=notes, verify_options=FIRST_USE_VERIFY,
            progress=progress,
        )  # fmt: skip
        bundle = built[f"{bundle_or_model} {target}"]
        if progress and notes:
            from rich.console import Console

            for note in notes:
                Console(stderr=True).print(note, soft_wrap=True)
    from edgekit.segmentation.graphs import REQUIRED_GRAPHS

    missing = [g for g in REQUIRED_GRAPHS if g not in bundle.graphs]
    if missing:
        raise InputError(
            f"bundle {bundle.path} is not a SAM 2 graph set: it lacks {missing} "
            f"(has {sorted(bundle.graphs)})"
        )
    return bundle


def bundle_graph_set(bundle: Any, sessions: Mapping[str, Any] | None = None, **options: Any):
    """The SAM 2 graph set of ``bundle``: graph name -> ``feeds -> outputs`` keyed by the
    contract's names. ``sessions`` (graph -> Session) are opened with ``bundle.session(**options)``
    when not given."""
    from edgekit.segmentation.graphs import check_graph_set
    from edgekit.segmentation.rollout import with_contract_names

    sessions = sessions or {name: bundle.session(name, **options) for name in bundle.graphs}
    graphs = {name: with_contract_names(name, s) for name, s in sessions.items()}
    check_graph_set(graphs)
    return graphs


def graph_set_from_files(
    files: Mapping[str, str | Path], runtime: str = "onnxruntime", threads: int | None = None
) -> dict[str, GraphFn]:
    """A graph set from exported graph files (graph name -> path) run by an edgekit runtime."""
    from edgekit.runtimes import RuntimeOptions, get_runtime
    from edgekit.segmentation.graphs import check_graph_set
    from edgekit.segmentation.rollout import with_contract_names

    backend = get_runtime(runtime)
    options = RuntimeOptions(threads=threads)
    graphs = {
        name: with_contract_names(name, backend.load(Path(path), "cpu", options))
        for name, path in files.items()
    }
    check_graph_set(graphs)
    return graphs


def bundle_stream_config(bundle: Any) -> Any:
    """The StreamConfig ``bundle`` was verified with: its manifest's
    ``preprocessing.stream_config`` (image size, memory sizes and the card's inference-time
    options, e.g. sam2-edge's memory selection), else SAM 2's predictor at the image encoder's
    input size. Unknown keys in the manifest are an error naming them."""
    from dataclasses import fields

    from edgekit.segmentation.stream import StreamConfig

    size = int(bundle.graph("image_encoder").inputs[0].shape[-1])
    recorded = dict((bundle.manifest.get("preprocessing") or {}).get("stream_config") or {})
    known = {f.name for f in fields(StreamConfig)}
    unknown = sorted(set(recorded) - known)
    if unknown:
        raise InputError(
            f"bundle {bundle.path} records stream options {unknown} this edgekit does not know "
            f"(known: {sorted(known)}); export it again with this version"
        )
    try:
        return StreamConfig(**{"image_size": size, **recorded})
    except (TypeError, ValueError) as exc:  # a value of the wrong type in the manifest
        raise BundleError(
            f"bundle {bundle.path} records stream options of the wrong type ({exc}): {recorded}"
        ) from None


def parse_prompt(points: Sequence[str], negatives: Sequence[str], box: str | None) -> Any:
    """A Prompt from CLI strings "x,y" (frame pixels) and "x0,y0,x1,y1"; None when empty."""
    from edgekit.segmentation.stream import Prompt

    def numbers(text: str, count: int, what: str) -> list[float]:
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            values = []
        if len(values) != count:
            raise InputError(f"{what} '{text}' must be {count} comma-separated numbers")
        return values

    coords = [numbers(p, 2, "--point") for p in points] + [
        numbers(p, 2, "--negative") for p in negatives
    ]
    labels = [1] * len(points) + [0] * len(negatives)
    if not coords and box is None:
        return None
    return Prompt(
        points=coords or None,
        labels=labels or None,
        box=numbers(box, 4, "--box") if box is not None else None,
    )


@dataclass
class _Source:
    """Frames to segment, the first frame's prompts and (for synthetic clips) the truth."""

    frames: Iterator[np.ndarray]
    prompts: Any
    truth: np.ndarray | None = None  # (T, K, H, W) bool
    object_ids: tuple[int, ...] = ()
    close: Any = None


def _clip_source(spec: str, frames: int) -> _Source:
    from edgekit.models.sam2_edge import clips
    from edgekit.models.sam2_edge.evaluation import first_mask_prompts

    _, split, index = (spec.split(":") + ["", ""])[:3]
    if split not in clips.SPLIT_SEEDS or not index.isdigit():
        raise InputError(
            f"clip source '{spec}' must be clip:SPLIT:INDEX with SPLIT in {sorted(clips.SPLIT_SEEDS)}"
        )
    clip = clips.make_clip(split, int(index), frames=frames)
    return _Source(iter(clip.frames), first_mask_prompts(clip), clip.masks, clip.object_ids)


def _camera_source(spec: str, prompt: Any) -> _Source:
    from edgekit.devices.camera import CaptureSettings, open_camera

    camera = open_camera(spec)
    settings = CaptureSettings()

    def frames() -> Iterator[np.ndarray]:
        while True:
            yield camera.capture(settings).image

    return _Source(frames(), {1: prompt} if prompt is not None else None, close=camera.close)


@dataclass
class StreamRun:
    """What ``run_sam2_stream`` measured and wrote."""

    frames: int
    latency_ms: list[float]
    files: dict[str, str]
    ious: list[list[float]] = field(default_factory=list)  # per frame, per object (clips)
    jf: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        lat = np.asarray(self.latency_ms[1:] or self.latency_ms)
        out: dict[str, Any] = {
            "frames": self.frames,
            "p50_ms": float(np.percentile(lat, 50)),
            "p90_ms": float(np.percentile(lat, 90)),
            "fps": float(1e3 / lat.mean()),
            **self.jf,
        }
        if self.ious:
            out["mean_iou"] = float(np.mean([v for row in self.ious for v in row]))
        return out


def run_sam2_stream(
    source: str = "clip:heldout:0",
    bundle_or_model: str = "sam2-edge",
    frames: int = 48,
    out: str | Path = "out/sam2-stream",
    runtime: str | None = None,
    prompt: Any = None,
    fps: int = 10,
    show_progress: bool = False,
) -> StreamRun:
    """Segment ``frames`` frames of ``source`` with a SAM 2 bundle through ``SAM2Stream``.

    Writes ``out``/stream.mp4 (with PyAV), sheet.png (every 4th frame), frames.jsonl (per frame:
    index, per-object area / box / score, latency, IoU against the truth on clips).
    """
    from edgekit.runtimes import parse_runtime_spec
    from edgekit.segmentation import metrics as segmetrics
    from edgekit.segmentation import render as maskrender
    from edgekit.segmentation.arrays import object_summary
    from edgekit.segmentation.region import open_stream

    if frames < 1:
        raise InputError(f"frames must be >= 1, got {frames}")
    bundle = sam2_bundle(bundle_or_model, progress=show_progress)
    name, device = parse_runtime_spec(runtime) if runtime else (None, None)  # RUNTIME[@DEVICE]
    graphs = bundle_graph_set(bundle, runtime=name, device=device)
    stream = open_stream(graphs, bundle_stream_config(bundle))
    src = _clip_source(source, frames) if source.startswith("clip:") else None
    src = src or _camera_source(source, prompt)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rendered, latency, ious, predicted = [], [], [], []
    from edgekit.progress import step_progress

    try:
        with (
            open(out / "frames.jsonl", "w", encoding="utf-8") as log,
            step_progress("sam2-stream", frames, enabled=show_progress) as step,
        ):
            for i, image in zip(range(frames), src.frames, strict=False):
                step(f"frame {i}")
                prompts = src.prompts
                if i == 0 and prompts is None:
                    h, w = image.shape[:2]
                    prompts = {1: {"points": [[w / 2, h / 2]], "labels": [1]}}
                started = time.perf_counter()
                result = stream.start(image, prompts) if i == 0 else stream.track(image)
                latency.append(1e3 * (time.perf_counter() - started))
                ids = sorted(result.masks)
                masks = np.stack([result.masks[k] for k in ids])
                row: dict[str, Any] = {
                    "frame": i,
                    "latency_ms": round(latency[-1], 3),
                    "objects": {
                        str(k): object_summary(result.masks[k], result.object_scores[k])
                        for k in ids
                    },
                }
                if src.truth is not None:
                    truth = src.truth[i]
                    ious.append(
                        [segmetrics.region_similarity(masks[j], truth[j]) for j in range(len(ids))]
                    )
                    row["iou"] = [round(v, 4) for v in ious[-1]]
                    predicted.append(masks)
                log.write(json.dumps(row) + "\n")
                scores = [result.object_scores[k] for k in ids]
                rendered.append(maskrender.overlay(image, masks, ids, scores))
    finally:
        if src.close is not None:
            src.close()
    files = {"log": str(out / "frames.jsonl")}
    sheet = maskrender.contact_sheet(rendered[:: max(1, len(rendered) // 12)][:12])
    files["sheet"] = str(maskrender.write_png(out / "sheet.png", sheet))
    try:
        files["video"] = str(maskrender.write_mp4(out / "stream.mp4", rendered, fps))
    except Exception as exc:  # noqa: BLE001 - no PyAV: PNGs only, said in the summary
        files["video"] = f"not written: {exc}"
    run = StreamRun(len(rendered), latency, files, ious)
    if src.truth is not None and len(predicted) >= 3:
        video = segmetrics.score_video(
            np.stack(predicted), src.truth[: len(predicted)], drop_first_last=True
        )
        run.jf = {k: v for k, v in segmetrics.summarize([video]).items() if k in ("J", "F", "J&F")}
    return run
