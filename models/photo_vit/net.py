"""PhotoViT: a tiny Vision Transformer (~0.2M parameters) for 64x64 RGB crops in [0, 1].

Export-friendly by construction: the patch embedding is one strided convolution, attention is
written out as Linear -> reshape -> MatMul -> Softmax -> MatMul (no ``nn.MultiheadAttention``,
whose fused fast path and masks trace into guarded graphs), normalisation is plain LayerNorm and
the head mean-pools the tokens. Reshapes never name the batch dimension, so a dynamic batch
axis survives the TorchScript exporter.
"""

from __future__ import annotations

import math

import torch
from torch import nn

IMAGE_SIZE = 64


class Attention(nn.Module):
    """Multi-head self-attention: tokens (B, N, D) -> (B, N, D), softmax written explicitly."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.scale = 1.0 / math.sqrt(dim // heads)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x).unflatten(-1, (3, self.heads, -1))  # (B, N, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, Dh)
        scores = torch.matmul(q * self.scale, k.transpose(-2, -1))  # (B, H, N, N)
        mixed = torch.matmul(scores.softmax(dim=-1), v)  # (B, H, N, Dh)
        return self.proj(mixed.transpose(1, 2).flatten(2))  # (B, N, D)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN(x)), then x + MLP(LN(x)); (B, N, D) -> (B, N, D)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_ratio * dim, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))  # (B, N, D)
        return x + self.mlp(self.norm2(x))  # (B, N, D)


class PhotoViT(nn.Module):
    """image (B, 3, 64, 64) float32 RGB in [0, 1] -> logits (B, num_classes) float32.

    ``patch`` x ``patch`` patches (8 -> 64 tokens) embedded by a strided convolution that takes
    the [0, 1] image directly, plus a learned position embedding; ``depth`` pre-norm blocks;
    final LayerNorm, mean over tokens, dropout and one linear layer.
    """

    def __init__(
        self,
        num_classes: int,
        dim: int = 64,
        depth: int = 4,
        heads: int = 4,
        patch: int = 8,
        mlp_ratio: int = 2,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if IMAGE_SIZE % patch:
            raise ValueError(f"patch {patch} does not divide the image size {IMAGE_SIZE}")
        tokens = (IMAGE_SIZE // patch) ** 2
        self.embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.position = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_ratio) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(dim, num_classes)
        self.apply(_init)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.embed(image).flatten(2).transpose(1, 2)  # (B, N, D), N = (64 / patch) ** 2
        x = self.blocks(x + self.position)  # (B, N, D)
        x = self.norm(x).mean(dim=1)  # (B, D)
        return self.head(self.dropout(x))  # (B, num_classes)


def _init(module: nn.Module) -> None:
    """Truncated-normal (std 0.02) Linear weights, zero biases: the usual ViT initialisation."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
