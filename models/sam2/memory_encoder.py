"""SAM 2's memory encoder: a frame's features fused with its mask into a 64-channel memory."""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.sam2.layers import LayerNorm2d
from edgekit.models.sam2.neck import sine_position_encoding


class MaskDownSampler(nn.Module):
    """(B, 1, S, S) mask -> (B, C, S/16, S/16): 4 stride-2 conv + LayerNorm + GELU stages, 1x1."""

    def __init__(self, dim: int, num_stages: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        ch = 1
        for _ in range(num_stages):
            layers += [
                nn.Conv2d(ch, ch * 4, 3, stride=2, padding=1),
                LayerNorm2d(ch * 4),
                nn.GELU(),
            ]
            ch *= 4
        layers.append(nn.Conv2d(ch, dim, kernel_size=1))
        self.encoder = nn.Sequential(*layers)

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(mask)


class CXBlock(nn.Module):
    """ConvNeXt block: 7x7 depthwise conv, LayerNorm, 4x pointwise MLP, layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm2d(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.dwconv(x)).permute(0, 2, 3, 1)
        y = self.gamma * self.pwconv2(self.act(self.pwconv1(y)))
        return x + y.permute(0, 3, 1, 2)


class Fuser(nn.Module):
    """A stack of ConvNeXt blocks on (B, C, h, w)."""

    def __init__(self, dim: int, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CXBlock(dim) for _ in range(num_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MemoryEncoder(nn.Module):
    """features (B, C, h, w) + mask (B, 1, S, S) already scaled -> memory (B, Cm, h, w), pos."""

    def __init__(self, dim: int, out_dim: int, fuser_layers: int) -> None:
        super().__init__()
        self.mask_downsampler = MaskDownSampler(dim)
        self.pix_feat_proj = nn.Conv2d(dim, dim, kernel_size=1)
        self.fuser = Fuser(dim, fuser_layers)
        self.out_proj = nn.Conv2d(dim, out_dim, kernel_size=1)
        self.out_dim = out_dim

    def forward(
        self, features: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.pix_feat_proj(features) + self.mask_downsampler(mask)
        x = self.out_proj(self.fuser(x))
        pos = sine_position_encoding(self.out_dim, x.shape[-2], x.shape[-1])
        return x, pos.expand(x.shape[0], -1, -1, -1)
