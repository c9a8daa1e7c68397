"""Sparse autoencoders: ReLU + L1, TopK and JumpReLU, one class each over a shared base.

Every variant reads raw activations x (..., d), d the language model's width (384 for
MiniLM), scales them by ``input_scale`` (fixed from the training data so that
E||x * s||^2 = d, i.e. unit mean square per dimension), subtracts
the decoder bias and encodes:

    pre = (x * s - b_dec) @ W_enc + b_enc                 (..., n_latents)
    f   = activation(pre)                                  (..., n_latents), >= 0
    x_hat = f @ W_dec + b_dec                              (..., d), in the scaled space

Decoder rows (one direction per latent) are kept at unit L2 norm: the trainer removes the
gradient component parallel to each row before a step and renormalises after it, so the
sparsity penalty cannot be dodged by shrinking f and growing W_dec.

- ``ReluSAE``: f = ReLU(pre); penalty l1_coeff * sum(f) (the L1 recipe).
- ``TopKSAE``: keep the k largest pre-activations, ReLU them, zero the rest; no sparsity
  penalty; dead latents get the AuxK loss (reconstruct the residual with the top ``k_aux`` dead
  latents, weight 1/32).
- ``JumpReluSAE``: f = pre * H(pre - theta), theta = exp(log_threshold) per latent; penalty
  l0_coeff * sum(H(pre - theta)); gradients to theta through straight-through estimators with a
  rectangle kernel of width ``bandwidth``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

AUXK_WEIGHT = 1.0 / 32.0


class SparseAutoencoder(nn.Module):
    """Base SAE: parameters, scaling, decoder, decoder-norm upkeep. Subclasses set ``variant``,
    ``activate`` and ``sparsity_loss``."""

    variant: ClassVar[str] = ""

    def __init__(self, d_in: int, n_latents: int, input_scale: float = 1.0) -> None:
        super().__init__()
        if d_in <= 0 or n_latents <= 0:
            raise ValueError(f"d_in and n_latents must be positive, got {d_in}, {n_latents}")
        self.d_in, self.n_latents = d_in, n_latents
        directions = torch.randn(n_latents, d_in)
        directions = directions / directions.norm(dim=1, keepdim=True)  # (n, d) unit rows
        self.W_dec = nn.Parameter(directions.clone())  # (n, d)
        self.W_enc = nn.Parameter(directions.t().clone())  # (d, n), tied at init
        self.b_enc = nn.Parameter(torch.zeros(n_latents))  # (n,)
        self.b_dec = nn.Parameter(torch.zeros(d_in))  # (d,)
        self.register_buffer("input_scale", torch.tensor(float(input_scale)))

    def hyperparameters(self) -> dict[str, Any]:
        """Constructor arguments beyond (d_in, n_latents), for rebuilding from a state dict."""
        return {}

    # ---- forward -------------------------------------------------------------------------
    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """Raw activations (..., d) -> the scaled space the SAE reconstructs (..., d)."""
        return x * self.input_scale

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """Raw activations (..., d) -> pre-activations (..., n)."""
        return (self.scale(x) - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Raw activations (..., d) -> latent activations (..., n) float32, >= 0."""
        return self.activate(self.pre_activations(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """Latents (..., n) -> reconstruction (..., d) in the scaled space."""
        return f @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw x (..., d) -> (reconstruction in the scaled space (..., d), latents (..., n))."""
        f = self.encode(x)
        return self.decode(f), f

    # ---- training ------------------------------------------------------------------------
    def sparsity_loss(self, pre: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def losses(
        self, x: torch.Tensor, dead: torch.Tensor | None = None, sparsity_weight: float = 1.0
    ) -> dict[str, torch.Tensor]:
        """Loss terms for a batch of raw activations x (B, d).

        ``mse`` is the mean over batch and dimensions of (x*s - x_hat)^2; ``sparsity`` the
        variant's penalty (times ``sparsity_weight``, the warm-up factor); ``aux`` the dead-latent
        term (TopK only, with ``dead`` a (n,) bool mask); ``loss`` their sum; ``latents`` the
        batch's latents f (B, n), detached.
        """
        pre = self.pre_activations(x)  # (B, n)
        f, x_hat = self.latents_and_reconstruction(pre)  # (B, n), (B, d)
        target = self.scale(x)  # (B, d)
        mse = (x_hat - target).pow(2).mean()
        sparsity = self.sparsity_loss(pre, f) * sparsity_weight
        aux = self.aux_loss(pre, target - x_hat.detach(), dead)
        total = mse + sparsity + aux
        return {"loss": total, "mse": mse, "sparsity": sparsity, "aux": aux, "latents": f.detach()}

    def latents_and_reconstruction(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-activations (B, n) -> (latents (B, n), reconstruction (B, d)) for training."""
        f = self.activate(pre)
        return f, self.decode(f)

    def aux_loss(
        self, pre: torch.Tensor, residual: torch.Tensor, dead: torch.Tensor | None
    ) -> torch.Tensor:
        """Dead-latent loss; zero except for TopK."""
        return pre.new_zeros(())

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Scale every decoder row (latent direction) to unit L2 norm."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp(min=1e-8))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Drop the part of W_dec's gradient along each (unit) row: steps keep the norm at 1
        to first order."""
        if self.W_dec.grad is None:
            return
        along = (self.W_dec.grad * self.W_dec).sum(dim=1, keepdim=True)  # (n, 1)
        self.W_dec.grad.sub_(along * self.W_dec)


class ReluSAE(SparseAutoencoder):
    """ReLU latents with an L1 penalty ``l1_coeff`` * sum_i f_i (decoder rows have norm 1)."""

    variant: ClassVar[str] = "relu"

    def __init__(
        self, d_in: int, n_latents: int, l1_coeff: float = 5e-3, input_scale: float = 1.0
    ) -> None:
        super().__init__(d_in, n_latents, input_scale)
        self.l1_coeff = float(l1_coeff)

    def hyperparameters(self) -> dict[str, Any]:
        return {"l1_coeff": self.l1_coeff}

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return F.relu(pre)

    def sparsity_loss(self, pre: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        return self.l1_coeff * f.sum(dim=-1).mean()


class TopKSAE(SparseAutoencoder):
    """The k largest pre-activations per token, ReLU'd; at most k latents are non-zero (exactly
    k when the k-th largest pre-activation is positive)."""

    variant: ClassVar[str] = "topk"

    def __init__(
        self, d_in: int, n_latents: int, k: int = 32, k_aux: int | None = None,
        input_scale: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__(d_in, n_latents, input_scale)
        if not 0 < k <= n_latents:
            raise ValueError(f"k must be in 1..{n_latents}, got {k}")
        self.k = int(k)
        self.k_aux = int(k_aux if k_aux is not None else min(2 * k, n_latents))

    def hyperparameters(self) -> dict[str, Any]:
        return {"k": self.k, "k_aux": self.k_aux}

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        values, indices = pre.topk(self.k, dim=-1)  # (..., k)
        return torch.zeros_like(pre).scatter(-1, indices, F.relu(values))

    def sparsity_loss(self, pre: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        return pre.new_zeros(())

    def aux_loss(
        self, pre: torch.Tensor, residual: torch.Tensor, dead: torch.Tensor | None
    ) -> torch.Tensor:
        """AuxK: the top ``k_aux`` dead latents reconstruct the main reconstruction's error,
        weighted 1/32 (zero when nothing is dead)."""
        if dead is None or not bool(dead.any()):
            return pre.new_zeros(())
        k_aux = min(self.k_aux, int(dead.sum()))
        masked = pre.masked_fill(~dead, float("-inf"))  # (B, n): only dead latents compete
        values, indices = masked.topk(k_aux, dim=-1)  # (B, k_aux)
        f_aux = torch.zeros_like(pre).scatter(-1, indices, F.relu(values))  # (B, n)
        error_hat = f_aux @ self.W_dec  # (B, d), no bias: it models the residual
        return AUXK_WEIGHT * (error_hat - residual).pow(2).mean()


class _JumpReLU(torch.autograd.Function):
    """z * H(z - theta); d/dz = H(z - theta), d/dtheta = -(theta / eps) * K((z - theta) / eps)."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, theta: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(z, theta)
        ctx.eps = eps
        return z * (z > theta).to(z.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        z, theta = ctx.saved_tensors
        eps = ctx.eps
        kernel = ((z - theta).abs() < eps / 2).to(grad.dtype)  # rectangle K((z-theta)/eps)
        grad_z = grad * (z > theta).to(grad.dtype)
        grad_theta = (grad * kernel * (-theta / eps)).reshape(-1, theta.shape[-1]).sum(dim=0)
        return grad_z, grad_theta, None


class _Step(torch.autograd.Function):
    """H(z - theta); d/dz = 0, d/dtheta = -(1 / eps) * K((z - theta) / eps)."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor, theta: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(z, theta)
        ctx.eps = eps
        return (z > theta).to(z.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        z, theta = ctx.saved_tensors
        eps = ctx.eps
        kernel = ((z - theta).abs() < eps / 2).to(grad.dtype)
        grad_theta = (grad * kernel * (-1.0 / eps)).reshape(-1, theta.shape[-1]).sum(dim=0)
        return None, grad_theta, None


class JumpReluSAE(SparseAutoencoder):
    """JumpReLU latents: f = pre where pre > theta (per-latent learned threshold), else 0;
    L0 penalty ``l0_coeff`` * (number of active latents)."""

    variant: ClassVar[str] = "jumprelu"

    def __init__(
        self, d_in: int, n_latents: int, l0_coeff: float = 1e-3, bandwidth: float = 0.05,
        threshold_init: float = 0.1, input_scale: float = 1.0,
    ) -> None:  # fmt: skip
        super().__init__(d_in, n_latents, input_scale)
        if bandwidth <= 0 or threshold_init <= 0:
            raise ValueError(f"bandwidth and threshold_init must be > 0, got {bandwidth}, "
                             f"{threshold_init}")  # fmt: skip
        self.l0_coeff, self.bandwidth = float(l0_coeff), float(bandwidth)
        self.threshold_init = float(threshold_init)
        self.log_threshold = nn.Parameter(torch.full((n_latents,), float(threshold_init)).log())

    def hyperparameters(self) -> dict[str, Any]:
        return {"l0_coeff": self.l0_coeff, "bandwidth": self.bandwidth,
                "threshold_init": self.threshold_init}  # fmt: skip

    @property
    def threshold(self) -> torch.Tensor:
        """Per-latent threshold theta (n,) > 0."""
        return self.log_threshold.exp()

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.training:  # straight-through gradients to theta
            return _JumpReLU.apply(pre, self.threshold, self.bandwidth)
        return pre * (pre > self.threshold).to(pre.dtype)  # eval and export: plain ops

    def sparsity_loss(self, pre: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        active = _Step.apply(pre, self.threshold, self.bandwidth)  # (B, n) 0/1
        return self.l0_coeff * active.sum(dim=-1).mean()


SAE_CLASSES: dict[str, type[SparseAutoencoder]] = {
    cls.variant: cls for cls in (ReluSAE, TopKSAE, JumpReluSAE)
}


def make_sae(variant: str, d_in: int, n_latents: int, **hyper: Any) -> SparseAutoencoder:
    """A fresh SAE of ``variant`` ("relu" | "topk" | "jumprelu"); InputError when unknown."""
    if variant not in SAE_CLASSES:
        from edgekit.errors import InputError

        raise InputError(f"unknown SAE variant {variant!r}; expected one of {sorted(SAE_CLASSES)}")
    return SAE_CLASSES[variant](d_in, n_latents, **hyper)


@torch.no_grad()
def reconstruction_metrics(
    sae: SparseAutoencoder, x: torch.Tensor, batch: int = 4096
) -> dict[str, float]:
    """On raw activations x (N, d): ``mse`` (mean squared error per element in the scaled
    space), ``fvu`` (fraction of variance unexplained), ``l0`` (mean active latents per
    token) and ``dead_fraction`` (latents never active on x)."""
    sq_err, l0, fired = 0.0, 0.0, torch.zeros(sae.n_latents, dtype=torch.bool)
    scaled = sae.scale(x)  # (N, d)
    for start in range(0, len(x), batch):
        chunk = x[start : start + batch]
        x_hat, f = sae(chunk)
        sq_err += float((x_hat - scaled[start : start + batch]).pow(2).sum())
        active = f > 0
        l0 += float(active.sum())
        fired |= active.any(dim=0)
    total_var = float((scaled - scaled.mean(dim=0)).pow(2).sum())
    n = len(x)
    return {
        "mse": sq_err / (n * sae.d_in),
        "fvu": sq_err / max(total_var, 1e-12),
        "l0": l0 / n,
        "dead_fraction": 1.0 - float(fired.float().mean()),
    }
