"""Spectral regularisation as a drop-in loss term, plus the L2 and L2-to-init baselines.

    loss = task_loss + strength * reg.penalty()

``SpectralRegularizer.penalty()`` = sum_l (sigma_max(W_l)^k - target)^2 + sum_l ||b_l||^2, over
every Linear and Conv layer of the model (k = ``exponent``, default 2; target 1). sigma_max comes
from power iteration with one persistent left vector per layer: each call runs ``iterations``
steps (1 by default) starting from the vector the previous call left, so the estimate tracks the
slowly moving weights at the cost of a couple of mat-vecs per layer and step. Conv kernels
(out, in, kh, kw) are read as matrices (out, in * kh * kw). The estimate
sigma = u^T W v is differentiable in W (gradient u v^T); u and v themselves are not.

Every regulariser here has ``penalty() -> scalar tensor`` (``Regularizer``); ``make_regularizer``
builds one by name: "none", "l2", "l2-init", "spectral".
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from edgekit.errors import InputError

REGULARIZERS = ("none", "l2", "l2-init", "spectral")
WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class Regularizer(Protocol):
    """A loss term on a model's parameters."""

    def penalty(self) -> torch.Tensor: ...


def matrix_view(weight: torch.Tensor) -> torch.Tensor:
    """A weight as a matrix: Linear (out, in) as is, conv (out, in, *kernel) -> (out, in*prod(kernel))."""
    if weight.ndim < 2:
        raise InputError(f"a layer weight needs >= 2 dims, got shape {tuple(weight.shape)}")
    return weight.reshape(weight.shape[0], -1)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm().clamp_min(1e-12)


@torch.no_grad()
def power_iteration(
    matrix: torch.Tensor, u: torch.Tensor, iterations: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """``iterations`` steps of v = W^T u / |.|, u = W v / |.| from ``u`` (d,) for W (d, k);
    returns the unit vectors (u (d,), v (k,))."""
    if iterations < 1:
        raise InputError(f"power iteration needs iterations >= 1, got {iterations}")
    v = _unit(matrix.T @ u)
    u = _unit(matrix @ v)
    for _ in range(iterations - 1):
        v = _unit(matrix.T @ u)
        u = _unit(matrix @ v)
    return u, v


def spectral_norm_estimate(
    weight: torch.Tensor, iterations: int = 100, seed: int = 0
) -> torch.Tensor:
    """sigma_max of ``weight`` (Linear (out, in) or conv (out, in, *kernel) read as a matrix) by
    ``iterations`` power-iteration steps from a seeded random start; a 0-dim tensor."""
    matrix = matrix_view(weight.detach())
    generator = torch.Generator().manual_seed(seed)
    u0 = _unit(torch.randn(matrix.shape[0], generator=generator, dtype=matrix.dtype))
    u, v = power_iteration(matrix, u0.to(matrix.device), iterations)
    return u @ matrix @ v


def weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every Linear / Conv layer of ``model``, in module order."""
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, WEIGHTED)]
    if not layers:
        raise InputError("the model has no Linear or Conv layer to regularise")
    return layers


class SpectralRegularizer:
    """sum_l (sigma_max(W_l)^exponent - target)^2 + bias_coeff * sum_l ||b_l||^2.

    Holds references to the model's layers and one persistent unit vector u_l (out_l,) per layer.
    """

    def __init__(
        self,
        model: nn.Module,
        exponent: float = 2.0,
        target: float = 1.0,
        iterations: int = 1,
        bias_coeff: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.layers = weighted_layers(model)
        self.exponent, self.target = float(exponent), float(target)
        self.iterations, self.bias_coeff = int(iterations), float(bias_coeff)
        generator = torch.Generator().manual_seed(seed)
        self.vectors: dict[str, torch.Tensor] = {}
        for name, module in self.layers:
            w = module.weight
            u = torch.randn(w.shape[0], generator=generator, dtype=w.dtype)
            self.vectors[name] = _unit(u).to(w.device)

    def sigmas(self, iterations: int | None = None) -> dict[str, torch.Tensor]:
        """Layer name -> sigma_max estimate (0-dim, differentiable in the weight); advances the
        persistent vectors by ``iterations`` (default: the regulariser's) steps."""
        out = {}
        for name, module in self.layers:
            matrix = matrix_view(module.weight)  # (out, in * kernel)
            u, v = power_iteration(
                matrix.detach(), self.vectors[name], iterations or self.iterations
            )
            self.vectors[name] = u
            out[name] = u @ matrix @ v
        return out

    def penalty(self) -> torch.Tensor:
        """The loss term (0-dim); one power-iteration step per layer per call by default."""
        terms = [(s.pow(self.exponent) - self.target) ** 2 for s in self.sigmas().values()]
        total = torch.stack(terms).sum()
        if self.bias_coeff:
            biases = [m.bias.pow(2).sum() for _, m in self.layers if m.bias is not None]
            if biases:
                total = total + self.bias_coeff * torch.stack(biases).sum()
        return total

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The persistent vectors, to checkpoint next to the model."""
        return {name: u.clone() for name, u in self.vectors.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = sorted(set(self.vectors) - set(state))
        if missing:
            raise InputError(f"spectral regulariser state lacks vectors for layers {missing}")
        for name in self.vectors:
            if state[name].shape != self.vectors[name].shape:
                raise InputError(
                    f"vector for layer '{name}' has shape {tuple(state[name].shape)}, "
                    f"expected {tuple(self.vectors[name].shape)}"
                )
            self.vectors[name] = state[name].clone().to(self.vectors[name].device)


class L2Regularizer:
    """sum of squares of every trainable parameter (weight decay as a loss term)."""

    def __init__(self, model: nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]

    def penalty(self) -> torch.Tensor:
        return torch.stack([p.pow(2).sum() for p in self.params]).sum()


class L2InitRegularizer:
    """sum ||theta - theta_0||^2, theta_0 the parameters when the regulariser was built."""

    def __init__(self, model: nn.Module) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.initial = [p.detach().clone() for p in self.params]

    def penalty(self) -> torch.Tensor:
        return torch.stack(
            [(p - p0).pow(2).sum() for p, p0 in zip(self.params, self.initial, strict=True)]
        ).sum()


class NoRegularizer:
    """A zero penalty (the unregularised baseline)."""

    def penalty(self) -> torch.Tensor:
        return torch.zeros(())


def make_regularizer(name: str, model: nn.Module, **options: float) -> Regularizer:
    """Build the regulariser ``name`` ("none" | "l2" | "l2-init" | "spectral") for ``model``;
    ``options`` go to ``SpectralRegularizer``."""
    if name == "none":
        return NoRegularizer()
    if name == "l2":
        return L2Regularizer(model)
    if name == "l2-init":
        return L2InitRegularizer(model)
    if name == "spectral":
        return SpectralRegularizer(model, **options)  # type: ignore[arg-type]
    raise InputError(f"unknown regulariser {name!r}; known: {', '.join(REGULARIZERS)}")
