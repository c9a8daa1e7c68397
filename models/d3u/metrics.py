"""Probabilistic forecast metrics: CRPS from samples and in closed form for a Gaussian; MSE."""

from __future__ import annotations

import math

import numpy as np


def crps_samples(samples: np.ndarray, target: np.ndarray) -> float:
    """Mean CRPS of an ensemble: E|X - y| - E|X - X'| / 2 per element, averaged.

    ``samples`` (S, ...) draws, ``target`` (...) observations. Uses the sorted-sample identity
    E|X - X'| = 2 / S^2 * sum_i (2i - S - 1) x_(i), exact for the empirical distribution.
    """
    samples = np.asarray(samples, dtype=np.float64)
    s = samples.shape[0]
    first = np.abs(samples - target[None]).mean(axis=0)
    ordered = np.sort(samples, axis=0)
    weights = (2 * np.arange(1, s + 1) - s - 1).reshape((s,) + (1,) * (samples.ndim - 1))
    spread = 2.0 / (s * s) * (weights * ordered).sum(axis=0)
    return float((first - 0.5 * spread).mean())


def crps_gaussian(mean: np.ndarray, std: np.ndarray, target: np.ndarray) -> float:
    """Mean closed-form CRPS of N(mean, std^2) at ``target``:
    std * (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi)), z = (y - mean) / std."""
    from scipy.special import erf

    std = np.broadcast_to(np.asarray(std, dtype=np.float64), np.shape(target))
    z = (np.asarray(target, dtype=np.float64) - mean) / std
    cdf = 0.5 * (1 + erf(z / math.sqrt(2)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return float((std * (z * (2 * cdf - 1) + 2 * pdf - 1 / math.sqrt(math.pi))).mean())


def mse(prediction: np.ndarray, target: np.ndarray) -> float:
    return float(np.mean((np.asarray(prediction, dtype=np.float64) - target) ** 2))
