"""Why Lens wins or loses: how well VisiT tells right captures from wrong ones (AUROC, the
scores of near-black captures, what Lens K=27's wrong picks look like). Used by the Lens
benchmark (lens.bench.evaluate_seed) for its diagnostics table."""

from __future__ import annotations

import numpy as np

DARK_LEVEL, BRIGHT_LEVEL = 20.0, 235.0  # mean 8-bit level of a near-black / blown-out capture
GOOD_MARGIN = 0.05  # a "good exposure": a setting within 5 points of the environment's best


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` (N,) separating ``positive`` (N,) bool from the
    rest (Mann-Whitney U with average ranks for ties); NaN when one class is empty."""
    from scipy.stats import rankdata

    scores, positive = np.ravel(scores), np.ravel(positive).astype(bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def within_scene_auroc(
    scores: np.ndarray, correct: np.ndarray, keep: np.ndarray | None = None
) -> float:
    """Mean over (environment, scene) of the AUROC of ``scores`` (E, S, N) for right vs wrong
    captures (``correct`` (E, S, N) bool) of that scene, over the captures ``keep`` (E, N) bool
    of its environment (None: all); scenes with only right or only wrong kept captures are
    skipped; NaN when none is left."""
    keep = np.ones((scores.shape[0], scores.shape[2]), bool) if keep is None else keep
    per_scene = [
        auroc(scores[e, s, keep[e]], correct[e, s, keep[e]])
        for e in range(scores.shape[0])
        for s in range(scores.shape[1])
        if 0 < correct[e, s, keep[e]].sum() < keep[e].sum()
    ]
    return float(np.mean(per_scene)) if per_scene else float("nan")


def good_exposures(correct: np.ndarray, margin: float = GOOD_MARGIN) -> np.ndarray:
    """(E, N) bool: per environment, the settings whose accuracy over its scenes (``correct``
    (E, S, N)) is within ``margin`` of the environment's best setting."""
    accuracy = correct.mean(axis=1)  # (E, N)
    return accuracy >= accuracy.max(axis=1, keepdims=True) - margin


def visit_diagnostics(
    scores: np.ndarray, correct: np.ndarray, pred: np.ndarray, caps: dict[str, np.ndarray]
) -> dict[str, float]:
    """How well VisiT (``scores`` (E, S, 27)) tells right captures (``correct`` (E, S, 27)) from
    wrong ones: "auroc" over all captures, "auroc_within_scene" (mean over scenes with both
    kinds), "auroc_good_exposures" (the same over each environment's good exposures only,
    good_exposures: can VisiT tell the right capture among captures that are all about equally
    good on average?), mean score of right / wrong / near-black captures, and of Lens K=27's wrong picks the
    share that are near-black or blown out ("grid_mean" (E, S, 27) mean 8-bit level) and the share
    that predict the most frequent wrong class ("top_wrong_class")."""
    level = caps["grid_mean"]
    dark = level < DARK_LEVEL
    pick = scores.argmax(axis=2)[..., None]  # (E, S, 1) Lens K=27 choice
    pick_ok = np.take_along_axis(correct, pick, 2)[..., 0]
    pick_level = np.take_along_axis(level, pick, 2)[..., 0][~pick_ok]
    pick_pred = np.take_along_axis(pred, pick, 2)[..., 0][~pick_ok]
    counts = np.bincount(pick_pred) if pick_pred.size else np.zeros(1, int)
    n_wrong = max(int((~pick_ok).sum()), 1)
    return {
        "auroc": auroc(scores, correct),
        "auroc_within_scene": within_scene_auroc(scores, correct),
        "auroc_good_exposures": within_scene_auroc(scores, correct, good_exposures(correct)),
        "score_right": float(scores[correct].mean()) if correct.any() else float("nan"),
        "score_wrong": float(scores[~correct].mean()) if (~correct).any() else float("nan"),
        "score_dark": float(scores[dark].mean()) if dark.any() else float("nan"),
        "dark_accuracy": float(correct[dark].mean()) if dark.any() else float("nan"),
        "k27_wrong_dark_share": float(np.sum(pick_level < DARK_LEVEL) / n_wrong),
        "k27_wrong_blown_share": float(np.sum(pick_level > BRIGHT_LEVEL) / n_wrong),
        "top_wrong_class": int(counts.argmax()),
        "top_wrong_class_share": float(counts.max() / n_wrong),
    }
