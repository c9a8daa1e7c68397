"""Baselines for Lens, as in the paper's Table 1, computed from per-capture correctness.

``correct`` arrays are boolean: (S, N) for S scenes x N grid settings, (S, A) for A auto-exposure
shots per scene. Every function returns a top-1 accuracy in [0, 1].
"""

from __future__ import annotations

import numpy as np


def ae_accuracy(correct_ae: np.ndarray) -> float:
    """Auto-exposure: mean accuracy over the camera's metered shots (S, A)."""
    return float(np.mean(correct_ae))


def naive_accuracy(correct: np.ndarray) -> float:
    """Naive / random setting: mean accuracy over all grid settings (S, N)."""
    return float(np.mean(correct))


def oracle_accuracy(correct: np.ndarray) -> float:
    """Oracle (upper bound): a scene counts as correct when any setting is correct (S, N)."""
    return float(np.mean(np.any(correct, axis=1)))


def best_fixed_index(calibration_correct: np.ndarray) -> int:
    """The single grid setting with the best accuracy over calibration scenes (S_cal, N);
    ties go to the lower index."""
    return int(np.argmax(np.mean(calibration_correct, axis=0)))


def best_fixed_accuracy(
    calibration_correct: np.ndarray, test_correct: np.ndarray
) -> tuple[float, int]:
    """Best-fixed: the setting chosen on *calibration* scenes, applied to held-out test scenes.

    Returns (accuracy on ``test_correct`` (S, N), chosen grid index). Unlike the paper, which
    picks the setting over the whole evaluation set, calibration and test scenes are disjoint.
    """
    index = best_fixed_index(calibration_correct)
    return float(np.mean(test_correct[:, index])), index


def chosen_accuracy(correct: np.ndarray, chosen: np.ndarray) -> float:
    """Accuracy of one chosen grid index per scene: ``correct`` (S, N), ``chosen`` (S,) int."""
    return float(np.mean(correct[np.arange(len(chosen)), chosen]))
