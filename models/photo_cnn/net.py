"""PhotoNet: a compact CNN (~80k parameters at width 24) for 64x64 RGB crops in [0, 1].

Input normalisation lives in the graph as the first convolution + BatchNorm, which take the
[0, 1] image directly: there is no separate mean/std subtraction. A non-negative first-layer
input quantizes cleanly (uint8 at 1/255 steps is lossless for 8-bit camera pixels); with an
explicit (x - mean) / std in front, static int8 agreement was measurably worse.
"""

from __future__ import annotations

import torch
from torch import nn

IMAGE_SIZE = 64


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    """3x3 convolution (no bias) -> BatchNorm -> ReLU; stride 2 halves H and W."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class PhotoNet(nn.Module):
    """image (B, 3, 64, 64) float32 RGB in [0, 1] -> logits (B, num_classes) float32.

    The device feeds plain RGB scaled to [0, 1]; nothing else. Five conv-BN-ReLU layers
    (64 -> 32 -> 16 -> 8 spatial), global average pooling, dropout and one linear layer.
    BatchNorm folds into the convolutions at export.
    """

    def __init__(self, num_classes: int, width: int = 24, dropout: float = 0.1) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, width, stride=2),  # (B, w, 32, 32)
            conv_bn(width, width),  # (B, w, 32, 32)
            conv_bn(width, 2 * width, stride=2),  # (B, 2w, 16, 16)
            conv_bn(2 * width, 2 * width),  # (B, 2w, 16, 16)
            conv_bn(2 * width, 4 * width, stride=2),  # (B, 4w, 8, 8)
        )
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.features(image).mean(dim=(2, 3))  # (B, 4w)
        return self.head(self.dropout(x))  # (B, num_classes)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
