"""Procedure-planning metrics on action plans (N, T) int: SR, mAcc, mIoU, per-step accuracy."""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError


def _check(pred: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred, truth = np.asarray(pred), np.asarray(truth)
    if pred.ndim != 2 or pred.shape != truth.shape or pred.size == 0:
        raise InputError(
            f"plans must be equal, non-empty (N, T) arrays, got {pred.shape} and {truth.shape}"
        )
    return pred, truth


def success_rate(pred: np.ndarray, truth: np.ndarray) -> float:
    """SR: the fraction of plans whose every step is right."""
    pred, truth = _check(pred, truth)
    return float(np.all(pred == truth, axis=1).mean())


def mean_accuracy(pred: np.ndarray, truth: np.ndarray) -> float:
    """mAcc: the fraction of steps (over all plans and positions) with the right action."""
    pred, truth = _check(pred, truth)
    return float((pred == truth).mean())


def step_accuracy(pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """(T,) accuracy at each step position."""
    pred, truth = _check(pred, truth)
    return (pred == truth).mean(axis=0)


def mean_iou(pred: np.ndarray, truth: np.ndarray) -> float:
    """mIoU: the mean over plans of |set(pred) & set(truth)| / |set(pred) | set(truth)|
    (order ignored: did the plan use the right actions at all)."""
    pred, truth = _check(pred, truth)
    scores = [len(set(p) & set(t)) / len(set(p) | set(t)) for p, t in zip(pred, truth, strict=True)]
    return float(np.mean(scores))


def plan_metrics(pred: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """{"success_rate", "mean_accuracy", "mean_iou"} of ``pred`` against ``truth`` (N, T)."""
    return {
        "success_rate": success_rate(pred, truth),
        "mean_accuracy": mean_accuracy(pred, truth),
        "mean_iou": mean_iou(pred, truth),
    }
