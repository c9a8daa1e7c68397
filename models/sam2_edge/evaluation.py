"""Held-out evaluation of sam2-edge through the streaming predictor (edgekit.segmentation.stream).

- **J&F** as the DAVIS / SA-V semi-supervised protocol: every object of every held-out clip is
  given by its ground-truth mask on frame 0 and tracked through the clip by ``SAM2Stream`` over
  any graph set (torch modules or runtime sessions); J, F and J&F in percent
  (``edgekit.segmentation.metrics``), first and last frames dropped as the DAVIS 2017 / SA-V scripts do.
  Also per motion case, and ``J&F_click``: the same with one click per object on frame 0 (at
  its deepest interior point) instead of the mask.
- **1-click / 5-click mIoU** on first frames: the simulated click protocol, each correction
  sent with ``add_prompt`` (all clicks so far; the stream feeds the previous logits back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from edgekit.models.sam2_edge import clips as C
from edgekit.segmentation import metrics as segmetrics
from edgekit.segmentation.region import RegionStream, open_stream
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig

HELDOUT_CLIPS = 20  # four of each motion case
HELDOUT_FRAMES = 24


@lru_cache(maxsize=2)
def heldout_clips(count: int = HELDOUT_CLIPS, frames: int = HELDOUT_FRAMES) -> tuple[C.Clip, ...]:
    """The held-out set: clips 0..count-1 of the "heldout" split (cached per process)."""
    return tuple(C.clip_set("heldout", count, frames=frames))


CALIBRATION_START = 900_000  # "train" clip indices far past any training step's (< 10_000)
CALIBRATION_CLIPS = 40


@lru_cache(maxsize=2)
def calibration_clips(
    count: int = CALIBRATION_CLIPS, frames: int = HELDOUT_FRAMES
) -> tuple[C.Clip, ...]:
    """Clips to choose inference-time options on, never the held-out set: "train" split clips
    CALIBRATION_START.. (training photos; training tracks clips 0 .. steps x clips_per_step,
    so none of these, and their seeds differ from every training and held-out clip's)."""
    return tuple(C.clip_set("train", count, frames=frames, start=CALIBRATION_START))


def stream_config(image_size: int = C.DEFAULT_SIZE, **options: Any) -> StreamConfig:
    """The predictor settings the SAM 2 cards are trained for (SAM 2.1's memory sizes), with
    ``options``: further StreamConfig fields (inference-time options, e.g. memory selection)."""
    return StreamConfig(image_size=image_size, num_maskmem=7, max_obj_ptrs=16, **options)


def first_click_prompts(clip: C.Clip) -> dict[int, Prompt]:
    """Per object id, one positive click at its deepest point on frame 0."""
    prompts = {}
    for k, oid in enumerate(clip.object_ids):
        x, y, _ = segmetrics.first_click(clip.masks[0, k])
        prompts[oid] = Prompt(points=[[x, y]], labels=[1])
    return prompts


def first_mask_prompts(clip: C.Clip) -> dict[int, Prompt]:
    """Per object id, its ground-truth mask on frame 0 (the semi-supervised VOS protocol)."""
    return {oid: Prompt(mask=clip.masks[0, k]) for k, oid in enumerate(clip.object_ids)}


def track_clip(
    stream: SAM2Stream | RegionStream, clip: C.Clip, prompt: str = "mask"
) -> tuple[np.ndarray, np.ndarray]:
    """Track every object of ``clip`` from its frame-0 ``prompt`` ("mask" or "click")
    -> masks (T, K, H, W) bool, object scores (T, K)."""
    prompts = first_mask_prompts(clip) if prompt == "mask" else first_click_prompts(clip)
    t, k = clip.masks.shape[:2]
    masks = np.zeros(clip.masks.shape, bool)
    scores = np.zeros((t, k), np.float32)
    for i, frame in enumerate(clip.frames):
        result = stream.start(frame, prompts) if i == 0 else stream.track(frame)
        for j, oid in enumerate(clip.object_ids):
            masks[i, j] = result.masks[oid]
            scores[i, j] = result.object_scores[oid]
    return masks, scores


def interactive_ious(stream: SAM2Stream, clip: C.Clip, clicks: int = 5) -> list[list[float]]:
    """Per object of ``clip``: IoU on frame 0 after each of ``clicks`` simulated clicks."""
    frame = clip.frames[0]
    out = []
    for k in range(clip.masks.shape[1]):

        def predict(given: list[segmetrics.Click]) -> np.ndarray:
            points = [[x, y] for x, y, _ in given]
            labels = [int(positive) for _, _, positive in given]
            prompt = Prompt(points=points, labels=labels)
            if len(given) == 1:
                return stream.start(frame, {1: prompt}).masks[1]
            return stream.add_prompt(1, prompt).masks[1]

        out.append(segmetrics.interactive_iou(predict, clip.masks[0, k], clicks))
    return out


def evaluate_graphs(
    graphs: Mapping,
    clips: Sequence[C.Clip] | None = None,
    image_size: int = C.DEFAULT_SIZE,
    config: StreamConfig | None = None,
) -> dict[str, float]:
    """J, F, J&F (percent; per case; from a click) and 1-/5-click mIoU (percent) of a graph
    set on ``clips`` (default: the held-out set) streamed with ``config`` (default:
    ``stream_config(image_size)``, SAM 2's predictor); see the module docstring."""
    clips = heldout_clips() if clips is None else clips
    config = config or stream_config(image_size)
    scores = track_scores(graphs, clips, config)
    stream = open_stream(graphs, config)
    by_case: dict[str, list[segmetrics.VideoScores]] = {}
    clicked, one, five = [], [], []
    for clip, video in zip(clips, scores, strict=True):
        by_case.setdefault(clip.case, []).append(video)
        masks, _ = track_clip(stream, clip, "click")
        clicked.append(segmetrics.score_video(masks, clip.masks, drop_first_last=True))
        for ious in interactive_ious(stream, clip):
            one.append(ious[0])
            five.append(ious[-1])
    summary = segmetrics.summarize(scores)
    metrics = {"J&F": summary["J&F"], "J": summary["J"], "F": summary["F"]}
    if "J&F_se" in summary:  # standard error over objects (segmetrics.summarize)
        metrics["J&F_se"] = summary["J&F_se"]
    for case in C.CASES:
        if case in by_case:
            metrics[f"J&F_{case}"] = segmetrics.summarize(by_case[case])["J&F"]
    metrics["J&F_click"] = segmetrics.summarize(clicked)["J&F"]
    metrics["mIoU_1click"] = 100.0 * float(np.mean(one))
    metrics["mIoU_5click"] = 100.0 * float(np.mean(five))
    metrics["objects"] = summary["objects"]
    metrics["clips"] = float(len(clips))
    return metrics


def track_scores(
    graphs: Mapping, clips: Sequence[C.Clip], config: StreamConfig
) -> list[segmetrics.VideoScores]:
    """Per clip, J and F of every object tracked from its frame-0 mask (first and last
    frames dropped), streamed over ``graphs`` with ``config``."""
    stream = open_stream(graphs, config)
    return [
        segmetrics.score_video(track_clip(stream, clip, "mask")[0], clip.masks, True)
        for clip in clips
    ]


def compare_paired(
    a: tuple[Mapping, StreamConfig],
    b: tuple[Mapping, StreamConfig],
    clips: Sequence[C.Clip],
) -> dict[str, dict[str, float]]:
    """B against A on the same ``clips``, each (graph set, StreamConfig): per row ("J&F" over
    all objects, then "J&F_<case>" per motion case), segmetrics.paired_difference of the
    per-object J&F (frame-0 mask prompts, as ``evaluate_graphs``)."""
    scores_a, scores_b = (track_scores(g, clips, config) for g, config in (a, b))
    rows = {"J&F": (scores_a, scores_b)}
    for case in C.CASES:
        picked = [i for i, clip in enumerate(clips) if clip.case == case]
        if picked:
            rows[f"J&F_{case}"] = ([scores_a[i] for i in picked], [scores_b[i] for i in picked])
    return {
        name: segmetrics.paired_difference(
            segmetrics.object_scores(sa), segmetrics.object_scores(sb)
        )
        for name, (sa, sb) in rows.items()
    }


def format_paired(rows: Mapping[str, Mapping[str, float]], title: str) -> str:
    """``compare_paired``'s rows as an aligned text table: A, B, B - A +- SE ("n/a" for a
    single object), objects B did better / worse / the same on."""
    width = max(len(name) for name in rows)
    head = f"{'':<{width}}  {'A':>6}  {'B':>6}  {'B - A':>13}  better/worse/tied"
    lines = [title, head, "-" * len(head)]
    for name, r in rows.items():
        se = "n/a" if np.isnan(r["delta_se"]) else f"{r['delta_se']:.2f}"  # one object
        delta = f"{r['delta']:+.2f} +- {se}"
        counts = f"{r['better']:.0f}/{r['worse']:.0f}/{r['tied']:.0f}"
        lines.append(f"{name:<{width}}  {r['A']:>6.1f}  {r['B']:>6.1f}  {delta:>13}  {counts}")
    return "\n".join(lines)


def format_table(metrics: Mapping[str, float], title: str = "sam2-edge, held-out set") -> str:
    """The metrics as a small aligned text table (percentages with one decimal)."""
    rows = [
        (name, f"{value:.1f}" if name not in ("objects", "clips") else f"{value:.0f}")
        for name, value in metrics.items()
    ]
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * (width + 10)]
    lines += [f"{name:<{width}}  {value:>7}" for name, value in rows]
    return "\n".join(lines)
