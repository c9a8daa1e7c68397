"""BingoGuard's evaluation metrics, as the paper reports them.

Binary (unsafe = positive class): accuracy, precision, recall, F1, false-positive rate and
AUPRC, the area under the precision-recall curve computed as average precision
(sum over thresholds of (R_n - R_{n-1}) * P_n, thresholds at the distinct scores, ties
grouped). Severity: macro-F1 over the 5 levels and per-level accuracy (the share of
examples of level k predicted as level k). A ratio with an empty denominator is 0.0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgekit.errors import InputError
from edgekit.models.bingoguard.data import Example
from edgekit.models.bingoguard.taxonomy import NUM_LEVELS
from edgekit.numeric import bootstrap_interval


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den else 0.0


def _binary_labels(labels: np.ndarray, name: str = "labels") -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.isin(labels, (0, 1)).all():
        raise InputError(f"{name} must be a 1-D array of 0/1 (1 = unsafe), got {labels!r}")
    return labels.astype(np.int64)


def _scores(scores: np.ndarray, n: int) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape != (n,) or not np.isfinite(scores).all():
        raise InputError(f"scores must be {n} finite values (N,), got shape {scores.shape}")
    return scores


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """AUPRC of ``scores`` (N,) for binary ``labels`` (N,), positives = 1.

    Thresholds are the distinct scores from high to low; tied scores enter together.
    0.0 when there is no positive example.
    """
    labels = _binary_labels(labels)
    scores = _scores(scores, len(labels))
    positives = int(labels.sum())
    if positives == 0:
        return 0.0
    order = np.argsort(-scores, kind="mergesort")
    s, y = scores[order], labels[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # index where each score ends
    tp = np.cumsum(y)[last_of_tie]
    predicted = last_of_tie + 1
    precision = tp / predicted
    recall = tp / positives
    previous = np.r_[0.0, recall[:-1]]
    return float(np.sum((recall - previous) * precision))


def binary_metrics(
    labels: np.ndarray, scores: np.ndarray, threshold: float = 0.5
) -> dict[str, float]:
    """Accuracy, precision, recall, F1, FPR at ``threshold`` (unsafe when score >= it) and AUPRC.

    ``labels`` (N,) 0/1 with 1 = unsafe; ``scores`` (N,) P(unsafe) or any score that grows with
    it.
    """
    labels = _binary_labels(labels)
    scores = _scores(scores, len(labels))
    predicted = (scores >= threshold).astype(np.int64)
    tp = int(((predicted == 1) & (labels == 1)).sum())
    fp = int(((predicted == 1) & (labels == 0)).sum())
    fn = int(((predicted == 0) & (labels == 1)).sum())
    tn = int(((predicted == 0) & (labels == 0)).sum())
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "accuracy": _ratio(tp + tn, len(labels)),
        "precision": precision,
        "recall": recall,
        "f1": _ratio(2 * precision * recall, precision + recall),
        "fpr": _ratio(fp, fp + tn),
        "auprc": average_precision(labels, scores),
    }


def severity_metrics(
    true_levels: np.ndarray, predicted_levels: np.ndarray, num_levels: int = NUM_LEVELS
) -> dict[str, float]:
    """Macro-F1 over ``num_levels`` levels and per-level accuracy (recall of each level).

    Both inputs (N,) ints in [0, num_levels). Returns ``severity_macro_f1`` and
    ``severity_acc_level{k}`` for every k; a level with no example has accuracy 0.0 and F1 0.0
    (it still counts in the macro average, as the paper averages over all 5 levels).
    """
    y = np.asarray(true_levels)
    p = np.asarray(predicted_levels)
    if y.shape != p.shape or y.ndim != 1:
        raise InputError(f"level arrays must be 1-D and equal length, got {y.shape} and {p.shape}")
    for name, arr in (("true", y), ("predicted", p)):
        if arr.size and (arr.min() < 0 or arr.max() >= num_levels):
            raise InputError(f"{name} levels must lie in 0..{num_levels - 1}")
    out: dict[str, float] = {}
    f1s = []
    for k in range(num_levels):
        tp = int(((p == k) & (y == k)).sum())
        precision = _ratio(tp, int((p == k).sum()))
        recall = _ratio(tp, int((y == k).sum()))
        f1s.append(_ratio(2 * precision * recall, precision + recall))
        out[f"severity_acc_level{k}"] = recall
    out["severity_macro_f1"] = float(np.mean(f1s))
    return dict(sorted(out.items(), key=lambda kv: kv[0] != "severity_macro_f1"))


def topic_accuracy(true_topics: np.ndarray, predicted_topics: np.ndarray) -> float:
    """Share of examples whose topic (N,) is predicted exactly."""
    y, p = np.asarray(true_topics), np.asarray(predicted_topics)
    if y.shape != p.shape:
        raise InputError(f"topic arrays differ in shape: {y.shape} vs {p.shape}")
    return _ratio(int((y == p).sum()), len(y))


def baseline_metrics(
    unsafe: np.ndarray, p_unsafe: np.ndarray, true_levels: np.ndarray, levels: np.ndarray
) -> dict[str, float]:
    """The trivial baselines beside the scorer, and 95 % bootstrap intervals over the texts.

    ``flag_all_*``: flag every text as unsafe (F1 2u/(1+u) at unsafe share u, AUPRC u);
    ``majority_severity_macro_f1``: always the most common level. ``binary_f1_ci_*`` and
    ``severity_macro_f1_ci_*`` bracket the scorer's own; the ``*_minus_flag_all_ci_*`` (F1,
    AUPRC) and ``severity_macro_f1_minus_majority_ci_*`` intervals are paired (the scorer and
    the baseline on the same resampled texts).
    """
    unsafe, p_unsafe = _binary_labels(unsafe), _scores(p_unsafe, len(unsafe))
    y, p = np.asarray(true_levels), np.asarray(levels)
    majority = np.full(len(y), np.bincount(y, minlength=NUM_LEVELS).argmax())
    flag_all = binary_metrics(unsafe, np.ones(len(unsafe)))

    def f1(i: np.ndarray, scores: np.ndarray) -> float:
        return binary_metrics(unsafe[i], scores[i])["f1"]

    def macro(i: np.ndarray, predicted: np.ndarray) -> float:
        return severity_metrics(y[i], predicted[i])["severity_macro_f1"]

    ones, n = np.ones(len(unsafe)), len(unsafe)
    intervals = {
        "binary_f1": bootstrap_interval(lambda i: f1(i, p_unsafe), n),
        "binary_f1_minus_flag_all": bootstrap_interval(lambda i: f1(i, p_unsafe) - f1(i, ones), n),
        "binary_auprc_minus_flag_all": bootstrap_interval(
            lambda i: average_precision(unsafe[i], p_unsafe[i]) - unsafe[i].mean(), n
        ),
        "severity_macro_f1": bootstrap_interval(lambda i: macro(i, p), n),
        "severity_macro_f1_minus_majority": bootstrap_interval(
            lambda i: macro(i, p) - macro(i, majority), n
        ),
    }
    out = {
        "flag_all_f1": flag_all["f1"],
        "flag_all_precision": flag_all["precision"],
        "flag_all_auprc": flag_all["auprc"],
        "majority_severity_macro_f1": severity_metrics(y, majority)["severity_macro_f1"],
    }
    for key, (low, high) in intervals.items():
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = low, high
    return out


def task_metrics(
    examples: Sequence[Example], p_unsafe: np.ndarray, topic: np.ndarray, level: np.ndarray
) -> dict[str, float]:
    """Every metric of predictions (N,) on labelled ``examples`` (N): ``binary_*`` at
    threshold 0.5 (unsafe = positive), ``severity_*``, ``topic_accuracy``, and the trivial
    baselines with bootstrap intervals (``baseline_metrics``)."""
    unsafe = np.array([e.unsafe for e in examples])
    true_levels = np.array([e.level for e in examples])
    out = {f"binary_{k}": v for k, v in binary_metrics(unsafe, p_unsafe).items()}
    out.update(severity_metrics(true_levels, level))
    out["topic_accuracy"] = topic_accuracy(np.array([e.topic for e in examples]), topic)
    out.update(baseline_metrics(unsafe, p_unsafe, true_levels, np.asarray(level)))
    return out
