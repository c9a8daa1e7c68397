"""Scoring D3U and its baselines on test windows: CRPS, MSE, interval coverage, spread vs noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit.card import Runner
from edgekit.models.d3u.data import Windows
from edgekit.models.d3u.diffusion import Schedule, forecast_samples
from edgekit.models.d3u.metrics import crps_gaussian, crps_samples, mse

Z90 = 1.6448536269514722  # the 95 % quantile of N(0, 1): a central 90 % interval


def _spread_corr(spread: np.ndarray, sigma: np.ndarray) -> float:
    return float(np.corrcoef(spread.ravel(), sigma.ravel())[0, 1])


def score_samples(samples: np.ndarray, point: np.ndarray, test: Windows) -> dict[str, Any]:
    """Metrics of samples (S, B, C, H) with point forecast (B, C, H) on ``test``."""
    lo, hi = np.quantile(samples, [0.05, 0.95], axis=0)
    spread = samples.std(axis=0)
    return {
        "crps": crps_samples(samples, test.target),
        "mse": mse(samples.mean(axis=0), test.target),
        "point_mse": mse(point, test.target),
        "coverage90": float(((test.target >= lo) & (test.target <= hi)).mean()),
        "spread_sigma_corr": _spread_corr(spread, test.sigma),
    }


def score_gaussian(point: np.ndarray, std: np.ndarray, test: Windows) -> dict[str, Any]:
    """Metrics of N(point, std^2) with std (C,) per channel, on ``test`` (closed-form CRPS)."""
    std_full = np.broadcast_to(std[None, :, None], point.shape)
    inside = np.abs(test.target - point) <= Z90 * std_full
    return {
        "crps": crps_gaussian(point, std_full, test.target),
        "mse": mse(point, test.target),
        "point_mse": mse(point, test.target),
        "coverage90": float(inside.mean()),
        "spread_sigma_corr": float("nan"),  # a constant width cannot follow the noise
    }


def d3u_score(
    runners: Mapping[str, Runner],
    test: Windows,
    schedule: Schedule,
    samples: int = 32,
    steps: int = 20,
    seed: int = 0,
    residual: bool = True,
) -> tuple[dict[str, Any], np.ndarray]:
    """Sample forecasts for ``test`` through ``runners`` and score them; returns (metrics, samples)."""
    drawn, point = forecast_samples(
        runners,
        test.history,
        samples,
        schedule,
        steps,
        seed=seed,
        residual=residual,
        horizon=test.target.shape[-1],
    )
    return score_samples(drawn, point, test), drawn
