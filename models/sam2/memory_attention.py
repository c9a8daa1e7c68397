"""SAM 2's memory attention: the frame attends to itself and to the memory bank, with 2D RoPE.

The rotary position encoding is written in real arithmetic: channel pairs (x0, x1) rotate by
an angle theta into (x0 cos - x1 sin, x0 sin + x1 cos). The first half of the pairs rotates
with the token's column, the second half with its row. Memory keys repeat the frame's angles
once per memory frame; object-pointer tokens (appended after the spatial memory) take none.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.sam2.transformer import Attention


def rope_angles(dim: int, h: int, w: int, theta: float = 10000.0) -> torch.Tensor:
    """(h * w, dim / 2) rotation angles of the tokens of an h x w grid, row-major."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 4)[: dim // 4].float() / dim))
    index = torch.arange(h * w, dtype=torch.float32)
    col = index % w
    row = torch.div(index, w, rounding_mode="floor")
    return torch.cat([torch.outer(col, freqs), torch.outer(row, freqs)], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs of x (..., N, D) by angles with cos / sin (N, D/2)."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return rotated.flatten(-2)


class RoPEAttention(Attention):
    """Attention with 2D RoPE on the queries and on the first ``num_rope_keys`` keys.

    The queries are the h x w grid; the rotated keys are ``F`` memory frames of the same grid.
    """

    def __init__(self, dim: int, kv_dim: int, h: int, w: int, theta: float) -> None:
        super().__init__(dim, num_heads=1, kv_dim=kv_dim)
        self.theta = theta
        self.grid = (h, w)
        angles = rope_angles(self.internal_dim // self.num_heads, h, w, theta)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)

    def forward_rope(
        self, q: torch.Tensor, k_rope: torch.Tensor, v: torch.Tensor, k_plain: torch.Tensor | None
    ) -> torch.Tensor:
        """q (B, hw, C); k_rope (B, F*hw, kv); k_plain (B, T, kv) or None; v (B, F*hw + T, kv)."""
        cos, sin = self.rope_cos, self.rope_sin
        q = apply_rope(self.split_heads(self.q_proj(q)), cos, sin)
        b, n = q.shape[0], q.shape[2]
        k = self.split_heads(self.k_proj(k_rope))  # (B, heads, F*hw, d)
        heads, d = k.shape[1], k.shape[3]
        k = apply_rope(k.reshape(b, heads, -1, n, d), cos, sin).reshape(b, heads, -1, d)
        if k_plain is not None:
            k = torch.cat([k, self.split_heads(self.k_proj(k_plain))], dim=2)
        v = self.split_heads(self.v_proj(v))
        return self.attend(q, k, v)


class MemoryAttentionLayer(nn.Module):
    """Self-attention (RoPE), cross-attention to the memory (RoPE on spatial keys), FFN."""

    def __init__(self, dim: int, mem_dim: int, ffn: int, h: int, w: int, theta: float) -> None:
        super().__init__()
        self.self_attn = RoPEAttention(dim, dim, h, w, theta)
        self.cross_attn_image = RoPEAttention(dim, mem_dim, h, w, theta)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)
        self.activation = nn.ReLU()

    def forward(
        self,
        x: torch.Tensor,
        mem: torch.Tensor,
        mem_pos: torch.Tensor,
        ptr: torch.Tensor | None,
        ptr_pos: torch.Tensor | None,
    ) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.self_attn.forward_rope(y, y, y, None)
        y = self.norm2(x)
        keys_plain = None if ptr is None else ptr + ptr_pos
        values = mem if ptr is None else torch.cat([mem, ptr], dim=1)
        x = x + self.cross_attn_image.forward_rope(y, mem + mem_pos, values, keys_plain)
        y = self.norm3(x)
        return x + self.linear2(self.activation(self.linear1(y)))


class MemoryAttention(nn.Module):
    """Condition the current frame's tokens on the memory.

    curr (B, hw, C) with its position encoding; spatial memory (B, F*hw, Cm) with its encoding;
    optional object-pointer tokens (B, T, Cm) with theirs -> (B, hw, C).
    """

    def __init__(
        self, dim: int, mem_dim: int, num_layers: int, ffn: int, h: int, w: int, theta: float
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            MemoryAttentionLayer(dim, mem_dim, ffn, h, w, theta) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(
        self,
        curr: torch.Tensor,
        curr_pos: torch.Tensor,
        mem: torch.Tensor,
        mem_pos: torch.Tensor,
        ptr: torch.Tensor | None = None,
        ptr_pos: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = curr + 0.1 * curr_pos
        for layer in self.layers:
            x = layer(x, mem, mem_pos, ptr, ptr_pos)
        return self.norm(x)
