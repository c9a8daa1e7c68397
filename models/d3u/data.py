"""Synthetic multichannel series with heteroscedastic noise, cut into forecasting windows.

Channel c at time t: two seasonal terms (periods 24 and 96, channel-specific amplitude and
phase) plus Gaussian noise whose standard deviation follows its own daily cycle,
sigma_c(t) = s_lo + (s_hi - s_lo) * (1 + sin(2 pi t / 24 + psi_c)) / 2. The mean is what a point
model can learn; the noise level is predictable from the phase in the history but is not a
constant, so a point forecast plus one Gaussian width is miscalibrated by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass
class Windows:
    """``history`` (N, C, L) and ``target`` (N, C, H) float32 windows, plus the true noise
    scale ``sigma`` (N, C, H) of the target (for reference plots only)."""

    history: np.ndarray
    target: np.ndarray
    sigma: np.ndarray

    def __len__(self) -> int:
        return len(self.history)

    def take(self, index: np.ndarray) -> Windows:
        return Windows(self.history[index], self.target[index], self.sigma[index])


def series(
    length: int, channels: int, seed: int = 0, s_lo: float = 0.05, s_hi: float = 0.6
) -> tuple[np.ndarray, np.ndarray]:
    """(values (C, T), sigma (C, T)) float32 of the synthetic series."""
    if length < 8 or channels < 1:
        raise InputError(f"need length >= 8 and channels >= 1, got {length}, {channels}")
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)[None, :]
    amp = rng.uniform(0.5, 1.5, (channels, 2))
    phase = rng.uniform(0, 2 * np.pi, (channels, 3))
    mean = amp[:, :1] * np.sin(2 * np.pi * t / 24 + phase[:, :1]) + amp[:, 1:] * np.sin(
        2 * np.pi * t / 96 + phase[:, 1:2]
    )
    sigma = s_lo + (s_hi - s_lo) * (1 + np.sin(2 * np.pi * t / 24 + phase[:, 2:])) / 2
    values = mean + sigma * rng.standard_normal((channels, length))
    return values.astype(np.float32), sigma.astype(np.float32)


def windows(
    values: np.ndarray, sigma: np.ndarray, lookback: int, horizon: int, stride: int = 1
) -> Windows:
    """Every window of ``lookback`` history steps followed by ``horizon`` target steps."""
    total = values.shape[1]
    starts = np.arange(0, total - lookback - horizon + 1, stride)
    if len(starts) == 0:
        raise InputError(f"series of length {total} is shorter than lookback + horizon")
    hist = np.stack([values[:, s : s + lookback] for s in starts])
    target = np.stack([values[:, s + lookback : s + lookback + horizon] for s in starts])
    sig = np.stack([sigma[:, s + lookback : s + lookback + horizon] for s in starts])
    return Windows(hist, target, sig)


def splits(
    length: int = 4000, channels: int = 4, lookback: int = 48, horizon: int = 24, seed: int = 0
) -> dict[str, Windows]:
    """Chronological train (70 %), val (10 %), test (20 %) windows; test windows stride 4."""
    values, sigma = series(length, channels, seed)
    cuts = [0, int(0.7 * length), int(0.8 * length), length]
    out = {}
    for name, a, b in zip(("train", "val", "test"), cuts[:-1], cuts[1:], strict=True):
        out[name] = windows(
            values[:, a:b], sigma[:, a:b], lookback, horizon, 1 if name == "train" else 4
        )
    return out
