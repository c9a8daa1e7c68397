"""D3U: the bundle's sampling metadata states the noise schedule the code really uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.models.d3u.diffusion import Schedule

torch.set_num_threads(1)


def test_stated_betas_are_the_ones_training_and_sampling_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgekit.models.d3u.card as card_module
    import edgekit.models.d3u.evaluate as evaluate_module
    import edgekit.models.d3u.train as train_module
    from edgekit.build.verify import reference_runners

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    used: list[tuple[str, Schedule]] = []

    def spy(where: str, real):  # noqa: ANN001, ANN202
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            schedule = next(a for a in (*args, *kwargs.values()) if isinstance(a, Schedule))
            used.append((where, schedule))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(train_module, "x0_loss", spy("training loss", train_module.x0_loss))
    monkeypatch.setattr(
        evaluate_module, "forecast_samples", spy("evaluate", evaluate_module.forecast_samples)
    )
    monkeypatch.setattr(
        card_module, "forecast_samples", spy("agreement", card_module.forecast_samples)
    )
    card = card_module.D3UCard(
        length=1200, channels=2, lookback=16, horizon=8, point_steps=2, diffusion_steps=2,
        dim=16, heads=2, timesteps=50,
    )  # fmt: skip
    runners = reference_runners(card)
    card.evaluate(runners)
    card.agreement(runners, runners)
    sampling = card.preprocessing()["sampling"]
    betas = sampling["betas"]
    stated = Schedule(sampling["timesteps"], betas["beta_start"], betas["beta_end"])
    assert {where for where, _ in used} == {"training loss", "evaluate", "agreement"}
    for where, schedule in used:
        assert schedule == stated, where
        np.testing.assert_array_equal(schedule.alpha_bar(), stated.alpha_bar())
    assert stated.steps == 50


def test_default_metadata_states_beta_end_0_2_not_ddpm_0_02() -> None:
    from edgekit.models.d3u.card import D3UCard

    sampling = D3UCard().preprocessing()["sampling"]
    assert sampling["timesteps"] == 100
    assert sampling["betas"] == {"schedule": "linear", "beta_start": 1e-4, "beta_end": 0.2}
    # DDPM's 0.02 at T = 100 would leave alpha_bar_T ~ 0.36; the schedule used reaches ~4e-5
    assert Schedule().alpha_bar()[-1] < 1e-4 < Schedule(100, 1e-4, 0.02).alpha_bar()[-1]
