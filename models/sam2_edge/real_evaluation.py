"""SAM 2 cards on real recorded video (edgekit.segmentation.realclips), scored by boxes.

Each clip's object is prompted with its hand-drawn box on frame 0 (as a user would draw it)
and tracked by ``SAM2Stream`` to the end. On every later annotated frame the predicted mask's
box is compared with the hand-drawn one (edgekit.segmentation.tracking): mean box IoU, success
AUC, lost share, and on frames where the object is hidden, whether the prediction is empty.
Two numbers need no labels beyond frame 0:

- **forward-backward consistency**: track to the last frame, then track the reversed clip
  from the last mask (a mask prompt) back to frame 0; IoU of that mask with frame 0's.
- the **static-box baseline**: the frame-0 box held still, scored like a prediction (a
  tracker that does not beat it has not tracked anything).

Per clip and overall, a 95 % bootstrap interval of the mean box IoU resamples annotated frames
within each clip. The overall mean pools annotated frames, so a long clip weighs more; the mean
of the clips' means (each clip once) is reported beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.segmentation import tracking as T
from edgekit.segmentation.metrics import region_similarity
from edgekit.segmentation.realclips import RealClip
from edgekit.segmentation.region import RegionStream, open_stream
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig

OBJECT = 1  # the one object id of a real clip


@dataclass
class ClipResult:
    """One clip's scores: per annotated frame (after frame 0) where the object is visible,
    the box IoU of the tracker and of the static box; per frame where it is hidden, whether
    the prediction was empty; forward-backward mask IoU."""

    name: str
    frames: int
    ious: list[float]
    static_ious: list[float]
    absent_empty: list[bool]
    fb_iou: float

    def row(self) -> dict[str, float]:
        """The clip's metrics as one flat row."""
        low, high = T.bootstrap_ci([self.ious])
        return {
            "box_iou": float(np.mean(self.ious)),
            "box_iou_lo": low,
            "box_iou_hi": high,
            "success_auc": T.success_auc(self.ious),
            "lost": T.lost_share(self.ious),
            "absent_empty": float(np.mean(self.absent_empty)) if self.absent_empty else np.nan,
            "fb_iou": self.fb_iou,
            "static_box_iou": float(np.mean(self.static_ious)),
            "static_lost": T.lost_share(self.static_ious),
        }


def track(stream: SAM2Stream | RegionStream, frames: np.ndarray, prompt: Prompt) -> np.ndarray:
    """Track one object through ``frames`` (T, H, W, 3) from ``prompt`` on frame 0 -> masks
    (T, H, W) bool."""
    masks = np.zeros(frames.shape[:3], bool)
    for i, frame in enumerate(frames):
        result = stream.start(frame, {OBJECT: prompt}) if i == 0 else stream.track(frame)
        masks[i] = result.masks[OBJECT]
    return masks


def score_clip(
    stream: SAM2Stream | RegionStream, clip: RealClip, backward: bool = True
) -> tuple[ClipResult, np.ndarray]:
    """Track ``clip``'s object from its frame-0 box, score it -> (ClipResult, masks (T, H, W)).
    ``backward`` False skips the forward-backward pass (its ``fb_iou`` is then NaN)."""
    first = clip.boxes[0]
    masks = track(stream, clip.frames, Prompt(box=list(first)))
    ious, static, absent = [], [], []
    for k, box in clip.boxes.items():
        if k == 0:
            continue
        predicted = T.mask_box(masks[k])
        if box is None:
            absent.append(predicted is None)
        else:
            ious.append(T.box_iou(predicted, box))
            static.append(T.box_iou(first, box))
    fb = 0.0 if backward else float("nan")
    if backward and masks[-1].any():
        back = track(stream, clip.frames[::-1], Prompt(mask=masks[-1]))
        fb = float(region_similarity(back[-1], masks[0]))
    return ClipResult(clip.name, len(clip.frames), ious, static, absent, fb), masks


def evaluate_real(
    graphs: Mapping,
    config: StreamConfig,
    clips: Sequence[RealClip],
    sheets: Path | None = None,
    backward: bool = True,
) -> list[ClipResult]:
    """Score ``graphs`` streamed with ``config`` on each real clip; with ``sheets``, write
    ``sheets/<clip>.png`` (every annotated frame: mask, hand-drawn box white, predicted box
    in the object's colour); ``backward`` False skips the forward-backward pass."""
    stream = open_stream(graphs, config)
    results = []
    for clip in clips:
        result, masks = score_clip(stream, clip, backward)
        results.append(result)
        if sheets is not None:
            write_sheet(Path(sheets) / f"{clip.name}.png", clip, masks)
    return results


def compare_real(
    a: tuple[Mapping, StreamConfig], b: tuple[Mapping, StreamConfig], clips: Sequence[RealClip]
) -> dict[str, dict[str, float]]:
    """B against A on the same real ``clips``, each (graph set, StreamConfig): row "box IoU"
    over every annotated frame where the object is visible, then one row per clip,
    segmetrics.paired_difference of the per-frame box IoU (percent points; the frames of one
    clip are not independent, so read the SE with the per-clip rows)."""
    from edgekit.segmentation.metrics import paired_difference

    ra, rb = (evaluate_real(g, config, clips, backward=False) for g, config in (a, b))
    rows = {"box IoU": ([v for r in ra for v in r.ious], [v for r in rb for v in r.ious])}
    rows |= {f"  {x.name}": (x.ious, y.ious) for x, y in zip(ra, rb, strict=True)}
    return {name: paired_difference(np.array(x), np.array(y)) for name, (x, y) in rows.items()}


def summary(results: Sequence[ClipResult]) -> dict[str, float]:
    """Flat metrics over all clips (pooled annotated frames) and per clip
    (``<metric>/<clip>``): what ``card.evaluate`` returns for ``eval_set=real``."""
    ious = [r.ious for r in results]
    pooled = [v for r in results for v in r.ious]
    static = [v for r in results for v in r.static_ious]
    absent = [v for r in results for v in r.absent_empty]
    low, high = T.bootstrap_ci(ious)
    metrics = {
        "box_iou": float(np.mean(pooled)),
        "box_iou_lo": low,
        "box_iou_hi": high,
        "success_auc": T.success_auc(pooled),
        "lost": T.lost_share(pooled),
        "fb_iou": float(np.mean([r.fb_iou for r in results])),
        "absent_empty": float(np.mean(absent)) if absent else float("nan"),
        "static_box_iou": float(np.mean(static)),
        "static_lost": T.lost_share(static),
        "clip_mean_box_iou": float(np.mean([np.mean(r.ious) for r in results if r.ious])),
        "clip_mean_static_box_iou": float(
            np.mean([np.mean(r.static_ious) for r in results if r.static_ious])
        ),
        "clips": float(len(results)),
        "annotated_frames": float(len(pooled)),
    }
    for r in results:
        metrics |= {f"{key}/{r.name}": value for key, value in r.row().items()}
    return metrics


def format_real_table(metrics: Mapping[str, float], title: str) -> str:
    """``summary``'s metrics as a text table: a row per clip and "all", tracker vs the static
    box."""
    names = sorted({key.split("/", 1)[1] for key in metrics if "/" in key})
    head = (
        f"{'clip':<15} {'box IoU [95% CI]':>20} {'AUC':>5} {'lost':>5} {'hidden->empty':>13} "
        f"{'fwd-bwd':>7} | {'static IoU':>10} {'lost':>5}"
    )
    lines = [title, head, "-" * len(head)]

    def line(label: str, get) -> str:
        ci = f"{get('box_iou'):.2f} [{get('box_iou_lo'):.2f}, {get('box_iou_hi'):.2f}]"
        absent = get("absent_empty")
        hidden = "-" if np.isnan(absent) else f"{absent:.2f}"
        return (
            f"{label:<15} {ci:>20} {get('success_auc'):>5.2f} {get('lost'):>5.2f} "
            f"{hidden:>13} {get('fb_iou'):>7.2f} | {get('static_box_iou'):>10.2f} "
            f"{get('static_lost'):>5.2f}"
        )

    for name in names:
        lines.append(line(name, lambda key, n=name: metrics[f"{key}/{n}"]))
    lines.append(line("all", lambda key: metrics[key]))
    if "clip_mean_box_iou" in metrics:
        lines.append(
            f"mean of the clips' means (each clip once): box IoU "
            f"{metrics['clip_mean_box_iou']:.2f}, static {metrics['clip_mean_static_box_iou']:.2f}"
        )
    return "\n".join(lines)


def write_sheet(path: Path, clip: RealClip, masks: np.ndarray) -> Path:
    """A PNG contact sheet of ``clip``'s annotated frames with the tracked mask, the
    hand-drawn box (white) and the predicted box (object colour), labelled with frame and IoU."""
    from PIL import Image, ImageDraw

    from edgekit.segmentation import render

    scale = max(1, 320 // clip.frames.shape[2])  # small frames drawn larger
    tiles = []
    for k, box in clip.boxes.items():
        image = render.overlay(clip.frames[k], masks[k][None], [OBJECT], labels=False)
        canvas = Image.fromarray(image).resize(
            (image.shape[1] * scale, image.shape[0] * scale), Image.NEAREST
        )
        draw = ImageDraw.Draw(canvas)
        predicted = T.mask_box(masks[k])
        if box is not None:
            draw.rectangle([c * scale for c in box], outline=(255, 255, 255), width=2)
        if predicted is not None:
            draw.rectangle([c * scale for c in predicted], outline=render.colour(OBJECT), width=2)
        text = f"{clip.name} +{k}"
        text += " hidden" if box is None else f" IoU {T.box_iou(predicted, box):.2f}"
        draw.rectangle(draw.textbbox((3, 3), text), fill=(0, 0, 0))
        draw.text((3, 3), text, fill=(255, 255, 255))
        tiles.append(np.asarray(canvas))
    return render.write_png(path, render.contact_sheet(tiles, columns=4))
