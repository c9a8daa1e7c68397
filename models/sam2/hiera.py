"""The Hiera trunk of SAM 2's image encoder.

A 4-stage hierarchical ViT: a 7x7 stride-4 patch embedding, then blocks of windowed (or, in a
few blocks, global) attention. The first block of stages 2-4 halves the resolution by max-pooling
its queries and doubles the width. Returns the four stage outputs (strides 4, 8, 16, 32).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.models.sam2.config import HieraConfig
from edgekit.models.sam2.layers import MLP


def window_partition(x: torch.Tensor, size: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, H, W, C) -> (B * windows, size, size, C), zero-padding H, W up to multiples of size."""
    b, h, w, c = x.shape
    pad_h, pad_w = (size - h % size) % size, (size - w % size) % size
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    hp, wp = h + pad_h, w + pad_w
    x = x.view(b, hp // size, size, wp // size, size, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, size, size, c), (hp, wp)


def window_unpartition(
    windows: torch.Tensor, size: int, padded: tuple[int, int], hw: tuple[int, int]
) -> torch.Tensor:
    """Inverse of ``window_partition``: (B * windows, size, size, C) -> (B, H, W, C)."""
    hp, wp = padded
    h, w = hw
    b = windows.shape[0] // ((hp // size) * (wp // size))
    x = windows.reshape(b, hp // size, wp // size, size, size, -1).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(b, hp, wp, -1)
    return x[:, :h, :w, :] if (hp > h or wp > w) else x


class PatchEmbed(nn.Module):
    """(B, 3, H, W) -> (B, H/4, W/4, dim) with a 7x7 stride-4 convolution."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=7, stride=4, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).permute(0, 2, 3, 1)


def _pool_nhwc(x: torch.Tensor, pool: nn.Module) -> torch.Tensor:
    """Apply an NCHW pooling module to an (B, H, W, C) tensor."""
    return pool(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class MultiScaleAttention(nn.Module):
    """Multi-head self-attention on (B, H, W, dim) windows, optionally pooling the queries."""

    def __init__(self, dim: int, dim_out: int, num_heads: int, q_pool: nn.Module | None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_pool = q_pool
        self.qkv = nn.Linear(dim, dim_out * 3)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.num_heads, -1)
        q, k, v = qkv.unbind(2)  # each (B, HW, heads, d)
        if self.q_pool is not None:
            q = _pool_nhwc(q.reshape(b, h, w, -1), self.q_pool)
            h, w = q.shape[1:3]
            q = q.reshape(b, h * w, self.num_heads, -1)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        )
        return self.proj(out.transpose(1, 2).reshape(b, h, w, -1))


class MultiScaleBlock(nn.Module):
    """Pre-norm transformer block on (B, H, W, C) with windowed attention and an MLP."""

    def __init__(
        self,
        dim: int,
        dim_out: int,
        num_heads: int,
        mlp_ratio: float,
        q_stride: tuple[int, int] | None,
        window_size: int,
    ) -> None:
        super().__init__()
        self.dim, self.dim_out = dim, dim_out
        self.window_size = window_size
        self.q_stride = q_stride
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.pool = nn.MaxPool2d(kernel_size=q_stride, stride=q_stride) if q_stride else None
        self.attn = MultiScaleAttention(dim, dim_out, num_heads, self.pool)
        self.norm2 = nn.LayerNorm(dim_out, eps=1e-6)
        self.mlp = MLP(dim_out, int(dim_out * mlp_ratio), dim_out, 2, activation=nn.GELU)
        if dim != dim_out:
            self.proj = nn.Linear(dim, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.norm1(x)
        if self.dim != self.dim_out:
            shortcut = self.proj(x)
            if self.pool is not None:
                shortcut = _pool_nhwc(shortcut, self.pool)
        size = self.window_size
        hw = (x.shape[1], x.shape[2])
        padded = hw
        if size > 0:
            x, padded = window_partition(x, size)
        x = self.attn(x)
        if self.q_stride:
            # the queries were pooled: the windows (and the map) shrank by the stride
            size = self.window_size // self.q_stride[0]
            hw = (shortcut.shape[1], shortcut.shape[2])
            padded = (hw[0] + (size - hw[0] % size) % size, hw[1] + (size - hw[1] % size) % size)
        if self.window_size > 0:
            x = window_unpartition(x, size, padded, hw)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class Hiera(nn.Module):
    """(B, 3, S, S) normalised image -> 4 maps (B, C_i, S/4/2^i, S/4/2^i), highest res first."""

    def __init__(self, config: HieraConfig) -> None:
        super().__init__()
        self.config = config
        dim, heads = config.embed_dim, config.num_heads
        self.patch_embed = PatchEmbed(dim)
        self.pos_embed = nn.Parameter(
            torch.zeros(1, dim, *config.window_pos_embed_bkg_spatial_size)
        )
        win = config.window_spec[0]
        self.pos_embed_window = nn.Parameter(torch.zeros(1, dim, win, win))
        stage_ends = config.stage_ends
        q_pool_blocks = [end + 1 for end in stage_ends[:-1]][: config.q_pool]
        self.stage_ends = stage_ends
        self.blocks = nn.ModuleList()
        stage = 0
        for i in range(config.depth):
            dim_out = dim
            # a stage's first block still uses the previous stage's window size
            window = 0 if i in config.global_att_blocks else config.window_spec[stage]
            if i - 1 in stage_ends:
                dim_out = int(dim * config.dim_mul)
                heads = int(heads * config.head_mul)
                stage += 1
            q_stride = config.q_stride if i in q_pool_blocks else None
            self.blocks.append(
                MultiScaleBlock(dim, dim_out, heads, config.mlp_ratio, q_stride, window)
            )
            dim = dim_out

    def position_embedding(self, h: int, w: int) -> torch.Tensor:
        """(1, h, w, C): the background embedding resized bicubically + the tiled window one."""
        pos = F.interpolate(self.pos_embed, size=(h, w), mode="bicubic")
        win = self.pos_embed_window
        pos = pos + win.tile([a // b for a, b in zip(pos.shape, win.shape, strict=True)])
        return pos.permute(0, 2, 3, 1)

    def forward(self, x: torch.Tensor, pos_embed: torch.Tensor | None = None) -> list[torch.Tensor]:
        """``pos_embed`` (1, S/4, S/4, C): a precomputed ``position_embedding`` (for export)."""
        x = self.patch_embed(x)  # (B, S/4, S/4, C)
        x = x + (pos_embed if pos_embed is not None else self.position_embedding(*x.shape[1:3]))
        outputs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.stage_ends:
                outputs.append(x.permute(0, 3, 1, 2))
        return outputs
