"""The per-agent policy as an exportable graph, and torch-runtime runners over it.

"policy": entities (B, E, 5) float32, row 0 the agent itself, E = 2 n for n agents (dynamic:
one artifact serves every agent count) -> logits (B, 5) float32 over (stay, +x, -x, +y, -y).
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.models.hissd.networks import SkillPolicy

GRAPH = "policy"
AXES = {"entities": {0: "batch", 1: "entities"}, "logits": {0: "batch"}}


def policy_graph(policy: SkillPolicy, entities: np.ndarray) -> GraphSpec:
    """GraphSpec of ``policy`` with ``entities`` (B, E, 5) as the example batch."""
    example = torch.from_numpy(np.ascontiguousarray(entities, dtype=np.float32))
    return GraphSpec(GRAPH, policy.eval(), {"entities": example}, ["logits"], AXES)
