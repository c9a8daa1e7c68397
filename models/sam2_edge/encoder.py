"""The compact image encoder of sam2-edge: a MobileNet-style CNN at 256x256.

(B, 3, 256, 256) float32 RGB in [0, 1] -> image embedding (B, dim, 16, 16) at stride 16, plus
the two high-resolution feature maps the mask decoder upsamples with: (B, dim / 4, 32, 32)
at stride 8 and (B, dim / 8, 64, 64) at stride 4 (as SAM 2's FPN levels, already projected
to the decoder's widths, like SAM 2 does with conv_s0 / conv_s1).
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.layers import ConvBN, DWBlock

# ImageNet statistics: the first convolution sees normalised RGB as SAM 2's trunk does
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class EdgeImageEncoder(nn.Module):
    """CNN trunk (strides 4-8-16) with a 1x1 neck to ``config.dim`` channels."""

    def __init__(self, config: EdgeConfig) -> None:
        super().__init__()
        c4, c8, c16 = config.widths
        n4, n8, n16 = config.blocks
        self.register_buffer("mean", torch.tensor(MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(STD).view(1, 3, 1, 1), persistent=False)
        self.stem = nn.Sequential(  # /4: a 4x4 patchify convolution, then a 3x3 mix
            nn.Conv2d(3, c4, 4, 4, bias=False), nn.BatchNorm2d(c4), nn.ReLU(inplace=True)
        )
        self.stage4 = nn.Sequential(*[DWBlock(c4, kernel=3) for _ in range(n4)])
        self.stage8 = nn.Sequential(ConvBN(c4, c8, 3, 2), *[DWBlock(c8) for _ in range(n8)])
        self.stage16 = nn.Sequential(ConvBN(c8, c16, 3, 2), *[DWBlock(c16) for _ in range(n16)])
        self.neck = nn.Conv2d(c16, config.dim, 1)
        self.high_res_s8 = nn.Conv2d(c8, config.feat_s1_channels, 1)
        self.high_res_s4 = nn.Conv2d(c4, config.feat_s0_channels, 1)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """image (B, 3, H, W) in [0, 1] -> (embedding (B, dim, H/16, W/16),
        feat_s8 (B, dim/4, H/8, W/8), feat_s4 (B, dim/8, H/4, W/4))."""
        x = (image - self.mean) / self.std
        f4 = self.stage4(self.stem(x))  # (B, c4, H/4, W/4)
        f8 = self.stage8(f4)  # (B, c8, H/8, W/8)
        f16 = self.stage16(f8)  # (B, c16, H/16, W/16)
        return self.neck(f16), self.high_res_s8(f8), self.high_res_s4(f4)
