"""The tiny MM1.5-style VLM: convolutional image encoder -> C-Abstractor -> causal decoder.

- ``TileEncoder`` (a convolutional encoder; a ViT only when ``enc_depth`` > 0): each (1, S, S)
  tile -> 3x3 convs down to a patch grid (dim, S/p, S/p) -> ``enc_depth`` pre-norm transformer
  blocks with learned positions. The trained recipe (``MM15Config.enc_depth`` = 0) uses no
  blocks: a pure conv encoder, which learns shapes far faster on a CPU budget.
- ``CAbstractor`` (Honeybee's convolutional abstractor, MM1's connector): residual conv blocks,
  average pooling to (pool, pool) tokens, residual conv blocks, projection to the decoder width.
  Encoder and connector are bias-free without normalisation, so a blank region gives a zero
  feature and the decoder's attention finds the inked regions within a few dozen steps;
  plus a learned embedding per tile index (overview, tile 1, ...) and a fixed 2D sin-cos code of
  the image region each token covers (so overview and tile tokens share one coordinate frame,
  the frame the ``<box>`` coordinates in the text refer to).
- ``VisionLanguageModel.encode_image`` (B, T, 1, S, S) -> image tokens (B, T * pool^2, D);
  ``.decode`` image tokens + text tokens (B, L) -> next-token logits (B, L, V) for the text
  positions, with causal attention over [image tokens; text tokens].

Attention is written out with matmuls (no fused kernels) so the graphs export to ONNX as is.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    """Multi-head self-attention on (B, N, D); ``causal`` masks future positions."""

    def __init__(self, dim: int, heads: int, causal: bool, max_len: int = 512) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        mask = torch.full((max_len, max_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)  # (B, h, N, N)
        if self.causal:
            scores = scores + self.mask[:n, :n]
        y = scores.softmax(-1) @ v  # (B, h, N, d/h)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, causal: bool, max_len: int = 512) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal, max_len)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TileEncoder(nn.Module):
    """3x3 convs, stride 2 down to the patch grid (+ ``depth`` transformer blocks, none in the
    trained recipe) over one tile: (B, 1, S, S) -> (B, dim, S/patch, S/patch)."""

    def __init__(self, tile: int, patch: int, dim: int, depth: int, heads: int) -> None:
        super().__init__()
        self.grid = tile // patch
        if patch not in (1, 2, 4, 8):
            raise ValueError(f"patch must be 1, 2, 4 or 8 (stride-2 convs), got {patch}")
        # 3x3 convs, each stride-2 one halving the resolution, instead of one non-overlapping
        # patch projection (with blocks after it: the stem of "early convolutions help
        # transformers see"; without, as trained, the whole encoder)
        layers: list[nn.Module] = [nn.Conv2d(1, dim // 2, 3, padding=1, bias=False), nn.GELU()]
        width = dim // 2
        for _ in range(int(math.log2(patch))):
            layers += [nn.Conv2d(width, dim, 3, stride=2, padding=1, bias=False), nn.GELU()]
            width = dim
        layers.append(nn.Conv2d(width, dim, 1, bias=False))
        self.embed = nn.Sequential(*layers)
        self.pos = nn.Parameter(0.02 * torch.randn(1, self.grid * self.grid, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, causal=False) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim) if depth else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = self.embed(x).flatten(2).transpose(1, 2)  # (B, g*g, dim)
        if len(self.blocks):
            h = self.norm(self.blocks(h + self.pos))
        return h.transpose(1, 2).reshape(b, -1, self.grid, self.grid)


class ResConv(nn.Module):
    """x + conv(gelu(conv(x))) on (B, C, H, W), bias-free so empty regions stay exactly 0."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(dim, dim, 3, padding=1, bias=False),
            nn.GELU(),
            nn.Conv2d(dim, dim, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class CAbstractor(nn.Module):
    """(B, dim, g, g) -> (B, pool^2, out_dim): ResConv, average pool to (pool, pool), ResConv."""

    def __init__(self, dim: int, grid: int, pool: int, out_dim: int) -> None:
        super().__init__()
        self.before, self.after = ResConv(dim), ResConv(dim)
        self.kernel = grid // pool
        self.proj = nn.Sequential(
            nn.Linear(dim, out_dim, bias=False), nn.GELU(), nn.Linear(out_dim, out_dim, bias=False)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(self.before(x), self.kernel)  # (B, dim, pool, pool)
        x = self.after(x).flatten(2).transpose(1, 2)  # (B, pool^2, dim)
        return self.proj(x)


def sincos_2d(xy: torch.Tensor, dim: int) -> torch.Tensor:
    """Fixed 2D sin-cos code of points xy (..., 2) in [0, 1] -> (..., dim), dim % 4 == 0.

    Frequencies run geometrically from pi to 32 pi; x fills the first half, y the second.
    """
    freqs = math.pi * 32.0 ** torch.linspace(0.0, 1.0, dim // 4)  # (dim/4,)
    angles = xy[..., :, None] * freqs  # (..., 2, dim/4)
    code = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (..., 2, dim/2)
    return code.flatten(-2)


def token_centres(grid: tuple[int, int] | None, pool: int) -> torch.Tensor:
    """(T, pool^2, 2) centres (x, y) in [0, 1] of the image region each image token covers:
    the overview first (the whole image), then the tiles of ``grid`` (rows, cols) row by row."""
    cell = (torch.arange(pool, dtype=torch.float32) + 0.5) / pool
    yy, xx = torch.meshgrid(cell, cell, indexing="ij")
    local = torch.stack([xx.flatten(), yy.flatten()], dim=-1)  # (pool^2, 2)
    centres = [local]
    if grid is not None:
        rows, cols = grid
        for r in range(rows):
            for c in range(cols):
                offset = torch.tensor([c / cols, r / rows])
                centres.append(offset + local / torch.tensor([cols, rows]))
    return torch.stack(centres)


class VisionLanguageModel(nn.Module):
    """Tiny VLM; see the module docstring for the data flow and shapes."""

    def __init__(
        self,
        grid: tuple[int, int] | None,
        tile: int = 16,
        patch: int = 4,
        pool: int = 3,
        dim: int = 64,
        enc_depth: int = 2,
        dec_depth: int = 2,
        heads: int = 4,
        vocab: int = 72,
        max_text: int = 48,
    ) -> None:
        super().__init__()
        tiles = 1 if grid is None else 1 + grid[0] * grid[1]
        self.tiles, self.tile = tiles, tile
        self.image_len = tiles * pool * pool
        self.encoder = TileEncoder(tile, patch, dim, enc_depth, heads)
        self.connector = CAbstractor(dim, tile // patch, pool, dim)
        self.tile_embed = nn.Parameter(0.02 * torch.randn(tiles, 1, dim))
        # where in the whole image each image token looks: fixed 2D sin-cos of its centre
        self.pos_gain = nn.Parameter(torch.tensor(0.2))  # start the code near the features' scale
        self.register_buffer(
            "image_pos", sincos_2d(token_centres(grid, pool), dim), persistent=False
        )
        max_len = self.image_len + max_text
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(1, max_len, dim))
        self.blocks = nn.Sequential(
            *[Block(dim, heads, causal=True, max_len=max_len) for _ in range(dec_depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def encode_image(self, tiles: torch.Tensor) -> torch.Tensor:
        """(B, T, 1, S, S) float32 in [0, 1] -> image tokens (B, T * pool^2, D)."""
        b, t = tiles.shape[:2]
        feats = self.connector(self.encoder(tiles.reshape(b * t, 1, self.tile, self.tile)))
        feats = (
            feats.reshape(b, t, -1, feats.shape[-1])
            + self.tile_embed
            + self.pos_gain * self.image_pos
        )
        # feats: (B, T, pool^2, D)
        return feats.reshape(b, -1, feats.shape[-1])

    def decode(self, image_tokens: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """image tokens (B, N, D), text token ids (B, L) int64 -> logits (B, L, V)."""
        n = image_tokens.shape[1]
        x = torch.cat([image_tokens, self.tok(tokens)], dim=1)
        x = x + self.pos[:, : x.shape[1]]
        x = self.norm(self.blocks(x))
        return self.head(x[:, n:])

    def forward(self, tiles: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """tiles (B, T, 1, S, S), tokens (B, L) -> logits (B, L, V)."""
        return self.decode(self.encode_image(tiles), tokens)


class ImageEncoderGraph(nn.Module):
    """Export wrapper: tiles (B, T, 1, S, S) -> image_tokens (B, N, D)."""

    def __init__(self, model: VisionLanguageModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(tiles)


class DecoderStepGraph(nn.Module):
    """Export wrapper: image_tokens (B, N, D), tokens (B, L) int64 -> logits (B, L, V)."""

    def __init__(self, model: VisionLanguageModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, image_tokens: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.decode(image_tokens, tokens)
