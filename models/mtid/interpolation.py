"""MTID's latent temporal interpolation module.

The start and goal frames are encoded by one shared encoder E; step j of the plan gets the
latent z_j = (1 - alpha_j) E(V_s) + alpha_j E(V_g) with a learnable alpha_j = sigmoid(w_j), so
the denoiser sees an estimate of every intermediate state, not only the two ends. The alphas
start evenly spread, (j + 1/2) / T, and are trained end to end with the denoiser.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.errors import InputError


class LatentInterpolation(nn.Module):
    """forward(start (B, O), goal (B, O)) -> latents z (B, T, dim)."""

    def __init__(self, obs_dim: int, dim: int, horizon: int) -> None:
        super().__init__()
        if horizon < 2:
            raise InputError(f"horizon must be >= 2, got {horizon}")
        self.encoder = nn.Sequential(nn.Linear(obs_dim, dim), nn.GELU(), nn.Linear(dim, dim))
        init = (torch.arange(horizon, dtype=torch.float32) + 0.5) / horizon
        self.logits = nn.Parameter(torch.logit(init))  # w_j, (T,)

    def alphas(self) -> torch.Tensor:
        """(T,) interpolation weights alpha_j = sigmoid(w_j) in (0, 1)."""
        return torch.sigmoid(self.logits)

    def forward(self, start: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        e_start, e_goal = self.encoder(start), self.encoder(goal)  # (B, d) each
        alpha = self.alphas()[None, :, None]  # (1, T, 1)
        return (1 - alpha) * e_start[:, None, :] + alpha * e_goal[:, None, :]  # (B, T, d)
