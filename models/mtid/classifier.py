"""The task classifier whose prediction conditions the MTID planner and picks its action mask."""

from __future__ import annotations

import torch
from torch import nn


class TaskClassifier(nn.Module):
    """The task predictor whose output conditions the planner:
    forward(start (B, O), goal (B, O)) -> logits (B, K)."""

    def __init__(self, obs_dim: int, tasks: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2 * obs_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, tasks),
        )  # fmt: skip

    def forward(self, start: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([start, goal], dim=-1))  # (B, K)
