"""LoRA, the low-rank baseline RandLoRA is compared with: dW = (alpha / q) * B A, rank <= q.

A (q, in) starts Kaiming-uniform, B (out, q) starts at zero, so the update starts at zero.
A layer trains q * (in + out) numbers. ``merge_adapters`` (layers.py) folds it into the weight.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.randlora.layers import (
    LayerFilter,
    freeze,
    linear_targets,
    linear_with_weight,
    replace_module,
)


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a rank-q update; forward(x (..., in)) -> (..., out)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.rank = rank
        self.scale = float(alpha) / rank
        self.a = nn.Parameter(torch.empty(rank, base.in_features))  # (q, in)
        self.b = nn.Parameter(torch.zeros(base.out_features, rank))  # (out, q)
        nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))

    def trainable_count(self) -> int:
        """q * (in + out)."""
        return self.rank * (self.base.in_features + self.base.out_features)

    def delta_weight(self) -> torch.Tensor:
        """The update dW (out, in), of rank <= q."""
        return (self.b @ self.a) * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + nn.functional.linear(x @ self.a.T, self.b) * self.scale

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with weight W + dW and the base bias (a copy)."""
        return linear_with_weight(self.base, self.base.weight + self.delta_weight())


def apply_lora(
    model: nn.Module,
    rank: int = 4,
    alpha: float | None = None,
    *,
    include: LayerFilter | None = None,
) -> dict[str, LoRALinear]:
    """Freeze ``model`` and wrap its ``nn.Linear`` layers in ``LoRALinear``, in place.

    ``alpha`` defaults to ``rank`` (scale 1). Returns name -> wrapped layer.
    """
    if rank < 1:
        raise InputError(f"LoRA rank must be >= 1, got {rank}")
    alpha = float(rank if alpha is None else alpha)
    freeze(model)
    wrapped: dict[str, LoRALinear] = {}
    for name, layer in linear_targets(model, include):
        wrapped[name] = LoRALinear(layer, rank, alpha)
        replace_module(model, name, wrapped[name])
    return wrapped
