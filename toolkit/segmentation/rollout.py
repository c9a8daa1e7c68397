"""Streaming rollout parity of SAM 2 graph sets, and graph sets from exported files.

``rollout_parity`` streams one clip through a reference and a candidate graph set (torch vs an
exported bundle) and compares them frame by frame: what ``verify`` reports for streaming cards.
``graph_set_from_files`` loads exported graphs into an edgekit runtime as a graph set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.prompts import Prompt
from edgekit.segmentation.region import open_stream
from edgekit.segmentation.stream import GraphFn, StreamConfig


@dataclass
class RolloutParity:
    """A candidate graph set against a reference over one clip, frame by frame.

    ``ious``: per object id, the mask IoU on each frame (1.0 when both masks are empty);
    ``drift``: per frame, the largest |low-res logit difference| over the objects;
    ``reference_area``: per object id, the reference mask's area fraction on each frame (a
    comparison of empty or full masks proves little).
    """

    ious: dict[int, list[float]]
    drift: list[float]
    reference_area: dict[int, list[float]]

    @property
    def min_iou(self) -> float:
        return min(min(v) for v in self.ious.values())

    def to_json(self) -> dict[str, Any]:
        return {"min_iou": self.min_iou, "max_drift": max(self.drift), **vars(self)}


def rollout_parity(
    reference: Mapping[str, GraphFn],
    candidate: Mapping[str, GraphFn],
    frames: list[np.ndarray],
    prompts: Mapping[int, Prompt | Mapping[str, Any]],
    config: StreamConfig | None = None,
) -> RolloutParity:
    """Stream ``frames`` (prompts on the first) through both graph sets and compare them."""
    if not frames:
        raise InputError("rollout_parity needs at least one frame")
    runs = []
    for graphs in (reference, candidate):
        stream = open_stream(graphs, config)
        runs.append([stream.start(frames[0], prompts)] + [stream.track(f) for f in frames[1:]])
    ious: dict[int, list[float]] = {obj: [] for obj in runs[0][0].masks}
    area: dict[int, list[float]] = {obj: [] for obj in ious}
    drift = []
    for ref, got in zip(*runs, strict=True):
        diffs = [0.0]
        for obj, values in ious.items():
            a, b = ref.masks[obj], got.masks[obj]
            union = np.count_nonzero(a | b)
            values.append(1.0 if union == 0 else np.count_nonzero(a & b) / union)
            area[obj].append(float(a.mean()))
            diffs.append(float(np.abs(ref.low_res_logits[obj] - got.low_res_logits[obj]).max()))
        drift.append(max(diffs))
    return RolloutParity(ious, drift, area)


def with_contract_names(graph: str, session: Any) -> GraphFn:
    """``session.run``, its outputs keyed by the contract's names.

    OpenVINO folds an output that is a constant (``image_pos``, ``mem_pos``) into an internal
    tensor and may report that tensor's name instead; outputs keep the exported order, so they
    are matched by position when the names differ but the count agrees.
    """
    want = G.output_names(graph) if graph in G.GRAPH_NAMES else []
    got = [spec.name for spec in session.outputs]
    if not want or got == want:
        return session.run
    if len(got) != len(want):
        raise InputError(f"graph '{graph}' has outputs {got}; the contract expects {want}")

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = session.run(feeds)
        return {name: out[old] for name, old in zip(want, got, strict=True)}

    return run
