"""The cosine noise schedule (Nichol & Dhariwal, as MTID / PDPP use it) and DDIM timesteps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass(frozen=True)
class Schedule:
    """Cosine schedule over ``steps`` timesteps t = 0..T-1 with offset ``s``, betas clipped at
    0.999: alpha_bar(t) = f(t + 1) / f(0), f(u) = cos(((u / T) + s) / (1 + s) * pi / 2)^2."""

    steps: int = 100
    s: float = 0.008

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise InputError(f"the schedule needs >= 2 timesteps, got {self.steps}")

    def alpha_bar(self) -> np.ndarray:
        """(T,) float64 cumulative products of 1 - beta, decreasing from ~1 to ~0."""
        u = np.arange(self.steps + 1, dtype=np.float64)
        f = np.cos((u / self.steps + self.s) / (1 + self.s) * np.pi / 2) ** 2
        betas = np.clip(1 - f[1:] / f[:-1], 0.0, 0.999)
        return np.cumprod(1 - betas)


def ddim_timesteps(schedule: Schedule, steps: int) -> np.ndarray:
    """``steps`` timesteps evenly spaced from the top of the schedule down to 0 (int64,
    decreasing, distinct; every timestep when ``steps`` = T)."""
    if not 2 <= steps <= schedule.steps:
        raise InputError(f"DDIM steps must be in 2..{schedule.steps}, got {steps}")
    grid = np.linspace(schedule.steps - 1, 0, steps).round().astype(np.int64)
    return np.unique(grid)[::-1].copy()
