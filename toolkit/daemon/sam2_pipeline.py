"""The daemon's ``sam2-stream`` pipeline: SAM 2 streaming segmentation of the live camera.

It runs a deployed SAM 2 bundle (the graphs of ``edgekit.segmentation.graphs``, e.g. ``sam2-edge``)
through ``edgekit.segmentation.stream.SAM2Stream`` on the runtime the device profile picks. Objects come
from ``POST /pipelines/sam2-stream/prompt``; without one, the pipeline prompts object 1 with
a click at the frame centre, and re-prompts it after ``relock_after`` frames without the object
(so a demo camera that changes scene keeps showing a mask). Masks are drawn on ``/frame.png``.
A bundle fits it when its manifest states the graph set of ``edgekit.segmentation.graphs``' contract.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from edgekit.bundle.format import Bundle
from edgekit.daemon.pipelines import Context, Pipeline, check_frame
from edgekit.daemon.store import BundleStore
from edgekit.devices.camera import Frame
from edgekit.errors import InputError
from edgekit.segmentation.arrays import object_summary
from edgekit.tensorspec import TensorSpec

VIDEO_SEGMENTATION = "video-object-segmentation"


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

    def fits(self, bundle: Bundle) -> list[str]:
        """A SAM 2 graph set (``graph_set_problems``) with task "video-object-segmentation"."""
        task = bundle.manifest.get("task")
        problems = graph_set_problems(bundle)
        if task != VIDEO_SEGMENTATION:
            problems.insert(0, f"task is {task!r}, not {VIDEO_SEGMENTATION!r}")
        return problems

    def load(self, store: BundleStore) -> None:
        from edgekit.segmentation.region import open_stream
        from edgekit.segmentation.run import bundle_graph_set, bundle_stream_config

        bundle = store.get(self.bundle)
        sessions = {name: self.open_session(bundle, name) for name in bundle.graphs}
        graphs = bundle_graph_set(bundle, sessions)
        self.stream = open_stream(graphs, bundle_stream_config(bundle))
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


def graph_set_problems(bundle: Bundle) -> list[str]:
    """What keeps ``bundle``'s manifest from being a SAM 2 graph set the stream can run:
    every required graph of ``edgekit.segmentation.graphs``; per graph the contract's input names
    (fed by name), outputs by name or, when a runtime renamed them, by count and position;
    every tensor's dtype and rank; fixed sizes consistent across graphs (S, C, h, w, Cm, ...
    taken from the first graph that fixes them); a square fixed image size; stream options
    this edgekit knows (``segmentation.run.bundle_stream_config``)."""
    from edgekit.segmentation import graphs as G
    from edgekit.segmentation.run import bundle_stream_config

    problems = []
    missing = [g for g in G.REQUIRED_GRAPHS if g not in bundle.graphs]
    if missing:
        problems.append(
            f"the SAM 2 graph set lacks {missing}; it needs {list(G.REQUIRED_GRAPHS)}, "
            f"got {sorted(bundle.graphs)}"
        )
    dims: dict[str, int] = {}
    for graph in (g for g in G.GRAPH_NAMES if g in bundle.graphs):
        entry = bundle.graphs[graph]
        want_in, want_out = G.GRAPH_INPUTS[graph], G.GRAPH_OUTPUTS[graph]
        stated_in = {s.name: s for s in entry.inputs}
        if sorted(stated_in) != sorted(t.name for t in want_in):
            problems.append(
                f"graph '{graph}' inputs are {sorted(stated_in)}; the contract feeds "
                f"{[t.name for t in want_in]}"
            )
        pairs = [(t, stated_in[t.name]) for t in want_in if t.name in stated_in]
        out_names = [s.name for s in entry.outputs]
        if sorted(out_names) == sorted(t.name for t in want_out):
            by_name = {s.name: s for s in entry.outputs}
            pairs += [(t, by_name[t.name]) for t in want_out]
        elif len(out_names) == len(want_out):
            pairs += list(zip(want_out, entry.outputs, strict=True))
        else:
            problems.append(
                f"graph '{graph}' outputs are {out_names}; the contract expects "
                f"{[t.name for t in want_out]}"
            )
        problems += [f"graph '{graph}' {p}" for c, s in pairs for p in _tensor_problems(c, s, dims)]
    encoder = bundle.graphs.get(G.IMAGE_ENCODER)
    if encoder is None or not encoder.inputs:
        return problems
    size = encoder.inputs[0].shape[-2:]
    if not all(isinstance(d, int) for d in size):
        problems.append(
            f"graph 'image_encoder' input {encoder.inputs[0].describe()} needs a fixed square "
            "size S (the stream resizes every frame to it)"
        )
    if problems:  # the stream options are only worth reading for an otherwise sound set
        return problems
    try:  # the stream options the bundle records, as the pipeline will read them
        bundle_stream_config(bundle)
    except (InputError, TypeError, ValueError) as exc:
        problems.append(f"stream options: {exc}")
    return problems


def _tensor_problems(contract: Any, stated: TensorSpec, dims: dict[str, int]) -> list[str]:
    """Dtype, rank and fixed sizes of ``stated`` against the contract's tensor (at most one
    problem per tensor); fixed sizes a plain symbol names (``C``) are recorded in ``dims`` the
    first time they are seen."""
    from edgekit.segmentation.graphs import TensorContract

    wanted = f"{contract.dtype}{list(contract.shape)}"
    what = f"tensor {stated.describe()} (contract '{contract.name}': {wanted})"
    if stated.dtype != contract.dtype or len(stated.shape) != len(contract.shape):
        return [f"{what}: dtype or rank differs"]
    wrong = []
    for axis, (symbol, size) in enumerate(zip(contract.shape, stated.shape, strict=True)):
        if not isinstance(size, int):  # a dynamic axis of the export takes any size
            continue
        try:
            expected = TensorContract(contract.name, contract.dtype, (symbol,)).resolve(dims)[0]
        except KeyError:
            if isinstance(symbol, str) and symbol.isidentifier():
                dims[symbol] = size
            continue
        if expected != size:
            wrong.append(f"axis {axis} is {size}, expected {symbol} = {expected}")
    return [f"{what}: {', '.join(wrong)}"] if wrong else []
