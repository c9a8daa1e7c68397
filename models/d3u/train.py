"""Training D3U and its baselines, cached under ``cache_dir("d3u")``.

``train_d3u(config)`` fits the point forecaster (MSE), then PatchDN on the point model's
training residuals (x0 loss); ``train_raw_diffusion(config)`` fits PatchDN on the raw targets
(zero forecast condition), the "diffusion on raw targets" baseline. Weights are cached keyed by
the config and ``RECIPE_VERSION``; weights shipped in the package's ``weights/`` folder are found
first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.models.d3u.data import Windows, splits
from edgekit.models.d3u.diffusion import Schedule, x0_loss
from edgekit.models.d3u.patchdn import PatchDN, PointForecaster

Progress = Callable[[float, str], None]

RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class D3UConfig:
    """Data, network and training sizes (defaults: about a minute per model on one thread)."""

    length: int = 4000
    channels: int = 4
    lookback: int = 48
    horizon: int = 24
    seed: int = 0
    patch: int = 4
    dim: int = 32
    depth: int = 2
    heads: int = 2
    point_steps: int = 500
    diffusion_steps: int = 1500
    batch: int = 64
    lr: float = 2e-3
    timesteps: int = 100

    def schedule(self) -> Schedule:
        return Schedule(self.timesteps)

    def data(self) -> dict[str, Windows]:
        return splits(self.length, self.channels, self.lookback, self.horizon, self.seed)

    def denoiser(self) -> PatchDN:
        return PatchDN(
            self.channels, self.lookback, self.horizon, self.patch, self.dim, self.depth, self.heads
        )


@dataclass
class Trained:
    """Eval-mode networks of one run and their training seconds (0 when loaded from cache)."""

    point: PointForecaster | None
    denoiser: PatchDN
    seconds: float
    cached: bool
    path: Path | None = None


def _key(config: D3UConfig, kind: str) -> str:
    """``recipe_key`` over "d3u", ``RECIPE_VERSION``, the config and the run ``kind``."""
    from edgekit.cache import recipe_key

    return recipe_key("d3u", RECIPE_VERSION, asdict(config) | {"kind": kind})


def cache_path(config: D3UConfig, kind: str) -> Path:
    """Where the ``kind`` ("d3u" | "raw") run of ``config`` is cached."""
    from edgekit.cache import cache_dir

    return cache_dir("d3u") / f"{kind}-{_key(config, kind)}.pt"


def _batches(count: int, config: D3UConfig, steps: int, generator: torch.Generator):
    for _ in range(steps):
        yield torch.randint(0, count, (config.batch,), generator=generator)


def fit_point(
    config: D3UConfig, train: Windows, progress: Progress | None = None
) -> PointForecaster:
    """Point forecaster trained with MSE for ``config.point_steps`` Adam steps."""
    gen = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)
    model = PointForecaster(config.lookback, config.horizon)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    hist, target = torch.from_numpy(train.history), torch.from_numpy(train.target)
    for step, idx in enumerate(_batches(len(train), config, config.point_steps, gen)):
        loss = torch.mean((model(hist[idx]) - target[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress and step % 200 == 0:
            progress(step / config.point_steps, f"point step {step} mse {loss.item():.4f}")
    return model.eval()


def fit_denoiser(
    config: D3UConfig,
    history: np.ndarray,
    forecast: np.ndarray,
    x0: np.ndarray,
    progress: Progress | None = None,
) -> PatchDN:
    """PatchDN trained with the x0 loss on (history, forecast condition, clean x0) triples."""
    gen = torch.Generator().manual_seed(config.seed + 1)
    torch.manual_seed(config.seed + 1)
    model = config.denoiser()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.diffusion_steps)
    hist, fc, clean = (
        torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in (history, forecast, x0)
    )
    for step, idx in enumerate(_batches(len(hist), config, config.diffusion_steps, gen)):
        loss = x0_loss(model, clean[idx], hist[idx], fc[idx], config.schedule(), gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if progress and step % 250 == 0:
            progress(step / config.diffusion_steps, f"denoiser step {step} loss {loss.item():.4f}")
    return model.eval()


def _blob(trained: Trained) -> dict[str, Any]:
    blob: dict[str, Any] = {"denoiser": trained.denoiser.state_dict(), "seconds": trained.seconds}
    if trained.point is not None:
        blob["point"] = trained.point.state_dict()
    return blob


def _decode(config: D3UConfig, with_point: bool, blob: dict[str, Any], path: Path) -> Trained:
    denoiser = config.denoiser()
    denoiser.load_state_dict(blob["denoiser"])
    point = None
    if with_point:
        point = PointForecaster(config.lookback, config.horizon)
        point.load_state_dict(blob["point"])
        point.eval()
    return Trained(point, denoiser.eval(), float(blob["seconds"]), True, path)


def _cached(config: D3UConfig, kind: str, fit_run: Callable[[Path], Trained]) -> Trained:
    """The ``kind`` run of ``config``: the shipped copy (package ``weights/``) or the cached one,
    else ``fit_run(cache path)`` now and cached; the "d3u" run holds the point forecaster too."""
    from edgekit.weights_cache import load_or_train

    path = cache_path(config, kind)
    return load_or_train(
        path,
        Path(__file__).parent / "weights",
        lambda: fit_run(path),
        load=lambda blob, found: _decode(config, kind == "d3u", blob, found),
        save=_blob,
    )


def train_d3u(config: D3UConfig | None = None, progress: Progress | None = None) -> Trained:
    """Point forecaster + residual PatchDN (cached)."""
    config = config or D3UConfig()

    def fit_run(path: Path) -> Trained:
        started = time.perf_counter()
        train = config.data()["train"]
        point = fit_point(config, train, progress)
        with torch.no_grad():
            forecast = point(torch.from_numpy(train.history)).numpy()
        denoiser = fit_denoiser(config, train.history, forecast, train.target - forecast, progress)
        return Trained(point, denoiser, time.perf_counter() - started, False, path)

    return _cached(config, "d3u", fit_run)


def train_raw_diffusion(
    config: D3UConfig | None = None, progress: Progress | None = None
) -> Trained:
    """PatchDN on the raw targets with a zero forecast condition (cached); no point model."""
    config = config or D3UConfig()

    def fit_run(path: Path) -> Trained:
        started = time.perf_counter()
        train = config.data()["train"]
        zeros = np.zeros_like(train.target)
        denoiser = fit_denoiser(config, train.history, zeros, train.target, progress)
        return Trained(None, denoiser, time.perf_counter() - started, False, path)

    return _cached(config, "raw", fit_run)
