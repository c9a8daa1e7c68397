"""Decision-level parity for scorers: does an exported artifact make the same calls as torch?

Tensor tolerances say how far numbers moved; a scorer's user cares whether decisions moved.
For a binary score (e.g. P(unsafe) of a moderation model) measured on labelled texts, fp32
reference vs candidate artifact (int8, fp16, another runtime):

- decision-flip rate at the operating threshold: share of inputs whose call changes;
- FNR at a fixed FPR: each side picks the threshold that keeps its false-positive rate at or
  under the target on the negatives, and reports the false-negative rate there; the shift is
  how much the candidate loses (or gains) at the same alarm budget;
- expected calibration error (ECE) of the score against the labels, for both sides.

Plus ``class_flip_rate`` for argmax heads (topic, severity). All numpy, no model knowledge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.errors import InputError


def _as_scores(scores: Any, name: str, n: int | None = None) -> np.ndarray:
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1 or (n is not None and len(arr) != n) or not np.isfinite(arr).all():
        want = f"({n},)" if n is not None else "(N,)"
        raise InputError(f"{name} must be finite scores of shape {want}, got shape {arr.shape}")
    return arr


def _as_labels(labels: Any, n: int) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.shape != (n,) or not np.isin(arr, (0, 1)).all():
        raise InputError(f"labels must be 0/1 of shape ({n},), got shape {arr.shape}")
    return arr.astype(np.int64)


def decision_flip_rate(reference: Any, candidate: Any, threshold: float) -> float:
    """Share of inputs (N,) where ``score >= threshold`` differs between the two sides."""
    ref = _as_scores(reference, "reference")
    cand = _as_scores(candidate, "candidate", len(ref))
    if not len(ref):
        return 0.0
    return float(((ref >= threshold) != (cand >= threshold)).mean())


def class_flip_rate(reference_logits: Any, candidate_logits: Any) -> float:
    """Share of rows (N, C) whose argmax class differs between the two sides."""
    ref, cand = np.asarray(reference_logits), np.asarray(candidate_logits)
    if ref.shape != cand.shape or ref.ndim != 2:
        raise InputError(f"logits must both be (N, C), got {ref.shape} and {cand.shape}")
    if not len(ref):
        return 0.0
    return float((ref.argmax(axis=1) != cand.argmax(axis=1)).mean())


def decided_class_agreement(
    reference_logits: Any, candidate_logits: Any, margin: float
) -> tuple[float, float]:
    """Argmax agreement over the rows (N, C) the reference decides clearly: its top softmax
    probability at least ``margin`` above the runner-up. A near-tie is decided by noise far
    below any precision's own error and flips under any perturbation, so a floor on it measures
    the CPU's rounding, not the artifact. Returns (agreement over those rows, 1.0 when there
    are none; their share of all rows)."""
    ref, cand = np.asarray(reference_logits, np.float64), np.asarray(candidate_logits)
    if ref.shape != cand.shape or ref.ndim != 2 or ref.shape[1] < 2:
        raise InputError(f"logits must both be (N, C >= 2), got {ref.shape} and {cand.shape}")
    if not len(ref):
        return 1.0, 0.0
    prob = np.exp(ref - ref.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    top2 = np.sort(prob, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] >= margin
    same = ref.argmax(axis=1) == cand.argmax(axis=1)
    return (float(same[clear].mean()) if clear.any() else 1.0), float(clear.mean())


def threshold_at_fpr(scores: Any, labels: Any, fpr: float) -> float:
    """The lowest threshold whose false-positive rate (negatives with score >= it) is <= ``fpr``.

    With k = floor(fpr * negatives) allowed false positives the threshold sits just above the
    (k+1)-th highest negative score (tied negatives are all excluded). InputError when there
    is no negative or ``fpr`` is outside [0, 1].
    """
    s = _as_scores(scores, "scores")
    y = _as_labels(labels, len(s))
    if not 0.0 <= fpr <= 1.0:
        raise InputError(f"fpr must lie in [0, 1], got {fpr}")
    negatives = np.sort(s[y == 0])[::-1]
    if not len(negatives):
        raise InputError("FNR at a fixed FPR needs at least one negative example")
    allowed = int(np.floor(fpr * len(negatives) + 1e-9))
    if allowed >= len(negatives):
        return float(-np.inf)
    return float(np.nextafter(negatives[allowed], np.inf))


def fnr_at_fpr(scores: Any, labels: Any, fpr: float) -> tuple[float, float]:
    """(FNR, threshold): false-negative rate at the ``threshold_at_fpr`` operating point.

    FNR is the share of positives scored under the threshold; InputError without positives.
    """
    s = _as_scores(scores, "scores")
    y = _as_labels(labels, len(s))
    if not (y == 1).any():
        raise InputError("FNR at a fixed FPR needs at least one positive example")
    threshold = threshold_at_fpr(s, y, fpr)
    return float((s[y == 1] < threshold).mean()), threshold


def expected_calibration_error(probabilities: Any, labels: Any, bins: int = 10) -> float:
    """ECE of P(positive) (N,) in [0, 1] against 0/1 labels, ``bins`` equal-width bins.

    sum over bins of (bin size / N) * |mean label - mean probability|; a probability of exactly
    1.0 falls in the last bin.
    """
    p = _as_scores(probabilities, "probabilities")
    y = _as_labels(labels, len(p))
    if bins < 1:
        raise InputError(f"bins must be >= 1, got {bins}")
    if ((p < 0) | (p > 1)).any():
        raise InputError("probabilities must lie in [0, 1]")
    if not len(p):
        return 0.0
    index = np.minimum((p * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        members = index == b
        if members.any():
            total += members.mean() * abs(y[members].mean() - p[members].mean())
    return float(total)


def decision_parity(
    reference: Any,
    candidate: Any,
    labels: Any,
    threshold: float,
    fpr: float = 0.05,
    bins: int = 10,
) -> dict[str, float]:
    """Every decision metric of candidate vs reference probabilities (N,) on labelled inputs.

    Keys: ``decision_flip_rate``; ``fnr_at_fpr_reference``/``_candidate`` and
    ``fnr_shift_rate`` (absolute difference); ``ece_reference``/``_candidate`` and
    ``calibration_shift_error`` (absolute difference); ``score_max_abs_error``. Names ending in
    ``_rate``/``_error`` are the ones verify treats as maxima when a card declares floors.
    """
    ref = _as_scores(reference, "reference")
    cand = _as_scores(candidate, "candidate", len(ref))
    y = _as_labels(labels, len(ref))
    fnr_ref, _ = fnr_at_fpr(ref, y, fpr)
    fnr_cand, _ = fnr_at_fpr(cand, y, fpr)
    ece_ref = expected_calibration_error(ref, y, bins)
    ece_cand = expected_calibration_error(cand, y, bins)
    return {
        "decision_flip_rate": decision_flip_rate(ref, cand, threshold),
        "fnr_at_fpr_reference": fnr_ref,
        "fnr_at_fpr_candidate": fnr_cand,
        "fnr_shift_rate": abs(fnr_cand - fnr_ref),
        "ece_reference": ece_ref,
        "ece_candidate": ece_cand,
        "calibration_shift_error": abs(ece_cand - ece_ref),
        "score_max_abs_error": float(np.abs(cand - ref).max()) if len(ref) else 0.0,
    }
