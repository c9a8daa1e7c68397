"""d3u card: D3U probabilistic forecaster = point model + PatchDN residual denoiser, two graphs.

"point": history (B, C, L) float32 -> forecast (B, C, H) float32.
"denoiser": noisy (B, C, H), timestep (B,) float32 in [0, T-1], history (B, C, L), forecast
(B, C, H) -> x0 (B, C, H) float32, the predicted clean residual.
A forecast is ``forecast + DDIM sample of the residual``; the sampling loop
(``diffusion.forecast_samples``) runs over any runners of these graphs (torch, ONNX Runtime...).

Options are ``D3UConfig`` fields; training is cached under ``cache_dir("d3u")`` (about two
minutes on one thread the first time). ``edgekit eval d3u`` runs the study in experiment.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.d3u.data import Windows
from edgekit.models.d3u.diffusion import forecast_samples
from edgekit.models.d3u.evaluate import d3u_score
from edgekit.models.d3u.graphs import d3u_graphs
from edgekit.models.d3u.train import D3UConfig, Trained, train_d3u

EVAL_WINDOWS = 48  # test windows scored by evaluate / agreement
EVAL_SAMPLES = 16
SAMPLING_STEPS = 20  # DDIM steps of every sampling loop this card runs
SAMPLING_ETA = 0.0  # deterministic DDIM given the initial noise


class D3UCard(ModelCard):
    """D3U trained on the synthetic heteroscedastic series; both graphs ship in one bundle."""

    name: ClassVar[str] = "d3u"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "probabilistic-forecasting"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "point forecaster + conditional diffusion on its residual with a PatchDN denoiser "
        "(patches, DiT blocks with adaLN-Zero), DDIM sampling in "
        f"{SAMPLING_STEPS} steps"
    )
    primary_metric: ClassVar[str | None] = "crps"
    higher_is_better: ClassVar[bool] = False
    int8_budget: ClassVar[float] = 0.1
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.2, rtol=0.2),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "point_max_abs_error": 1e-4,
        "sample_max_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.config = config_from_options("d3u", D3UConfig, options)
        self._trained: Trained | None = None
        self._test: Windows | None = None

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """Point model + residual PatchDN, from the cache or trained now."""
        if self._trained is None:
            self._trained = train_d3u(self.config, progress)
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """ "point" and "denoiser" (see the module docstring), batch axis dynamic."""
        trained = self.train()
        return d3u_graphs(
            trained.point, trained.denoiser, self.test().history[:2], self.config.horizon
        )

    # ---- real data ---------------------------------------------------------------------------
    def test(self) -> Windows:
        """The first EVAL_WINDOWS test windows of the synthetic series."""
        if self._test is None:
            test = self.config.data()["test"]
            if len(test.history) < EVAL_WINDOWS:
                from edgekit.errors import InputError

                raise InputError(
                    f"d3u: length={self.config.length} leaves {len(test.history)} test windows; "
                    f"evaluation scores {EVAL_WINDOWS}: give a longer series (length >= 4000 "
                    "is the default)"
                )
            self._test = test.take(np.arange(EVAL_WINDOWS))
        return self._test

    def _denoiser_feeds(self, history: np.ndarray, seed: int) -> Feeds:
        point = self.train().point
        assert point is not None
        with torch.no_grad():
            forecast = point(torch.from_numpy(history)).numpy()
        rng = np.random.default_rng(seed)
        b = len(history)
        return {
            "noisy": rng.standard_normal(forecast.shape).astype(np.float32),
            "timestep": rng.integers(0, self.config.timesteps, b).astype(np.float32),
            "history": history,
            "forecast": forecast,
        }

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four test windows for each graph (the denoiser at random noise levels)."""
        history = self.test().history[:4]
        return {"point": {"history": history}, "denoiser": self._denoiser_feeds(history, 0)}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-window feeds from the training windows."""
        history = self.config.data()["train"].history[:: max(1, 2000 // limit)][:limit]
        denoiser = self._denoiser_feeds(history, 1)
        return {
            "point": [{"history": h[None]} for h in history],
            "denoiser": [
                {k: v[i : i + 1] for k, v in denoiser.items()} for i in range(len(history))
            ],
        }

    def preprocessing(self) -> dict[str, Any]:
        c, schedule = self.config, self.config.schedule()
        return {
            "input": f"history (B, {c.channels}, {c.lookback}) float32, raw values",
            "sampling": {
                "method": "DDIM, x0-parameterised",
                "timesteps": schedule.steps,
                "steps": SAMPLING_STEPS,
                "betas": {
                    "schedule": "linear",
                    "beta_start": schedule.beta_start,
                    "beta_end": schedule.beta_end,
                },
                "eta": SAMPLING_ETA,
            },
            "output": "forecast samples = point forecast + sampled residual, (S, B, C, H)",
        }

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """CRPS and MSE on EVAL_WINDOWS test windows (EVAL_SAMPLES samples, fixed noise)."""
        metrics, _ = d3u_score(
            runners, self.test(), self.config.schedule(), EVAL_SAMPLES, SAMPLING_STEPS
        )
        return {k: metrics[k] for k in ("crps", "mse", "coverage90")}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Max |difference| of point forecasts and of DDIM samples under the same noise."""
        history = self.test().history
        schedule = self.config.schedule()
        ref, ref_point = forecast_samples(
            reference, history, 4, schedule, SAMPLING_STEPS, SAMPLING_ETA, seed=3
        )
        cand, cand_point = forecast_samples(
            candidate, history, 4, schedule, SAMPLING_STEPS, SAMPLING_ETA, seed=3
        )
        return {
            "point_max_abs_error": float(np.abs(ref_point - cand_point).max()),
            "sample_max_abs_error": float(np.abs(ref - cand).max()),
        }
