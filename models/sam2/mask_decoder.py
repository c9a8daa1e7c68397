"""SAM 2's mask decoder: 4 mask tokens (1 single + 3 multimask), IoU head, object-score head."""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.sam2.layers import MLP, LayerNorm2d
from edgekit.models.sam2.transformer import TwoWayTransformer


class MaskDecoder(nn.Module):
    """Predict mask logits for all 4 output tokens; choosing among them is left to the caller.

    Inputs: image (B, C, h, w), its dense encoding (1, C, h, w), sparse tokens (B, T, C), dense
    prompt (B, C, h, w), high-res features (B, C/8, 4h, 4w) and (B, C/4, 2h, 2w).
    Outputs: masks (B, 4, 4h, 4w), iou (B, 4) in [0, 1], mask tokens (B, 4, C) and object score
    logits (B, 1).
    """

    num_mask_tokens = 4

    def __init__(
        self, dim: int, depth: int, num_heads: int, mlp_dim: int, iou_hidden: int = 256
    ) -> None:
        super().__init__()
        self.transformer = TwoWayTransformer(depth, dim, num_heads, mlp_dim)
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        self.obj_score_token = nn.Embedding(1, dim)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 4, kernel_size=2, stride=2),
            LayerNorm2d(dim // 4),
            nn.GELU(),
            nn.ConvTranspose2d(dim // 4, dim // 8, kernel_size=2, stride=2),
            nn.GELU(),
        )
        self.conv_s0 = nn.Conv2d(dim, dim // 8, kernel_size=1)
        self.conv_s1 = nn.Conv2d(dim, dim // 4, kernel_size=1)
        self.output_hypernetworks_mlps = nn.ModuleList(
            MLP(dim, dim, dim // 8, 3) for _ in range(self.num_mask_tokens)
        )
        self.iou_prediction_head = MLP(
            dim, iou_hidden, self.num_mask_tokens, 3, sigmoid_output=True
        )
        self.pred_obj_score_head = MLP(dim, dim, 1, 3)

    def forward(
        self,
        image: torch.Tensor,
        image_pe: torch.Tensor,
        sparse: torch.Tensor,
        dense: torch.Tensor,
        feat_s0: torch.Tensor,
        feat_s1: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        b = sparse.shape[0]
        # token order: object score, IoU, then the 4 mask tokens, then the prompt tokens
        out_tokens = torch.cat(
            [self.obj_score_token.weight, self.iou_token.weight, self.mask_tokens.weight], dim=0
        )
        tokens = torch.cat([out_tokens.unsqueeze(0).expand(b, -1, -1), sparse], dim=1)
        src = image + dense
        _, c, h, w = src.shape
        hs, src = self.transformer(src, image_pe.expand(b, -1, -1, -1), tokens)
        mask_tokens_out = hs[:, 2 : 2 + self.num_mask_tokens, :]

        src = src.transpose(1, 2).reshape(b, c, h, w)
        up1, norm, act1, up2, act2 = self.output_upscaling
        upscaled = act1(norm(up1(src) + feat_s1))
        upscaled = act2(up2(upscaled) + feat_s0)

        hyper = torch.stack(
            [mlp(mask_tokens_out[:, i, :]) for i, mlp in enumerate(self.output_hypernetworks_mlps)],
            dim=1,
        )  # (B, 4, C/8)
        _, c8, h4, w4 = upscaled.shape
        masks = (hyper @ upscaled.reshape(b, c8, h4 * w4)).reshape(b, -1, h4, w4)
        iou = self.iou_prediction_head(hs[:, 1, :])
        object_score_logits = self.pred_obj_score_head(hs[:, 0, :])
        return masks, iou, mask_tokens_out, object_score_logits
