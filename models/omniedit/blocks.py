"""Transformer pieces shared by the three editors: patch embedding with 2-D sin-cos positions
and a pre-norm joint-attention block (MM-DiT style: text and image tokens attend to each other
in one sequence)."""

from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.errors import InputError


def sincos_positions(grid: int, dim: int) -> torch.Tensor:
    """(grid * grid, dim) fixed 2-D sin-cos position codes (row codes | column codes)."""
    if dim % 4:
        raise InputError(f"width {dim} must be a multiple of 4 for 2-D sin-cos positions")
    quarter = dim // 4
    freqs = torch.exp(-math.log(100.0) * torch.arange(quarter, dtype=torch.float32) / quarter)
    rows, cols = torch.meshgrid(
        torch.arange(grid, dtype=torch.float32),
        torch.arange(grid, dtype=torch.float32),
        indexing="ij",
    )
    parts = []
    for axis in (rows.reshape(-1), cols.reshape(-1)):
        args = axis[:, None] * freqs[None, :]  # (N, quarter)
        parts += [torch.sin(args), torch.cos(args)]
    return torch.cat(parts, dim=1)  # (N, dim)


class PatchEmbed(nn.Module):
    """(B, C, S, S) image -> (B, (S / P)^2, D) tokens with positions added."""

    def __init__(self, channels: int, size: int, patch: int, dim: int) -> None:
        super().__init__()
        if patch < 1 or size % patch:
            raise InputError(f"image size {size} must be a multiple of the patch {patch}")
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)
        self.register_buffer("pos", sincos_positions(size // patch, dim), persistent=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.proj(image).flatten(2).transpose(1, 2) + self.pos  # (B, N, D)


class JointBlock(nn.Module):
    """Pre-norm transformer block over one token sequence with adaLN conditioning (as SD3 feeds
    its pooled text vector): forward(x (B, T, D), c (B, D)) -> (B, T, D)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        if dim % heads:
            raise InputError(f"width {dim} must be a multiple of the head count {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.ada = nn.Linear(dim, 4 * dim)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, shift2, scale2 = self.ada(c)[:, None].chunk(4, dim=-1)  # (B, 1, D) each
        x = x + self.attention(self.norm1(x) * (1 + scale1) + shift1)
        return x + self.mlp(self.norm2(x) * (1 + scale2) + shift2)  # (B, T, D)
