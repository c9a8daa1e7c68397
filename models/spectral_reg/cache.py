"""Cached continual runs: the final weights and the per-task curves, keyed by the config.

A run is stored under ``cache_dir("spectral-reg")`` with a key hashing the config and the
source of continual.py, regularizer.py and this file, so any change to the recipe reruns it.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path

import torch

from edgekit.cache import atomic_write_bytes, cache_dir
from edgekit.models.spectral_reg import continual, regularizer
from edgekit.models.spectral_reg.continual import (
    ContinualConfig,
    ContinualMLP,
    ContinualResult,
    Progress,
    run_continual,
)


def run_key(config: ContinualConfig) -> str:
    """sha256 over the config and the recipe's source files (16 hex chars)."""
    digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode())
    for module in (continual, regularizer):
        digest.update(Path(module.__file__).read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def run_path(config: ContinualConfig) -> Path:
    """Where the run of ``config`` is (or will be) cached."""
    return cache_dir("spectral-reg") / f"{config.regularizer}-{run_key(config)}.pt"


def _load(config: ContinualConfig, path: Path) -> ContinualResult | None:
    if not path.is_file():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        model = ContinualMLP(config.hidden, config.depth)
        model.load_state_dict(blob["state_dict"])
        curves = json.loads(blob["curves"])
    except Exception:  # a corrupt or foreign file: rerun and overwrite it
        return None
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


def continual_cached(
    config: ContinualConfig | None = None, progress: Progress | None = None
) -> ContinualResult:
    """The run of ``config`` (default: spectral), from the cache or run now and cached."""
    config = config or ContinualConfig()
    path = run_path(config)
    cached = _load(config, path)
    if cached is not None:
        if progress:
            progress(1.0, f"loaded cached run {path}")
        return cached
    result = run_continual(config, progress)
    curves = {
        "train_accuracy": result.train_accuracy,
        "test_accuracy": result.test_accuracy,
        "first_epoch_accuracy": result.first_epoch_accuracy,
        "sigmas": result.sigmas,
        "init_sigmas": result.init_sigmas,
        "seconds": result.seconds,
    }
    buffer = io.BytesIO()
    torch.save({"state_dict": result.model.state_dict(), "curves": json.dumps(curves)}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return result
