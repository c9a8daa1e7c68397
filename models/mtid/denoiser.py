"""The MTID denoiser: a small temporal transformer over plan steps that predicts the clean plan.

forward(noisy (B, T, D), timestep (B,) float32, task (B, K) one-hot, start (B, O), goal (B, O))
-> x0 (B, T, D). Inside: the condition projection of the noisy plan (layout.py), a token per
step (embedding + step position + timestep embedding), blocks of self-attention over the steps,
cross-attention to the interpolated latents (interpolation.py; left out in the ablation, where
the frames reach the network only through the projected observation block) and an MLP. The
network generates the action block only; the action-aware mask multiplies it by the predicted
task's action set, ``task @ table`` with ``table`` (K, A) 0/1, so actions outside the task are
zeroed; the projection then writes the task and observation blocks back.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.mtid.interpolation import LatentInterpolation
from edgekit.models.mtid.layout import Layout, project_torch


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of float timesteps (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.to(torch.float32)[:, None] * freqs[None, :]  # (B, half)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Attention(nn.Module):
    """Multi-head attention written out (exports to ONNX everywhere):
    forward(x (B, T, d), context (B, S, d)) -> (B, T, d); self-attention when context is x."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise InputError(f"width {dim} must be a multiple of the head count {heads}")
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        s, h = context.shape[1], self.heads
        q = self.q(x).reshape(b, t, h, d // h).transpose(1, 2)  # (B, h, T, d/h)
        k, v = self.kv(context).reshape(b, s, 2, h, d // h).permute(2, 0, 3, 1, 4)  # (B, h, S, d/h)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // h), dim=-1)  # (B, h, T, S)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class PlanBlock(nn.Module):
    """Pre-norm block: self-attention, optional cross-attention to latents, MLP.
    forward(x (B, T, d), latents (B, T, d) | None) -> (B, T, d)."""

    def __init__(self, dim: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm_cross = nn.LayerNorm(dim) if cross else None
        self.cross = Attention(dim, heads) if cross else None
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor, latents: torch.Tensor | None) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h)
        if self.cross is not None and self.norm_cross is not None:
            if latents is None:
                raise InputError("a block with cross-attention needs the interpolated latents")
            x = x + self.cross(self.norm_cross(x), latents)
        return x + self.mlp(self.norm2(x))


class PlanDenoiser(nn.Module):
    """The x0-predicting MTID denoiser (see the module docstring for the I/O).

    ``table`` (K, A) 0/1 is the task -> actions map of the action-aware mask (None: no mask);
    ``interpolation`` adds the latent interpolation module and the cross-attention.
    """

    def __init__(
        self,
        layout: Layout,
        horizon: int,
        table: np.ndarray | None = None,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        interpolation: bool = True,
    ) -> None:
        super().__init__()
        if horizon < 2:
            raise InputError(f"horizon must be >= 2, got {horizon}")
        if table is not None and np.shape(table) != (layout.tasks, layout.actions):
            raise InputError(
                f"mask table must be (K, A) = ({layout.tasks}, {layout.actions}), got {np.shape(table)}"
            )
        self.layout, self.horizon, self.dim = layout, horizon, dim
        self.embed = nn.Linear(layout.width, dim)
        self.position = nn.Parameter(torch.randn(1, horizon, dim) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.interpolation = (
            LatentInterpolation(layout.obs_dim, dim, horizon) if interpolation else None
        )
        self.blocks = nn.ModuleList(PlanBlock(dim, heads, interpolation) for _ in range(depth))
        self.norm_out = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, layout.actions)
        self.table: torch.Tensor | None
        if table is None:
            self.table = None
        else:
            self.register_buffer("table", torch.as_tensor(np.asarray(table), dtype=torch.float32))

    def forward(
        self,
        noisy: torch.Tensor,
        timestep: torch.Tensor,
        task: torch.Tensor,
        start: torch.Tensor,
        goal: torch.Tensor,
    ) -> torch.Tensor:
        x = project_torch(noisy[:, :, self.layout.action_slice], task, start, goal)  # (B, T, D)
        temb = self.time_mlp(timestep_embedding(timestep, self.dim))  # (B, d)
        h = self.embed(x) + self.position + temb[:, None, :]  # (B, T, d)
        latents = self.interpolation(start, goal) if self.interpolation is not None else None
        for block in self.blocks:
            h = block(h, latents)
        actions = self.out(self.norm_out(h))  # (B, T, A)
        if self.table is not None:
            actions = actions * (task @ self.table)[:, None, :]  # action-aware mask
        return project_torch(actions, task, start, goal)  # (B, T, D)
