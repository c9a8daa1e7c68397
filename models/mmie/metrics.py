"""Agreement of a judge's scores with held-out labels: exact, within one point, MAE, Pearson,
Spearman, overall and per category. Unparsed judgements (None) count as misses for exact and
within-1 and are left out of MAE and the correlations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mmie.rubrics import CATEGORIES


def _corr(a: np.ndarray, b: np.ndarray, kind: str) -> float:
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")  # undefined for a constant judge or label
    from scipy.stats import pearsonr, spearmanr

    fn = pearsonr if kind == "pearson" else spearmanr
    return float(fn(a, b).statistic)


def agreement_metrics(
    predicted: Sequence[float | None], labels: Sequence[float]
) -> dict[str, float]:
    """{exact, within1, mae, pearson, spearman, parsed, count} of ``predicted`` vs ``labels``."""
    if len(predicted) != len(labels):
        raise InputError(f"{len(predicted)} predictions for {len(labels)} labels")
    if not labels:
        raise InputError("agreement needs at least one label")
    ok = np.array([p is not None for p in predicted])
    pred = np.array([p if p is not None else np.nan for p in predicted], np.float64)
    gold = np.asarray(labels, np.float64)
    diff = np.abs(pred[ok] - gold[ok])
    return {
        "exact": float((diff < 0.5).sum() / len(gold)),
        "within1": float((diff <= 1.0).sum() / len(gold)),
        "mae": float(diff.mean()) if ok.any() else float("nan"),
        "pearson": _corr(pred[ok], gold[ok], "pearson"),
        "spearman": _corr(pred[ok], gold[ok], "spearman"),
        "parsed": float(ok.mean()),
        "count": float(len(gold)),
    }


def agreement_by_category(
    predicted: Sequence[float | None], labels: Sequence[float], categories: Sequence[str]
) -> dict[str, Any]:
    """{"overall": metrics, "per_category": {category: metrics}} (``agreement_metrics``)."""
    if len(categories) != len(labels):
        raise InputError(f"{len(categories)} categories for {len(labels)} labels")
    per = {}
    for c in CATEGORIES:
        idx = [i for i, k in enumerate(categories) if k == c]
        if idx:
            per[c] = agreement_metrics([predicted[i] for i in idx], [labels[i] for i in idx])
    return {"overall": agreement_metrics(predicted, labels), "per_category": per}
