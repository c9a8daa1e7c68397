"""Uncertainty scores from generated answers, their log-probabilities and semantic clusters.

- ``sdlg_semantic_entropy``: SDLG's weighted semantic entropy. Answer i has log-probability
  log p_i and importance weight w_i (1 for the initial answer, the substituted token's
  probability P[t, v] for an alternative; normalised to sum 1); log q_i = log p_i + log w_i;
  s_c = logsumexp of log q_i over cluster c; pi = softmax(s); SE = -sum_c pi_c s_c.
- ``sampling_semantic_entropy``: the multinomial-sampling estimate: cluster mass
  p(c) = sum of p_j over the distinct sampled sequences j in c; SE = -mean_i log p(c(s_i))
  over the N samples (duplicates counted as drawn).
- ``predictive_entropy``: -mean_i log p(s_i) over the N samples.
- ``auroc``: area under the ROC curve of a score for a binary label (ties count half).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + float(np.log(np.exp(x - m).sum())) if np.isfinite(m) else m


def cluster_log_mass(log_q: Sequence[float], clusters: Sequence[int]) -> np.ndarray:
    """s_c (C,) = logsumexp of ``log_q`` over each cluster label 0..C-1."""
    log_q, labels = np.asarray(log_q, dtype=np.float64), np.asarray(clusters)
    if log_q.shape != labels.shape or log_q.ndim != 1 or log_q.size == 0:
        raise ValueError(f"need equal non-empty 1-d inputs, got {log_q.shape} and {labels.shape}")
    return np.array([_logsumexp(log_q[labels == c]) for c in range(int(labels.max()) + 1)])


def sdlg_semantic_entropy(
    log_probs: Sequence[float], weights: Sequence[float], clusters: Sequence[int]
) -> float:
    """SDLG's weighted semantic entropy of answers (see the module doc)."""
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w <= 0):
        raise ValueError(f"importance weights must be positive, got {w.tolist()}")
    s = cluster_log_mass(np.asarray(log_probs, dtype=np.float64) + np.log(w / w.sum()), clusters)
    pi = np.exp(s - _logsumexp(s))
    return float(-(pi * s).sum())


def sampling_semantic_entropy(
    log_probs: Sequence[float], clusters: Sequence[int], keys: Sequence[Hashable]
) -> float:
    """Monte-Carlo semantic entropy of N samples; ``keys`` identify equal sequences (their
    probability counts once in the cluster mass)."""
    log_probs = np.asarray(log_probs, dtype=np.float64)
    labels = np.asarray(clusters)
    first = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    distinct = np.zeros(len(keys), dtype=bool)
    distinct[list(first.values())] = True
    masses = np.full(int(labels.max()) + 1, -np.inf)
    for c in range(masses.size):
        members = distinct & (labels == c)
        masses[c] = _logsumexp(log_probs[members])
    return float(-masses[labels].mean())


def predictive_entropy(log_probs: Sequence[float]) -> float:
    """-mean log p(s_i) of N sampled sequences."""
    return float(-np.mean(np.asarray(log_probs, dtype=np.float64)))


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """ROC AUC of ``scores`` for ``labels`` (1 = positive): P(score_pos > score_neg), ties 1/2."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(bool)
    pos, neg = scores[labels], scores[~labels]
    if pos.size == 0 or neg.size == 0:
        raise ValueError("AUROC needs at least one positive and one negative label")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(order.size)
    values = np.concatenate([pos, neg])[order]
    i = 0
    while i < values.size:  # average ranks over ties
        j = i
        while j + 1 < values.size and values[j + 1] == values[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    rank_sum = ranks[: pos.size].sum()
    return float((rank_sum - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def roc_curve(scores: Sequence[float], labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(false positive rates, true positive rates) over every threshold, from (0, 0)."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(bool)
    order = np.argsort(-scores, kind="mergesort")
    s, y = scores[order], labels[order]
    cut = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # last index of each distinct score
    tp, fp = np.cumsum(y)[cut], np.cumsum(~y)[cut]
    return np.r_[0.0, fp / max(fp[-1], 1)], np.r_[0.0, tp / max(tp[-1], 1)]
