"""The daemon's ``sam2-stream`` pipeline: SAM 2 streaming segmentation of the live camera.

It runs a deployed SAM 2 bundle (the graphs of ``edgekit.sam2_graphs``, e.g. ``sam2-edge``)
through ``edgekit.sam2_stream.SAM2Stream`` on the runtime the device profile picks. Objects come
from ``POST /pipelines/sam2-stream/prompt``; without one, the pipeline prompts object 1 with
a click at the frame centre, and re-prompts it after ``relock_after`` frames without the object
(so a demo camera that changes scene keeps showing a mask). Masks are drawn on ``/frame.png``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from edgekit.daemon.pipelines import Context, Pipeline, check_frame
from edgekit.daemon.store import BundleStore
from edgekit.devices.camera import Frame
from edgekit.errors import InputError


class Sam2StreamPipeline(Pipeline):
    """Track prompted objects frame by frame; results: per object id its mask area, box and
    object score (the masks themselves are kept for the rendered frame)."""

    relock_after: int = 30

    def __post_init__(self) -> None:
        super().__post_init__()
        self._lock = threading.Lock()
        self._pending: dict[int, dict[str, Any]] = {}
        self._reset = True
        self.masks: dict[int, np.ndarray] = {}

    def render_extras(self) -> dict[str, Any]:
        return {"_masks": self.masks}

    def load(self, store: BundleStore) -> None:
        from edgekit.sam2_run import bundle_graph_set, bundle_stream_config
        from edgekit.sam2_stream import SAM2Stream

        bundle = store.get(self.bundle)
        sessions = {name: self.open_session(bundle, name) for name in bundle.graphs}
        graphs = bundle_graph_set(bundle, sessions)
        self.stream = SAM2Stream(graphs, bundle_stream_config(bundle))
        self._absent = 0

    def set_prompts(self, objects: dict[int, dict[str, Any]], reset: bool) -> None:
        """Queue prompts for the next frame: {obj_id: {"points", "labels", "box"}}; ``reset``
        starts a new stream with only these objects."""
        if not objects:
            raise InputError("give at least one object: {'objects': {'1': {'points': ...}}}")
        with self._lock:
            self._pending = {int(k): dict(v) for k, v in objects.items()}
            self._reset = reset

    def process(self, frame: Frame, ctx: Context) -> dict[str, Any]:
        image = check_frame(frame.image)
        h, w = image.shape[:2]
        start = time.perf_counter()
        with self._lock:
            pending, self._pending = self._pending, {}
            reset = self._reset
        if not self.stream.object_ids or (pending and reset):
            prompts = pending or {1: {"points": [[w / 2, h / 2]], "labels": [1]}}
            result = self.stream.start(image, prompts)
            self._absent = 0
        else:
            result = self.stream.track(image)
            for obj_id, prompt in pending.items():
                if obj_id in self.stream.object_ids:
                    result = self.stream.add_prompt(obj_id, prompt)
                else:
                    result = self.stream.add_object(obj_id, prompt)
            visible = any(s > 0 for s in result.object_scores.values())
            self._absent = 0 if visible else self._absent + 1
            if self._absent >= self.relock_after:
                self.stream = type(self.stream)(self.stream.graphs, self.stream.config)
        ctx.stage("segment", time.perf_counter() - start)
        self.masks = dict(result.masks)
        return {
            "frame_index": result.frame_index,
            "objects": {
                str(k): object_summary(result.masks[k], result.object_scores[k])
                for k in result.masks
            },
            "graph_ms": {k: round(1e3 * v, 3) for k, v in self.stream.timings.items()},
        }


def object_summary(mask: np.ndarray, score: float) -> dict[str, Any]:
    """Area (pixels), bounding box (x0, y0, x1, y1) or None, and the object score."""
    ys, xs = np.nonzero(mask)
    box = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None
    return {"area": int(len(xs)), "box": box, "score": round(float(score), 4)}
