"""A search region per object: track a small object at the frame's own resolution.

The streaming predictor shrinks the whole frame to its S x S input, so a person 40 px wide in
a 768 x 576 frame is 13 px wide at S = 256. With ``StreamConfig.search_region`` = k, each
object is tracked in its own crop of the frame instead, as single-object trackers do (SiamFC,
OSTrack: a search area around the last position, k = 4 in OSTrack): a window of side
``max(k * sqrt(w * h), 2 * max(w, h), S)`` frame pixels around the prompt's box (w x h), clipped
to the frame, fixed in size for the object's life (so the crop moves like a camera pan and
never zooms), re-centred on every frame on the box of the object's previous mask (kept where it
was while the mask is empty). The lower bound S means a crop is never enlarged: where the
object is large or the frame is small the window is the whole frame and tracking is exactly
the whole-frame predictor's.

Each object gets its own ``SAM2Stream`` (its own image encoding per frame: the cost of a frame
grows with the number of objects). Masks come back at frame resolution; ``low_res_logits`` are
in the object's crop. A prompt made only of points has no size: such an object is tracked on
the whole frame.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation.config import StreamConfig
from edgekit.segmentation.prompts import Prompt, check_frame, parse_prompt
from edgekit.segmentation.stream import (
    FrameResult,
    GraphFn,
    SAM2Stream,
    StreamState,
    check_prompt_map,
)
from edgekit.segmentation.tracking import mask_box


@dataclass(frozen=True)
class Region:
    """A window of the frame: top-left ``(x0, y0)``, size ``w`` x ``h`` pixels."""

    x0: int
    y0: int
    w: int
    h: int

    def crop(self, frame: np.ndarray) -> np.ndarray:
        """(H, W, ...) -> the window (h, w, ...), contiguous."""
        return np.ascontiguousarray(frame[self.y0 : self.y0 + self.h, self.x0 : self.x0 + self.w])

    def paste(self, mask: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
        """A window's (h, w) mask -> the frame's (H, W) bool mask, False outside the window."""
        full = np.zeros(hw, bool)
        full[self.y0 : self.y0 + self.h, self.x0 : self.x0 + self.w] = mask
        return full

    def prompt(self, prompt: Prompt) -> Prompt:
        """A prompt in frame pixels -> the same prompt in the window's pixels."""
        shift = np.array([self.x0, self.y0], np.float64)
        points = None if prompt.points is None else np.asarray(prompt.points, float) - shift
        box = None if prompt.box is None else np.asarray(prompt.box, float) - np.tile(shift, 2)
        mask = None if prompt.mask is None else self.crop(np.asarray(prompt.mask))
        return Prompt(points=points, labels=prompt.labels, box=box, mask=mask)

    def contains(self, box: tuple[float, float, float, float]) -> bool:
        """Whether the box (x0, y0, x1, y1) lies inside the window."""
        x0, y0, x1, y1 = box
        return x0 >= self.x0 and y0 >= self.y0 and x1 <= self.x0 + self.w and y1 <= self.y0 + self.h


def region_side(box: tuple[float, float, float, float], factor: float, image_size: int) -> int:
    """The window side for an object whose first box is ``box``: ``factor`` x sqrt(area), at
    least twice the box's longer side and at least ``image_size`` (never enlarge)."""
    w, h = box[2] - box[0], box[3] - box[1]
    return int(np.ceil(max(factor * np.sqrt(max(w * h, 1.0)), 2.0 * max(w, h), image_size)))


def region_around(center: tuple[float, float], side: int, hw: tuple[int, int]) -> Region:
    """The ``side`` x ``side`` window centred on ``center`` (x, y), clipped to the frame size
    ``hw`` (each side at most the frame's) and shifted inside it."""
    height, width = hw
    w, h = min(side, width), min(side, height)
    x0 = int(np.clip(round(center[0] - w / 2), 0, width - w))
    y0 = int(np.clip(round(center[1] - h / 2), 0, height - h))
    return Region(x0, y0, w, h)


def prompt_box(prompt: Prompt, hw: tuple[int, int]) -> tuple[float, float, float, float] | None:
    """The extent of a (checked) prompt in frame pixels: its box, or its mask's box; None for
    points alone."""
    if prompt.box is not None:
        x0, y0, x1, y1 = (float(v) for v in np.asarray(prompt.box, float).reshape(4))
        return max(x0, 0.0), max(y0, 0.0), min(x1, hw[1]), min(y1, hw[0])
    if prompt.mask is not None:
        return mask_box(np.asarray(prompt.mask) != 0)
    return None


def _inside(region: Region, prompt: Prompt, hw: tuple[int, int]) -> bool:
    """Whether every part of a (checked) prompt lies in ``region``: its box or mask and its
    points."""
    extent = prompt_box(prompt, hw)
    if extent is not None and not region.contains(extent):
        return False
    if prompt.points is None:
        return True
    points = np.asarray(prompt.points, float).reshape(-1, 2)
    return all(region.contains((x, y, x, y)) for x, y in points)


def _as_prompt(prompt: Prompt | Mapping[str, Any]) -> Prompt:
    return Prompt(**prompt) if isinstance(prompt, Mapping) else prompt


@dataclass
class _Tracked:
    stream: SAM2Stream
    side: int | None  # None: the whole frame (a points-only prompt)
    region: Region
    last: FrameResult  # the stream's output on the current frame (window coordinates)


class RegionStream(StreamState):
    """``SAM2Stream``'s interface with a search region per object (``config.search_region``)."""

    def __init__(self, graphs: Mapping[str, GraphFn], config: StreamConfig) -> None:
        if config.search_region is None:
            raise InputError("RegionStream needs StreamConfig.search_region (a factor >= 1)")
        self.graphs = dict(graphs)
        self.config = config
        self.timings: dict[str, float] = {}
        self._objects: dict[int, _Tracked] = {}
        self._frame: np.ndarray | None = None
        self._frame_index = -1

    def start(
        self, frame: np.ndarray, prompts: Mapping[int, Prompt | Mapping[str, Any]]
    ) -> FrameResult:
        """Begin a stream on ``frame`` with one prompt per object id; forget any previous one."""
        hw = check_frame(frame)
        check_prompt_map(prompts)
        checked = {k: self._checked(p, hw) for k, p in prompts.items()}
        self._objects, self._frame, self._frame_index = {}, frame, 0
        self.timings = {}
        results = {k: self._begin(k, p, hw) for k, p in checked.items()}
        return self._result(results, hw)

    def track(self, frame: np.ndarray) -> FrameResult:
        """Segment every object on the next ``frame`` (each in its window)."""
        if self._frame is None:
            raise InputError("track called before start: give the first frame and prompts first")
        hw = check_frame(frame)
        if hw != self._frame.shape[:2]:
            raise InputError(
                f"frame size changed from {self._frame.shape[:2]} to {hw} within one stream"
            )
        self._frame, self._frame_index = frame, self._frame_index + 1
        self.timings = {}
        results = {}
        for obj_id, tracked in self._objects.items():
            tracked.last = tracked.stream.track(tracked.region.crop(frame))
            results[obj_id] = tracked.last
            self._add_timings(tracked.stream)
        return self._result(results, hw)

    def add_object(
        self, obj_id: int, prompt: Prompt | Mapping[str, Any] | None = None, **fields: Any
    ) -> FrameResult:
        """Start tracking a new object from a prompt on the current frame."""
        if self._frame is None:
            raise InputError("add_object called before start")
        if obj_id in self._objects:
            raise InputError(f"object id {obj_id} is already tracked; use add_prompt to correct it")
        hw = self._frame.shape[:2]
        self.timings = {}
        self._begin(obj_id, self._checked(prompt if prompt is not None else fields, hw), hw)
        return self._current(hw)

    def add_prompt(
        self, obj_id: int, prompt: Prompt | Mapping[str, Any] | None = None, **fields: Any
    ) -> FrameResult:
        """Correct a tracked object on the current frame: a box or mask that leaves its window
        re-centres the window there (the object restarts from the correction)."""
        if self._frame is None:
            raise InputError("add_prompt called before start")
        if obj_id not in self._objects:
            raise InputError(f"unknown object id {obj_id!r}; tracked ids: {self.object_ids}")
        hw = self._frame.shape[:2]
        prompt = self._checked(prompt if prompt is not None else fields, hw)
        tracked = self._objects[obj_id]
        self.timings = {}
        if _inside(tracked.region, prompt, hw):
            tracked.last = tracked.stream.add_prompt(obj_id, tracked.region.prompt(prompt))
            self._add_timings(tracked.stream)
        else:
            self._begin(obj_id, prompt, hw)
        return self._current(hw)

    def remove_object(self, obj_id: int) -> None:
        """Stop tracking ``obj_id`` and drop its memory."""
        if obj_id not in self._objects:
            raise InputError(f"unknown object id {obj_id!r}; tracked ids: {self.object_ids}")
        del self._objects[obj_id]

    def memory_stats(self) -> dict[int, dict[str, int]]:
        """Per object: its stream's memory (conditioning and recent frames, pointers, bytes)."""
        return {k: t.stream.memory_stats()[k] for k, t in self._objects.items()}

    def regions(self) -> dict[int, Region]:
        """Per object, the window its next frame will be cropped to."""
        return {k: t.region for k, t in self._objects.items()}

    # ---- internals ---------------------------------------------------------------------------
    def _checked(self, prompt: Prompt | Mapping[str, Any], hw: tuple[int, int]) -> Prompt:
        parse_prompt(prompt, hw, self.config.image_size)  # every check, in frame pixels
        return _as_prompt(prompt)

    def _begin(self, obj_id: int, prompt: Prompt, hw: tuple[int, int]) -> FrameResult:
        extent = prompt_box(prompt, hw)
        if extent is None:
            side, region = None, Region(0, 0, hw[1], hw[0])
        else:
            side = region_side(extent, float(self.config.search_region), self.config.image_size)
            center = ((extent[0] + extent[2]) / 2, (extent[1] + extent[3]) / 2)
            region = region_around(center, side, hw)
        stream = SAM2Stream(self.graphs, self.config)
        result = stream.start(region.crop(self._frame), {obj_id: region.prompt(prompt)})
        self._add_timings(stream)
        self._objects[obj_id] = _Tracked(stream, side, region, result)
        return result

    def _add_timings(self, stream: SAM2Stream) -> None:
        for name, seconds in stream.timings.items():
            self.timings[name] = self.timings.get(name, 0.0) + seconds

    def _current(self, hw: tuple[int, int]) -> FrameResult:
        """The current frame's result of every object (their streams' last outputs)."""
        return self._result({k: t.last for k, t in self._objects.items()}, hw)

    def _result(self, results: Mapping[int, FrameResult], hw: tuple[int, int]) -> FrameResult:
        """Paste each object's mask into the frame, then move its window onto that mask."""
        masks, scores, logits = {}, {}, {}
        for obj_id, result in results.items():
            tracked = self._objects[obj_id]
            masks[obj_id] = tracked.region.paste(result.masks[obj_id], hw)
            scores[obj_id] = result.object_scores[obj_id]
            logits[obj_id] = result.low_res_logits[obj_id]
            box = mask_box(masks[obj_id])
            if tracked.side is not None and box is not None:
                center = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
                tracked.region = region_around(center, tracked.side, hw)
        return FrameResult(self._frame_index, masks, scores, logits)


def open_stream(
    graphs: Mapping[str, GraphFn], config: StreamConfig | None = None
) -> SAM2Stream | RegionStream:
    """The streaming predictor ``config`` asks for: ``SAM2Stream`` on the whole frame, or a
    ``RegionStream`` when ``config.search_region`` is set."""
    config = config or StreamConfig()
    if config.search_region is None:
        return SAM2Stream(graphs, config)
    return RegionStream(graphs, config)
