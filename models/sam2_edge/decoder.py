"""Prompt encoder and mask decoder of sam2-edge (SAM-style, narrow).

Prompts: points (B, N, 2) float32 (x, y) in input pixels with labels (B, N): 1 positive,
0 negative, 2 / 3 box top-left / bottom-right corner, -1 padding; an optional mask prompt
(B, 1, 64, 64) of logits gated by has_mask (B,) in {0, 1}. Besides SAM's sparse point tokens
and dense mask embedding, the prompt encoder draws the prompts as maps on the embedding grid
(a bump per point, the inside of the box) and adds their embedding to the dense one: the
decoder then knows where the prompt is from the first step of training.

The decoder runs a two-way transformer over [object-score token, IoU token, 1 + 3 mask tokens,
prompt tokens] and the image embedding, upsamples with the stride-8 and stride-4 features and
outputs 4 low-resolution masks (B, 4, 64, 64) (mask 0: single-mask output, 1-3: the ambiguous
multimask outputs), their predicted IoU (B, 4) in [0, 1], an object score logit (B, 1) (< 0:
the object is not visible) and the 4 mask tokens (B, 4, dim) the object pointer is made from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.layers import MLP, Attention, FourierPointEncoding, LayerNorm2d

POINT_LABELS = 4  # negative, positive, box top-left, box bottom-right
PROMPT_MAPS = POINT_LABELS + 1  # one map per label and the inside of the box


class PromptEncoder(nn.Module):
    """Points / box corners -> sparse tokens (B, N, dim); mask prompt -> dense (B, dim, g, g)."""

    def __init__(self, config: EdgeConfig) -> None:
        super().__init__()
        dim = config.dim
        self.image_size = config.image_size
        self.grid = config.grid
        self.pe = FourierPointEncoding(dim)
        self.label_embed = nn.Embedding(POINT_LABELS, dim)
        self.not_a_point = nn.Parameter(torch.zeros(1, 1, dim))
        self.mask_down = nn.Sequential(  # (B, 1, 64, 64) -> (B, dim, 16, 16)
            nn.Conv2d(1, 4, 2, 2),
            LayerNorm2d(4),
            nn.GELU(),
            nn.Conv2d(4, 16, 2, 2),
            LayerNorm2d(16),
            nn.GELU(),
            nn.Conv2d(16, dim, 1),
        )
        self.no_mask = nn.Parameter(torch.zeros(1, dim, 1, 1))
        self.prompt_maps = nn.Sequential(  # where the prompts are, as maps -> (B, dim, g, g)
            nn.Conv2d(PROMPT_MAPS, dim, 3, padding=1), nn.GELU(), nn.Conv2d(dim, dim, 1)
        )
        cell = config.image_size / config.grid
        centres = (torch.arange(config.grid, dtype=torch.float32) + 0.5) * cell
        grid = torch.stack(torch.meshgrid(centres, centres, indexing="xy"), dim=-1)  # (g, g, 2)
        self.register_buffer("centres", grid.reshape(-1, 2), persistent=False)  # (g*g, 2) (x, y)
        self.cell = cell

    def dense_pe(self) -> torch.Tensor:
        """Positional encoding of the embedding grid (1, dim, g, g)."""
        return self.pe.grid(self.grid, self.grid)

    def forward(
        self,
        points: torch.Tensor,
        labels: torch.Tensor,
        mask_input: torch.Tensor,
        has_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> sparse (B, N, dim), dense (B, dim, g, g).

        labels must already be int64 and has_mask float32: a no-op cast of a graph input makes
        OpenVINO name the input after the cast.
        """
        coords = (points + 0.5) / self.image_size  # pixel centres -> (0, 1)
        pad = (labels < 0).unsqueeze(-1).to(points.dtype)  # (B, N, 1)
        embed = self.pe(coords) + self.label_embed(labels.clamp(min=0))
        sparse = embed * (1 - pad) + self.not_a_point * pad
        gate = has_mask.view(-1, 1, 1, 1)
        dense = self.mask_down(mask_input) * gate + self.no_mask * (1 - gate)
        return sparse, dense + self.prompt_maps(self.maps(points, labels))

    def maps(self, points: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Prompt location maps on the embedding grid (B, 5, g, g): a Gaussian bump (one cell
        wide) per point in the channel of its label (negative, positive, box corners; padding
        in none) and the inside of the box (soft edges), so the decoder sees where the prompts
        are without having to learn it from positional encodings."""
        b = points.shape[0]
        label_ids = torch.arange(POINT_LABELS, device=labels.device)  # on the prompts' device
        onehot = (labels[..., None] == label_ids).to(points.dtype)  # (B, N, 4)
        d2 = ((points[:, :, None, :] - self.centres[None, None]) ** 2).sum(-1)  # (B, N, g*g)
        bumps = torch.exp(-d2 / (2 * self.cell**2))
        heat = onehot.transpose(1, 2) @ bumps  # (B, 4, g*g)
        top_left = (onehot[..., 2:3] * points).sum(1)  # (B, 2): the box corners (0 if no box)
        bottom_right = (onehot[..., 3:4] * points).sum(1)
        has_box = onehot[..., 2].sum(1, keepdim=True).clamp(max=1.0)  # (B, 1)
        soft = self.cell / 4
        after = torch.sigmoid((self.centres[None] - top_left[:, None]) / soft)  # (B, g*g, 2)
        before = torch.sigmoid((bottom_right[:, None] - self.centres[None]) / soft)
        inside = (after * before).prod(-1) * has_box  # (B, g*g)
        maps = torch.cat([heat, inside[:, None]], dim=1)  # (B, 5, g*g)
        return maps.reshape(b, PROMPT_MAPS, self.grid, self.grid)


class TwoWayBlock(nn.Module):
    """Tokens attend to themselves and to the image; the image attends back to the tokens."""

    def __init__(self, dim: int, heads: int, mlp: int, first: bool) -> None:
        super().__init__()
        self.first = first
        self.self_attn = Attention(dim, heads)
        self.token_to_image = Attention(dim, heads, inner=dim // 2)
        self.image_to_token = Attention(dim, heads, inner=dim // 2)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.ReLU(), nn.Linear(mlp, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))

    def forward(self, tokens, image, token_pe, image_pe) -> tuple[torch.Tensor, torch.Tensor]:
        if self.first:
            tokens = self.self_attn(tokens, tokens, tokens)
        else:
            q = tokens + token_pe
            tokens = tokens + self.self_attn(q, q, tokens)
        tokens = self.norms[0](tokens)
        q, k = tokens + token_pe, image + image_pe
        tokens = self.norms[1](tokens + self.token_to_image(q, k, image))
        tokens = self.norms[2](tokens + self.mlp(tokens))
        q = tokens + token_pe
        image = self.norms[3](image + self.image_to_token(k, q, tokens))
        return tokens, image


class MaskDecoder(nn.Module):
    """SAM-style mask decoder with IoU and object-score heads (see the module docstring)."""

    def __init__(self, config: EdgeConfig) -> None:
        super().__init__()
        dim = config.dim
        self.masks = 1 + config.multimask_outputs
        self.obj_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.iou_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.mask_tokens = nn.Parameter(torch.randn(1, self.masks, dim) * 0.02)
        self.blocks = nn.ModuleList(
            TwoWayBlock(dim, config.decoder_heads, config.decoder_mlp, i == 0)
            for i in range(config.decoder_depth)
        )
        self.final_attn = Attention(dim, config.decoder_heads, inner=dim // 2)
        self.final_norm = nn.LayerNorm(dim)
        c8, c4 = config.feat_s1_channels, config.feat_s0_channels
        u8, u4 = config.upscale_channels
        self.up8 = nn.ConvTranspose2d(dim, u8, 2, 2)
        self.skip8 = nn.Conv2d(c8, u8, 1)
        self.up8_norm = LayerNorm2d(u8)
        self.refine8 = nn.Conv2d(u8, u8, 3, padding=1)
        self.up4 = nn.ConvTranspose2d(u8, u4, 2, 2)
        self.skip4 = nn.Conv2d(c4, u4, 1)
        self.refine4 = nn.Conv2d(u4, u4, 3, padding=1)
        self.hyper = nn.ModuleList(MLP([dim, dim, u4]) for _ in range(self.masks))
        self.iou_head = MLP([dim, dim, self.masks], sigmoid=True)
        self.obj_head = MLP([dim, dim, 1])

    def forward(
        self,
        image_embed: torch.Tensor,
        image_pe: torch.Tensor,
        sparse: torch.Tensor,
        dense: torch.Tensor,
        feat_s8: torch.Tensor,
        feat_s4: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> masks (B, 4, 4g, 4g), iou (B, 4), object_score (B, 1), mask_tokens (B, 4, dim)."""
        b, c, h, w = image_embed.shape
        fixed = torch.cat([self.obj_token, self.iou_token, self.mask_tokens], dim=1)
        tokens = torch.cat([fixed.expand(b, -1, -1), sparse], dim=1)  # (B, 2 + 4 + N, C)
        token_pe = tokens
        image = (image_embed + dense).flatten(2).transpose(1, 2)  # (B, HW, C)
        pe = image_pe.flatten(2).transpose(1, 2).expand(b, -1, -1)  # (B, HW, C)
        for block in self.blocks:
            tokens, image = block(tokens, image, token_pe, pe)
        q, k = tokens + token_pe, image + pe
        tokens = self.final_norm(tokens + self.final_attn(q, k, image))
        obj_out, iou_out = tokens[:, 0], tokens[:, 1]
        mask_out = tokens[:, 2 : 2 + self.masks]  # (B, 4, C)
        image = image.transpose(1, 2).reshape(b, c, h, w)
        up = F.gelu(self.up8_norm(self.up8(image) + self.skip8(feat_s8)))  # (B, u8, 2h, 2w)
        up = F.gelu(up + self.refine8(up))
        up = F.gelu(self.up4(up) + self.skip4(feat_s4))  # (B, u4, 4h, 4w)
        up = F.gelu(up + self.refine4(up))
        hyper = torch.stack([mlp(mask_out[:, i]) for i, mlp in enumerate(self.hyper)], dim=1)
        masks = (hyper @ up.flatten(2)).reshape(b, self.masks, 4 * h, 4 * w)
        return masks, self.iou_head(iou_out), self.obj_head(obj_out), mask_out
