"""Cached continual runs: the final weights and the per-task curves, keyed by the config.

A run is stored under ``cache_dir("spectral-reg")`` with a key over the config and
``RECIPE_VERSION``; a run shipped in the package's ``weights/`` folder is found first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgekit.cache import cache_dir, recipe_key
from edgekit.models.spectral_reg.continual import (
    ContinualConfig,
    ContinualMLP,
    ContinualResult,
    Progress,
    run_continual,
)
from edgekit.weights_cache import load_or_train

RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


def run_key(config: ContinualConfig) -> str:
    """``recipe_key`` over "spectral-reg", ``RECIPE_VERSION`` and the config (16 hex chars)."""
    return recipe_key("spectral-reg", RECIPE_VERSION, config)


def run_path(config: ContinualConfig) -> Path:
    """Where the run of ``config`` is (or will be) cached."""
    return cache_dir("spectral-reg") / f"{config.regularizer}-{run_key(config)}.pt"


def _decode(config: ContinualConfig, blob: dict[str, Any]) -> ContinualResult:
    model = ContinualMLP(config.hidden, config.depth)
    model.load_state_dict(blob["state_dict"])
    curves = json.loads(blob["curves"])
    return ContinualResult(
        config,
        curves["train_accuracy"],
        curves["test_accuracy"],
        curves["first_epoch_accuracy"],
        curves["sigmas"],
        curves["init_sigmas"],
        curves["seconds"],
        model.eval(),
    )


def _blob(result: ContinualResult) -> dict[str, Any]:
    curves = {
        "train_accuracy": result.train_accuracy,
        "test_accuracy": result.test_accuracy,
        "first_epoch_accuracy": result.first_epoch_accuracy,
        "sigmas": result.sigmas,
        "init_sigmas": result.init_sigmas,
        "seconds": result.seconds,
    }
    return {"state_dict": result.model.state_dict(), "curves": json.dumps(curves)}


def continual_cached(
    config: ContinualConfig | None = None, progress: Progress | None = None
) -> ContinualResult:
    """The run of ``config`` (default: spectral), from the cache or run now and cached."""
    config = config or ContinualConfig()
    return load_or_train(
        run_path(config),
        Path(__file__).parent / "weights",
        lambda: run_continual(config, progress),
        load=lambda blob, found: _decode(config, blob),
        save=_blob,
        progress=progress,
        what="run",
    )
