"""Data curation from judge scores: which specialist pairs the editor trains on, and how often.

``sampling_probabilities(overall, curation)`` turns the judge's overall scores O (N,) in [0, 10]
into a training distribution over the pairs (N,) summing to 1:

- "none": uniform over every pair (the raw specialist output);
- "filter": uniform over the pairs with O >= ``threshold`` (the paper keeps O >= 9);
- "importance": importance sampling, p_i proportional to exp((O_i - 10) / temperature), so a
  pair scored one point lower is drawn e^(-1 / temperature) times as often.

"oracle" (the true edits, uniform) is not a curation of the specialist pairs: ``train.py``
swaps the targets for it; here it is uniform.
"""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError

CURATIONS = ("none", "filter", "importance", "oracle")


def sampling_probabilities(
    overall: np.ndarray, curation: str, threshold: float = 9.0, temperature: float = 1.0
) -> np.ndarray:
    """(N,) float64 probabilities of drawing each pair, from judge scores ``overall`` (N,)."""
    if curation not in CURATIONS:
        raise InputError(f"curation must be one of {CURATIONS}, got {curation!r}")
    overall = np.asarray(overall, np.float64)
    if overall.ndim != 1 or len(overall) == 0:
        raise InputError(f"judge scores must be a non-empty (N,) array, got shape {overall.shape}")
    if curation in ("none", "oracle"):
        weights = np.ones_like(overall)
    elif curation == "filter":
        weights = (overall >= threshold).astype(np.float64)
        if not weights.any():
            raise InputError(
                f"no pair scores >= the filter threshold {threshold} (max {overall.max():.2f})"
            )
    else:
        if temperature <= 0:
            raise InputError(f"importance temperature must be > 0, got {temperature}")
        weights = np.exp((overall - 10.0) / temperature)
    return weights / weights.sum()


def effective_sample_size(probabilities: np.ndarray) -> float:
    """Kish's effective number of distinct pairs, 1 / sum(p^2)."""
    return float(1.0 / np.sum(np.square(probabilities)))
