"""Scoring an editor on held-out true edits: per-task MSE / PSNR and judged success rate."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.card import Runner
from edgekit.errors import InputError
from edgekit.models.omniedit.judge import judge
from edgekit.models.omniedit.scenes import PALETTE, TASKS, EditSet

SUCCESS = 8.0  # an edit "succeeds" when the noise-free judge rates it O >= 8


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB of a mean squared error on [0, 1] images."""
    if mse < 0:
        raise InputError(f"mse must be >= 0, got {mse}")
    return float("inf") if mse == 0 else float(10.0 * np.log10(1.0 / mse))


def palette_index(images: np.ndarray) -> np.ndarray:
    """(N, 3, H, W) images -> (N, H, W) index of each pixel's nearest PALETTE colour."""
    dist = np.linalg.norm(images[:, None] - PALETTE[None, :, :, None, None], axis=2)  # (N, K, H, W)
    return dist.argmin(axis=1)


def score_edits(edited: np.ndarray, test: EditSet) -> dict[str, Any]:
    """Metrics of edits (N, 3, S, S) in [0, 1] against the true edits of ``test``.

    Returns overall "mse", "psnr", "success" (share judged O >= SUCCESS) and "judge" (mean O),
    plus "per_task": {task: the same four}; MSE and PSNR are over all pixels of the image.
    """
    if edited.shape != test.target.shape:
        raise InputError(f"edits have shape {edited.shape}, the test set {test.target.shape}")
    per_image = np.mean((edited - test.target) ** 2, axis=(1, 2, 3))  # (N,)
    overall = judge(test.source, edited, test.instructions).overall  # noise-free judge

    def summary(mask: np.ndarray) -> dict[str, float]:
        mse = float(per_image[mask].mean())
        return {
            "mse": mse,
            "psnr": psnr(mse),
            "success": float((overall[mask] >= SUCCESS).mean()),
            "judge": float(overall[mask].mean()),
        }

    result: dict[str, Any] = summary(np.ones(len(test), bool))
    result["per_task"] = {
        task: summary(test.task == i) for i, task in enumerate(TASKS) if np.any(test.task == i)
    }
    return result


def run_edits(runner: Runner, test: EditSet, batch: int = 256) -> np.ndarray:
    """Edits (N, 3, S, S) float32 in [0, 1] of ``test`` through a runner of the "editor" graph."""
    out = []
    for lo in range(0, len(test), batch):
        feeds = {
            "source": np.ascontiguousarray(test.source[lo : lo + batch], np.float32),
            "instruction": np.ascontiguousarray(test.instruction[lo : lo + batch], np.float32),
        }
        out.append(np.asarray(runner.run(feeds)["edited"], np.float32))
    return np.clip(np.concatenate(out), 0.0, 1.0)


def evaluate_runner(runner: Runner, test: EditSet) -> tuple[dict[str, Any], np.ndarray]:
    """Edit ``test`` through a runner of the "editor" graph and score the edits;
    returns (metrics, edits (N, 3, S, S))."""
    edited = run_edits(runner, test)
    return score_edits(edited, test), edited
