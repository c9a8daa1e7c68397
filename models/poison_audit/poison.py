"""Gaussian poisoning and the Gaussian unlearning score.

Poisoning: P training inputs x_i get a secret perturbation xi_i ~ N(0, eps^2 I) added (labels
unchanged); the auditor keeps (indices, xi).

Score: at the clean input x_i, with g_i = grad_x CE(model(x_i), y_i),

    z_i = -<xi_i, g_i> / (eps ||g_i||)

If the model never saw xi_i, g_i / ||g_i|| is independent of xi_i and z_i ~ N(0, 1) exactly.
Training on x_i + xi_i lowers the loss in the direction of xi_i, so the negative input gradient
at x_i turns towards xi_i and z_i > 0. The Gaussian unlearning score is mean_i z_i (0 with
standard error 1 / sqrt(P) under the null); ``z`` = sqrt(P) mean is its significance. An
unlearning method removes the poison when the score returns to the null, as retraining does.
(The sign is chosen so that exposure is positive; the study of Pawelczyk et al., ICLR 2025,
measures the same correlation between the poison and the input gradients.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass(frozen=True)
class GaussianPoison:
    """The auditor's secret: poisoned row ``indices`` (P,), their ``noise`` (P, D), ``eps``."""

    indices: np.ndarray
    noise: np.ndarray
    eps: float


@dataclass(frozen=True)
class PoisonScore:
    """mean z (the score), its z statistic sqrt(P) mean, one-sided p-value, per-point z (P,)."""

    score: float
    z: float
    p_value: float
    per_point: np.ndarray

    def to_json(self) -> dict[str, float]:
        return {"score": self.score, "z": self.z, "p_value": self.p_value}


def gaussian_poison(
    x: np.ndarray, count: int, eps: float, seed: int
) -> tuple[np.ndarray, GaussianPoison]:
    """Poison ``count`` random rows of ``x`` (N, D): returns (poisoned copy, secret)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise InputError(f"inputs must be (N, D) rows, got shape {x.shape}")
    if not 0 < count <= len(x):
        raise InputError(f"poison count must be in [1, {len(x)}], got {count}")
    if eps <= 0:
        raise InputError(f"poison eps must be > 0, got {eps}")
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(len(x), size=count, replace=False))
    noise = (rng.standard_normal((count, x.shape[1])) * eps).astype(x.dtype)
    poisoned = x.copy()
    poisoned[indices] += noise
    return poisoned, GaussianPoison(indices, noise, float(eps))


def score_from_gradients(gradients: np.ndarray, poison: GaussianPoison) -> PoisonScore:
    """The score from input gradients (P, D) at the clean poisoned rows (module docstring)."""
    g = np.asarray(gradients, dtype=np.float64)
    if g.shape != poison.noise.shape:
        raise InputError(f"gradients {g.shape} must match the poison noise {poison.noise.shape}")
    norms = np.linalg.norm(g, axis=1)
    keep = norms > 0  # a point with zero gradient carries no direction: left out
    if not keep.any():
        raise InputError("every input gradient is zero: the model gives no direction to score")
    z = -(poison.noise[keep] * g[keep]).sum(axis=1) / (poison.eps * norms[keep])
    mean = float(z.mean())
    stat = mean * math.sqrt(len(z))
    p_value = 0.5 * math.erfc(stat / math.sqrt(2.0))
    return PoisonScore(mean, stat, p_value, z)


def input_gradients(model: object, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """grad_x CE(model(x_i), y_i) per row, (P, D) float64, for a torch classifier.

    Runs a float64 copy of the model: for confidently fit points 1 - p_y is below float32's
    resolution and float32 gradients lose their direction.
    """
    import copy

    import torch

    model64 = copy.deepcopy(model).double().eval()
    inputs = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(
        model64(inputs), torch.as_tensor(y, dtype=torch.long), reduction="sum"
    )
    (grad,) = torch.autograd.grad(loss, inputs)
    return grad.numpy()


def gaussian_unlearning_score(
    model: object, x_clean: np.ndarray, y: np.ndarray, poison: GaussianPoison
) -> PoisonScore:
    """The score of a torch classifier (logits (B, C) from (B, D)) on the clean training
    inputs ``x_clean`` (N, D) and labels (N,) of the poisoned rows named by ``poison``."""
    rows = poison.indices
    return score_from_gradients(input_gradients(model, x_clean[rows], y[rows]), poison)


def finite_difference_gradients(
    logits_fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, y: np.ndarray, h: float = 1e-3
) -> np.ndarray:
    """grad_x CE for a black-box classifier (e.g. an exported artifact): the logits' Jacobian by
    central differences (2 D extra rows per input, one call), times softmax - onehot.

    ``logits_fn``: (B, D) float32 -> (B, C). Returns (P, D) float64. Exact for piecewise-linear
    networks (ReLU) whenever no kink lies within h of x.
    """
    x = np.asarray(x, dtype=np.float64)
    n, dim = x.shape
    steps = np.concatenate([np.eye(dim), -np.eye(dim)]) * h  # (2D, D)
    probes = (x[:, None, :] + steps[None]).reshape(-1, dim)  # (P * 2D, D)
    batch = np.concatenate([x, probes]).astype(np.float32)
    out = np.asarray(logits_fn(batch), dtype=np.float64)
    logits, probed = out[:n], out[n:].reshape(n, 2, dim, -1)  # (P, C), (P, 2, D, C)
    jacobian = (probed[:, 0] - probed[:, 1]) / (2 * h)  # (P, D, C)
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    residual = p.copy()
    rows = np.arange(n)
    residual[rows, y] = -(p.sum(axis=1) - p[rows, y])  # p_y - 1 without cancellation
    return np.einsum("pdc,pc->pd", jacobian, residual)
