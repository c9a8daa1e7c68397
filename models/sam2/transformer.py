"""The mask decoder's two-way transformer: tokens attend to the image and the image to tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.models.sam2.layers import MLP


class Attention(nn.Module):
    """Multi-head attention whose projections may narrow the width by ``downsample_rate``.

    q (B, Nq, C), k and v (B, Nk, kv_dim) -> (B, Nq, C).
    """

    def __init__(
        self, dim: int, num_heads: int, downsample_rate: int = 1, kv_dim: int | None = None
    ) -> None:
        super().__init__()
        kv_dim = dim if kv_dim is None else kv_dim
        self.internal_dim = dim // downsample_rate
        self.num_heads = num_heads
        self.q_proj = nn.Linear(dim, self.internal_dim)
        self.k_proj = nn.Linear(kv_dim, self.internal_dim)
        self.v_proj = nn.Linear(kv_dim, self.internal_dim)
        self.out_proj = nn.Linear(self.internal_dim, dim)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, D) -> (B, heads, N, D / heads)."""
        b, n, d = x.shape
        return x.reshape(b, n, self.num_heads, d // self.num_heads).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, heads, N, d) -> (B, N, heads * d)."""
        b, heads, n, d = x.shape
        return x.transpose(1, 2).reshape(b, n, heads * d)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Scaled dot-product attention on split heads, then the output projection."""
        return self.out_proj(self.merge_heads(F.scaled_dot_product_attention(q, k, v)))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q = self.split_heads(self.q_proj(q))
        k = self.split_heads(self.k_proj(k))
        v = self.split_heads(self.v_proj(v))
        return self.attend(q, k, v)


class TwoWayAttentionBlock(nn.Module):
    """Token self-attention, token->image attention, token MLP, image->token attention."""

    def __init__(
        self, dim: int, num_heads: int, mlp_dim: int, downsample_rate: int, skip_first_pe: bool
    ) -> None:
        super().__init__()
        self.self_attn = Attention(dim, num_heads)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn_token_to_image = Attention(dim, num_heads, downsample_rate)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, mlp_dim, dim, 2, activation=nn.ReLU)
        self.norm3 = nn.LayerNorm(dim)
        self.norm4 = nn.LayerNorm(dim)
        self.cross_attn_image_to_token = Attention(dim, num_heads, downsample_rate)
        self.skip_first_pe = skip_first_pe

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        query_pe: torch.Tensor,
        key_pe: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.skip_first_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)
        q, k = queries + query_pe, keys + key_pe
        queries = self.norm2(queries + self.cross_attn_token_to_image(q, k, keys))
        queries = self.norm3(queries + self.mlp(queries))
        q, k = queries + query_pe, keys + key_pe
        keys = self.norm4(keys + self.cross_attn_image_to_token(k, q, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    """image (B, C, h, w) + its encoding + tokens (B, T, C) -> (tokens (B, T, C), image (B, hw, C))."""

    def __init__(
        self, depth: int, dim: int, num_heads: int, mlp_dim: int, downsample_rate: int = 2
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TwoWayAttentionBlock(dim, num_heads, mlp_dim, downsample_rate, skip_first_pe=i == 0)
            for i in range(depth)
        )
        self.final_attn_token_to_image = Attention(dim, num_heads, downsample_rate)
        self.norm_final_attn = nn.LayerNorm(dim)

    def forward(
        self, image: torch.Tensor, image_pe: torch.Tensor, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        image = image.flatten(2).permute(0, 2, 1)
        image_pe = image_pe.flatten(2).permute(0, 2, 1)
        queries, keys = tokens, image
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, image_pe)
        q, k = queries + tokens, keys + image_pe
        queries = self.norm_final_attn(queries + self.final_attn_token_to_image(q, k, keys))
        return queries, keys
