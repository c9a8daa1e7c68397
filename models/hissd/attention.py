"""Entity attention: one network for any number of agents and landmarks.

Entities are a set of rows (B, E, F). Self-attention without positions is
permutation-equivariant over the E rows, and the readout attends from the agent's own row
(row 0), so the agent embedding does not depend on the order of the other rows nor on their
count as such: duplicating the whole set leaves every output unchanged (softmax weights halve,
each value appears twice). Written with plain matmuls so the ONNX export keeps E dynamic.
"""

from __future__ import annotations

import torch
from torch import nn


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Multi-head scaled dot-product attention.

    q (B, H, Q, d), k and v (B, H, K, d) -> (B, H, Q, d).
    """
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5  # (B, H, Q, K)
    return torch.softmax(scores, dim=-1) @ v


class EntityAttention(nn.Module):
    """Pre-norm transformer block over entities: (B, E, D) -> (B, E, D), permutation-equivariant."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            from edgekit.errors import InputError

            raise InputError(f"dim {dim} must be a multiple of heads {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, E, D) -> (B, H, E, D / H)."""
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)  # 3 x (B, E, D)
        mixed = attend(self.split(q), self.split(k), self.split(v))  # (B, H, E, D/H)
        x = x + self.out(mixed.transpose(1, 2).flatten(2))
        return x + self.mlp(self.norm2(x))


class EntityEncoder(nn.Module):
    """Entity sets (B, E, F) -> (tokens (B, E, D), agent embedding (B, D)).

    Row 0 must be the agent itself; the embedding is its token concatenated with an attention
    readout over all tokens queried from it, projected back to D.
    """

    def __init__(self, features: int, dim: int = 32, heads: int = 2, depth: int = 1) -> None:
        super().__init__()
        self.embed = nn.Linear(features, dim)
        self.blocks = nn.ModuleList(EntityAttention(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.read_q = nn.Linear(dim, dim)
        self.read_kv = nn.Linear(dim, 2 * dim)
        self.heads = heads
        self.project = nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU())

    def forward(self, entities: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(entities)  # (B, E, D)
        for block in self.blocks:
            x = block(x)
        tokens = self.norm(x)
        me = tokens[:, :1]  # (B, 1, D)
        k, v = self.read_kv(tokens).chunk(2, dim=-1)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.heads, -1)).transpose(1, 2)

        read = attend(split(self.read_q(me)), split(k), split(v)).transpose(1, 2).flatten(2)
        return tokens, self.project(torch.cat([me, read], dim=-1)[:, 0])  # (B, D)
