"""The "editor" graph as a GraphSpec, and a torch-runtime runner over it.

"editor": source (B, 3, S, S) float32 in [0, 1], instruction (B, I) float32 (the one-hot
groups of ``scenes.Instruction.vector``) -> edited (B, 3, S, S) float32, the predicted edit.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.models.omniedit.editors import Editor

GRAPH = "editor"
BATCH = {0: "batch"}


def editor_graph(editor: Editor, source: np.ndarray, instruction: np.ndarray) -> GraphSpec:
    """GraphSpec with example sources (B, 3, S, S) and instructions (B, I), batch axis dynamic."""
    src = torch.from_numpy(np.ascontiguousarray(source, np.float32))
    example = {
        "source": src,
        "instruction": torch.from_numpy(np.ascontiguousarray(instruction, np.float32)),
    }
    axes = {name: BATCH for name in (*example, "edited")}
    return GraphSpec(GRAPH, editor.eval(), example, ["edited"], axes)
