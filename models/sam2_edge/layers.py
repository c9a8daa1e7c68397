"""Small building blocks of the compact SAM 2 (sam2-edge): conv blocks, attention, encodings.

Attention is written with plain matmul + softmax (no fused kernels, no complex numbers) so
every graph exports to ONNX / OpenVINO unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ConvBN(nn.Sequential):
    """Conv2d (no bias) + BatchNorm + optional ReLU: (B, Cin, H, W) -> (B, Cout, H/s, W/s)."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int = 3,
        stride: int = 1,
        groups: int = 1,
        act: bool = True,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
        ]
        if act:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class DWBlock(nn.Module):
    """Residual depthwise-separable block: x + pw(relu(pw(dw(x)))), shape-preserving."""

    def __init__(self, channels: int, kernel: int = 5, expand: int = 2) -> None:
        super().__init__()
        self.dw = ConvBN(channels, channels, kernel, groups=channels, act=False)
        self.expand = ConvBN(channels, channels * expand, 1)
        self.project = ConvBN(channels * expand, channels, 1, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.expand(self.dw(x)))


class LayerNorm2d(nn.Module):
    """LayerNorm over channels of (B, C, H, W)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return x * self.weight[:, None, None] + self.bias[:, None, None]


class MLP(nn.Module):
    """Linear layers with ReLU between them (no activation after the last one)."""

    def __init__(self, dims: list[int], sigmoid: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return torch.sigmoid(x) if self.sigmoid else x


class Attention(nn.Module):
    """Multi-head attention on (B, N, C) tokens; optional additive key mask (B, M) of 0 / -inf.

    ``inner`` (default C) is the projected width, split over ``heads``.
    """

    def __init__(
        self, dim: int, heads: int = 1, inner: int | None = None, kv_dim: int | None = None
    ):
        super().__init__()
        inner = inner or dim
        kv_dim = kv_dim or dim
        self.heads = heads
        self.q = nn.Linear(dim, inner)
        self.k = nn.Linear(kv_dim, inner)
        self.v = nn.Linear(kv_dim, inner)
        self.out = nn.Linear(inner, dim)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_bias: torch.Tensor | None = None,
        rope_q: tuple[torch.Tensor, torch.Tensor] | None = None,
        rope_k: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``rope_q`` / ``rope_k``: (cos, sin) tables (N, d) / (M, d) of per-head width d."""
        b, n, _ = q.shape
        m = k.shape[1]
        h = self.heads
        q = self.q(q).reshape(b, n, h, -1).transpose(1, 2)  # (B, h, N, d)
        k = self.k(k).reshape(b, m, h, -1).transpose(1, 2)  # (B, h, M, d)
        v = self.v(v).reshape(b, m, h, -1).transpose(1, 2)  # (B, h, M, d)
        if rope_q is not None:
            q = apply_rope(q, *rope_q)
        if rope_k is not None:
            k = apply_rope(k, *rope_k)
        logits = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))  # (B, h, N, M)
        if key_bias is not None:
            logits = logits + key_bias[:, None, None, :]
        out = torch.softmax(logits, dim=-1) @ v  # (B, h, N, d)
        return self.out(out.transpose(1, 2).reshape(b, n, -1))


def sine_grid_encoding(
    channels: int, height: int, width: int, temperature: float = 10000.0
) -> torch.Tensor:
    """2D sine/cosine encoding of a (height, width) grid at cell centres -> (1, C, H, W).

    Coordinates are normalised to [0, 1) of the grid so a pooled grid lines up with a fine one.
    """
    quarter = channels // 4
    freqs = temperature ** (-torch.arange(quarter, dtype=torch.float32) / quarter)  # (C/4,)
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) / height * 2 * math.pi
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) / width * 2 * math.pi
    y = ys[:, None, None] * freqs * 32  # (H, 1, C/4)
    x = xs[None, :, None] * freqs * 32  # (1, W, C/4)
    y = y.expand(height, width, quarter)
    x = x.expand(height, width, quarter)
    enc = torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], dim=-1)  # (H, W, C)
    return enc.permute(2, 0, 1)[None].contiguous()


class FourierPointEncoding(nn.Module):
    """Random Fourier features of (x, y) in [0, 1]: (..., 2) -> (..., C), fixed (a buffer)."""

    def __init__(self, channels: int, scale: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer(
            "basis", scale * torch.randn(2, channels // 2, generator=generator), persistent=True
        )

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        proj = (2 * coords - 1) @ self.basis * (2 * math.pi)  # (..., C/2)
        return torch.cat([proj.sin(), proj.cos()], dim=-1)

    def grid(self, height: int, width: int) -> torch.Tensor:
        """Encodings of a (height, width) grid at cell centres -> (1, C, H, W)."""
        on = {"dtype": torch.float32, "device": self.basis.device}  # the module's device
        ys = (torch.arange(height, **on) + 0.5) / height
        xs = (torch.arange(width, **on) + 0.5) / width
        coords = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)  # (H, W, 2) (x, y)
        return self.forward(coords).permute(2, 0, 1)[None]


def axial_rope(positions: torch.Tensor, dim: int, theta: float = 10000.0):
    """2D rotary tables for positions (N, 2) (x, y) in grid cells -> (cos, sin), each (N, dim).

    Half the channels rotate with x, half with y (axial RoPE, as SAM 2's memory attention),
    written with real cos / sin so every exporter handles it. Channel i pairs with i + dim/2.
    """
    quarter = dim // 4
    freqs = theta ** (-torch.arange(quarter, dtype=torch.float32) * 4 / dim)  # (dim/4,)
    angles = torch.cat([positions[:, :1] * freqs, positions[:, 1:] * freqs], dim=-1)  # (N, dim/2)
    angles = torch.cat([angles, angles], dim=-1)  # (N, dim)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (..., N, d) by tables (N, d): x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
