"""The two D3U networks: a point forecaster and PatchDN, the patch-based conditional denoiser.

PatchDN works per channel: the noisy residual (B, C, H) is cut into H / P patches of length P,
each patch a token (with the point forecast's patch added as a token-level condition). A global
condition per channel, timestep embedding + an embedding of the history window + a channel
embedding, drives DiT blocks through adaLN-Zero: every block's shift / scale / gate come from a
zero-initialised linear map, so each block starts as the identity. The output is the
x0-prediction (B, C, H) (the clean residual).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.errors import InputError


class PointForecaster(nn.Module):
    """Channel-independent MLP forecaster: history (B, C, L) -> forecast (B, C, H).

    The window is standardised by its own mean (a RevIN-style shift) before the MLP.
    """

    def __init__(self, lookback: int, horizon: int, hidden: int = 128) -> None:
        super().__init__()
        self.linear = nn.Linear(lookback, horizon)
        self.mlp = nn.Sequential(nn.Linear(lookback, hidden), nn.GELU(), nn.Linear(hidden, horizon))

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        level = history.mean(dim=-1, keepdim=True)  # (B, C, 1)
        centred = history - level
        return self.linear(centred) + self.mlp(centred) + level  # (B, C, H)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of float timesteps (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.to(torch.float32)[:, None] * freqs[None, :]  # (B, half)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (N, T, d) * (1 + scale (N, d)) + shift (N, d)."""
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class SelfAttention(nn.Module):
    """Multi-head self-attention written out (qkv projection, softmax), exportable by every
    ONNX exporter: forward(x (N, T, d)) -> (N, T, d)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise InputError(f"width {dim} must be a multiple of the head count {heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(n, t, d))  # (N, T, d)


class DiTBlock(nn.Module):
    """Transformer block with adaLN-Zero conditioning: forward(x (N, T, d), c (N, d)) -> (N, T, d)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 2.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.ada[1].weight)  # adaLN-Zero: gates start at 0, the block is identity
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(c).chunk(6, dim=-1)  # 6 x (N, d)
        h = modulate(self.norm1(x), shift1, scale1)
        x = x + gate1[:, None, :] * self.attn(h)
        h = modulate(self.norm2(x), shift2, scale2)
        return x + gate2[:, None, :] * self.mlp(h)


class PatchDN(nn.Module):
    """forward(noisy (B, C, H), timestep (B,) float32, history (B, C, L), forecast (B, C, H))
    -> x0 (B, C, H), the predicted clean residual (or clean target for raw diffusion)."""

    def __init__(
        self,
        channels: int,
        lookback: int,
        horizon: int,
        patch: int = 4,
        dim: int = 48,
        depth: int = 2,
        heads: int = 4,
    ) -> None:
        super().__init__()
        if horizon % patch:
            raise InputError(f"horizon {horizon} must be a multiple of the patch length {patch}")
        self.patch, self.dim, self.channels = patch, dim, channels
        tokens = horizon // patch
        self.embed_noisy = nn.Linear(patch, dim)
        self.embed_forecast = nn.Linear(patch, dim)
        self.position = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.history_mlp = nn.Sequential(nn.Linear(lookback, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.channel = nn.Parameter(torch.zeros(channels, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(depth))
        self.norm_out = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ada_out = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.out = nn.Linear(dim, patch)
        for layer in (self.ada_out[1], self.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(
        self,
        noisy: torch.Tensor,
        timestep: torch.Tensor,
        history: torch.Tensor,
        forecast: torch.Tensor,
    ) -> torch.Tensor:
        b, c, h = noisy.shape
        n = b * c
        tokens = self.embed_noisy(noisy.reshape(n, h // self.patch, self.patch))  # (N, T, d)
        tokens = tokens + self.embed_forecast(forecast.reshape(n, h // self.patch, self.patch))
        tokens = tokens + self.position
        level = history.mean(dim=-1, keepdim=True)  # (B, C, 1): the history is centred
        cond = self.history_mlp((history - level).reshape(n, -1))  # (N, d)
        cond = cond + self.channel.repeat(b, 1)  # (N, d), row b * C + c is channel c
        temb = self.time_mlp(timestep_embedding(timestep, self.dim))  # (B, d)
        cond = cond + temb.repeat_interleave(c, dim=0)
        for block in self.blocks:
            tokens = block(tokens, cond)
        shift, scale = self.ada_out(cond).chunk(2, dim=-1)
        patches = self.out(modulate(self.norm_out(tokens), shift, scale))  # (N, T, P)
        return patches.reshape(b, c, h)
