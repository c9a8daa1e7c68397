"""The two MTID graphs as GraphSpecs, and torch-runtime runners over them.

"task": start (B, O), goal (B, O) float32 -> logits (B, K) float32.
"denoiser": noisy (B, T, D), timestep (B,) float32 in [0, timesteps - 1], task (B, K) one-hot,
start (B, O), goal (B, O) float32 -> x0 (B, T, D) float32, the predicted clean plan (condition
projection and action-aware mask included).
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.models.mtid.classifier import TaskClassifier
from edgekit.models.mtid.denoiser import PlanDenoiser

BATCH = {0: "batch"}


def mtid_graphs(
    classifier: TaskClassifier, denoiser: PlanDenoiser, start: np.ndarray, goal: np.ndarray
) -> list[GraphSpec]:
    """GraphSpecs with the frames ``start`` / ``goal`` (B, O) as the example batch."""
    s = torch.from_numpy(np.ascontiguousarray(start, dtype=np.float32))
    g = torch.from_numpy(np.ascontiguousarray(goal, dtype=np.float32))
    b = len(s)
    lay = denoiser.layout
    with torch.no_grad():
        task = torch.nn.functional.one_hot(classifier(s, g).argmax(-1), lay.tasks).float()
    example = {
        "noisy": torch.randn(
            b, denoiser.horizon, lay.width, generator=torch.Generator().manual_seed(0)
        ),
        "timestep": torch.linspace(0, 99, b),
        "task": task,
        "start": s,
        "goal": g,
    }
    return [
        GraphSpec(
            "task",
            classifier.eval(),
            {"start": s, "goal": g},
            ["logits"],
            {"start": BATCH, "goal": BATCH, "logits": BATCH},
        ),
        GraphSpec(
            "denoiser",
            denoiser.eval(),
            example,
            ["x0"],
            {name: BATCH for name in (*example, "x0")},
        ),
    ]
