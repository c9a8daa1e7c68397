"""Small building blocks shared by the SAM 2 components: an MLP and a channel LayerNorm."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``num_layers`` linear layers with an activation between them.

    (..., in_dim) -> (..., out_dim); hidden layers are ``hidden_dim`` wide. Parameter names
    ``layers.{i}.weight`` follow the official checkpoints.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        num_layers: int,
        activation: type[nn.Module] = nn.ReLU,
        sigmoid_output: bool = False,
    ) -> None:
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=True)
        )
        self.act = activation()
        self.sigmoid_output = sigmoid_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = self.act(x)
        return torch.sigmoid(x) if self.sigmoid_output else x


class LayerNorm2d(nn.Module):
    """LayerNorm over the channel axis of (B, C, H, W) maps, per pixel."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        centred = x - mean
        var = centred.pow(2).mean(1, keepdim=True)
        x = centred / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]
