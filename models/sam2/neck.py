"""The FPN neck of SAM 2's image encoder and the sine position encoding of feature maps."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sine_position_encoding(
    channels: int, h: int, w: int, temperature: float = 10000.0
) -> torch.Tensor:
    """(1, channels, h, w) 2D sine/cosine encoding of the normalised pixel grid.

    The first half of the channels encodes y, the second x; within each half, pairs of
    channels hold (sin, cos) of the coordinate (scaled to [0, 2 pi]) over a geometric
    ladder of wavelengths.
    """
    half = channels // 2
    eps, scale = 1e-6, 2 * math.pi
    y = torch.arange(1, h + 1, dtype=torch.float32).view(h, 1).expand(h, w)
    x = torch.arange(1, w + 1, dtype=torch.float32).view(1, w).expand(h, w)
    y = y / (float(h) + eps) * scale
    x = x / (float(w) + eps) * scale
    steps = torch.arange(half, dtype=torch.float32)
    wavelengths = temperature ** (2 * torch.div(steps, 2, rounding_mode="floor") / half)

    def encode(coord: torch.Tensor) -> torch.Tensor:
        angles = coord[:, :, None] / wavelengths  # (h, w, half)
        pairs = torch.stack((angles[:, :, 0::2].sin(), angles[:, :, 1::2].cos()), dim=3)
        return pairs.flatten(2)

    pos = torch.cat((encode(y), encode(x)), dim=2)  # (h, w, channels)
    return pos.permute(2, 0, 1).unsqueeze(0)


class _Lateral(nn.Module):
    """A 1x1 lateral projection; the ``conv`` attribute name follows the official checkpoints."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class FpnNeck(nn.Module):
    """Project the trunk's 4 maps to ``d_model`` channels; top-down nearest merge on some levels.

    Input: the trunk's maps, highest resolution first, channels ``channel_list`` reversed.
    Output: maps (B, d_model, ., .), highest resolution first, without the lowest-resolution
    level (SAM 2 drops the stride-32 map after it fed the top-down path).
    """

    def __init__(
        self, d_model: int, channel_list: list[int], top_down_levels: tuple[int, ...]
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.convs = nn.ModuleList(_Lateral(c, d_model) for c in channel_list)
        self.top_down_levels = tuple(top_down_levels)

    def forward(self, maps: list[torch.Tensor]) -> list[torch.Tensor]:
        last = len(self.convs) - 1
        out: list[torch.Tensor] = [maps[0]] * len(maps)
        previous: torch.Tensor | None = None
        for level in range(last, -1, -1):  # lowest resolution first
            lateral = self.convs[last - level](maps[level])
            if level in self.top_down_levels and previous is not None:
                previous = lateral + F.interpolate(previous, scale_factor=2.0, mode="nearest")
            else:
                previous = lateral
            out[level] = previous
        return out[:last]
