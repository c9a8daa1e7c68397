"""HiSSD's loss pieces: expectile value regression, advantage weights, MoCo-style contrast."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edgekit.errors import InputError


def expectile_loss(diff: torch.Tensor, tau: float = 0.9) -> torch.Tensor:
    """Mean of ``|tau - 1[diff < 0]| * diff^2`` for diff = target - prediction, any shape.

    With tau > 0.5 under-estimates cost more than over-estimates, so the fitted value moves
    toward an upper expectile of the in-sample targets (IQL's in-sample maximum).
    """
    if not 0.0 < tau < 1.0:
        raise InputError(f"expectile tau must be in (0, 1), got {tau}")
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def advantage_weights(td: torch.Tensor, beta: float = 10.0, cap: float = 100.0) -> torch.Tensor:
    """``min(exp(beta * td), cap)``, elementwise, without gradient; td is the TD error (B,)."""
    if beta <= 0 or cap <= 0:
        raise InputError(f"advantage beta and cap must be > 0, got beta={beta}, cap={cap}")
    return torch.exp(beta * td.detach()).clamp(max=cap)


def contrastive_loss(
    query: torch.Tensor,
    keys: torch.Tensor,
    query_labels: torch.Tensor,
    key_labels: torch.Tensor,
    temperature: float = 0.1,
) -> torch.Tensor:
    """Supervised InfoNCE over a key bank (MoCo with task labels).

    query (Q, D) and keys (K, D) are L2-normalised here; a key is a positive for a query when
    their labels (Q,), (K,) match. Per query: ``-log(sum_pos exp(s) / sum_all exp(s))`` with
    ``s = q . k / temperature``; queries without a positive key are skipped. Returns the mean.
    """
    if query.ndim != 2 or keys.ndim != 2 or query.shape[1] != keys.shape[1]:
        raise InputError(
            f"query (Q, D) and keys (K, D) needed, got {tuple(query.shape)}, {tuple(keys.shape)}"
        )
    if temperature <= 0:
        raise InputError(f"temperature must be > 0, got {temperature}")
    q, k = F.normalize(query, dim=1), F.normalize(keys, dim=1)
    logits = q @ k.T / temperature  # (Q, K)
    positive = query_labels[:, None] == key_labels[None, :]  # (Q, K)
    has = positive.any(dim=1)
    if not has.any():
        raise InputError("no query has a positive key (labels never match)")
    log_all = torch.logsumexp(logits, dim=1)
    log_pos = torch.logsumexp(logits.masked_fill(~positive, float("-inf")), dim=1)
    return (log_all - log_pos)[has].mean()
