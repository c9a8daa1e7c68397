"""How many directions a weight update uses: numerical and effective rank.

Both read the singular values s_1 >= s_2 >= ... of the update (computed in float64).
"""

from __future__ import annotations

import torch

DEFAULT_RTOL = 1e-4  # well above float32 rounding (~1e-7 relative) of a rank-deficient update


def singular_values(update: torch.Tensor) -> torch.Tensor:
    """Singular values (min(d, k),) float64, descending, of ``update`` (d, k)."""
    if update.ndim != 2:
        raise ValueError(f"an update must be a (d, k) matrix, got shape {tuple(update.shape)}")
    return torch.linalg.svdvals(update.detach().double())


def numerical_rank(update: torch.Tensor, rtol: float = DEFAULT_RTOL) -> int:
    """Count of singular values above ``rtol * s_1`` (0 for an all-zero update)."""
    s = singular_values(update)
    if float(s[0]) == 0.0:
        return 0
    return int((s > rtol * s[0]).sum())


def effective_rank(update: torch.Tensor) -> float:
    """exp(entropy of s / sum(s)): 1 for one direction, min(d, k) for a flat spectrum."""
    s = singular_values(update)
    total = float(s.sum())
    if total == 0.0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))
