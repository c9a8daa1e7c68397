"""SAM-style prompt encoder: points (incl. box corners) to sparse tokens, a mask to dense ones."""

from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.models.sam2.layers import LayerNorm2d


class RandomFourierEncoding(nn.Module):
    """Position encoding with a fixed random Gaussian frequency matrix (2, C/2)."""

    def __init__(self, num_feats: int) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", torch.randn(2, num_feats))

    def encode(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., 2) coordinates in [0, 1] (x, y) -> (..., C) [sin | cos] features."""
        coords = (2 * coords - 1) @ self.positional_encoding_gaussian_matrix
        coords = 2 * math.pi * coords
        return torch.cat([coords.sin(), coords.cos()], dim=-1)

    def grid(self, h: int, w: int) -> torch.Tensor:
        """(C, h, w) encoding of the pixel centres of an h x w grid."""
        ys = (torch.arange(h, dtype=torch.float32) + 0.5) / h
        xs = (torch.arange(w, dtype=torch.float32) + 0.5) / w
        coords = torch.stack([xs.view(1, w).expand(h, w), ys.view(h, 1).expand(h, w)], dim=-1)
        return self.encode(coords).permute(2, 0, 1)


class PromptEncoder(nn.Module):
    """Points with labels -> sparse (B, N+1, C) tokens; mask logits -> dense (B, C, h, w).

    Labels: 1 positive, 0 negative, 2/3 box corners, -1 padding. A padding point is always
    appended (SAM 2 passes boxes as two labelled points, so the box-free padding rule applies).
    """

    def __init__(
        self, embed_dim: int, embed_size: int, image_size: int, mask_in_chans: int
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.embed_size = embed_size
        self.image_size = image_size
        self.pe_layer = RandomFourierEncoding(embed_dim // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, embed_dim) for _ in range(4))
        self.not_a_point_embed = nn.Embedding(1, embed_dim)
        self.mask_downscaling = nn.Sequential(
            nn.Conv2d(1, mask_in_chans // 4, kernel_size=2, stride=2),
            LayerNorm2d(mask_in_chans // 4),
            nn.GELU(),
            nn.Conv2d(mask_in_chans // 4, mask_in_chans, kernel_size=2, stride=2),
            LayerNorm2d(mask_in_chans),
            nn.GELU(),
            nn.Conv2d(mask_in_chans, embed_dim, kernel_size=1),
        )
        self.no_mask_embed = nn.Embedding(1, embed_dim)

    def dense_pe(self) -> torch.Tensor:
        """(1, C, h, w) position encoding of the image-embedding grid."""
        return self.pe_layer.grid(self.embed_size, self.embed_size).unsqueeze(0)

    def embed_points(self, coords: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B, N, 2) model-input pixels + (B, N) labels -> (B, N+1, C) with a padding point."""
        b = coords.shape[0]
        coords = torch.cat([coords + 0.5, torch.zeros(b, 1, 2, dtype=coords.dtype)], dim=1)
        labels = torch.cat([labels, -torch.ones(b, 1, dtype=labels.dtype)], dim=1)
        emb = self.pe_layer.encode(coords / float(self.image_size))
        lab = labels.unsqueeze(-1)
        emb = torch.where(lab == -1, torch.zeros_like(emb) + self.not_a_point_embed.weight, emb)
        for k, table in enumerate(self.point_embeddings):
            emb = torch.where(lab == k, emb + table.weight, emb)
        return emb

    def embed_mask(self, mask_input: torch.Tensor, has_mask: torch.Tensor) -> torch.Tensor:
        """(B, 1, 4h, 4w) logits, (B,) flag -> (B, C, h, w): the mask's embedding if flagged."""
        no_mask = self.no_mask_embed.weight.reshape(1, -1, 1, 1)
        no_mask = no_mask.expand(mask_input.shape[0], -1, self.embed_size, self.embed_size)
        flag = (has_mask > 0.5).reshape(-1, 1, 1, 1)
        return torch.where(flag, self.mask_downscaling(mask_input), no_mask)
