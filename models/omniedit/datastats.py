"""How good the curated training data is: the judge against the specialists' true failure labels.

``auc`` is the probability that a random good pair outscores a random failed one (ties count
half; the Mann-Whitney statistic). ``curation_stats`` gives, per curation, the expected share of
failed pairs in a training batch and the effective number of distinct pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.omniedit.curation import effective_sample_size, sampling_probabilities
from edgekit.models.omniedit.judge import JudgeScores
from edgekit.models.omniedit.specialists import FAILURES, SpecialistPairs


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` (N,) for the boolean labels ``positive`` (N,)."""
    scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
    if scores.shape != positive.shape or positive.all() or not positive.any():
        raise InputError("auc needs scores and labels of one shape, with both labels present")
    pos, neg = scores[positive], scores[~positive]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def curation_stats(
    pairs: SpecialistPairs,
    scores: JudgeScores,
    curations: tuple[str, ...],
    threshold: float,
    temperature: float,
) -> dict[str, Any]:
    """Judge quality and, per curation, the failed share of a batch and the effective size."""
    failed = pairs.failed
    out: dict[str, Any] = {
        "pairs": len(failed),
        "failed_share": float(failed.mean()),
        "judge_auc": auc(scores.overall, ~failed),
        "mean_score_good": float(scores.overall[~failed].mean()),
        "mean_score_failed": float(scores.overall[failed].mean()),
        "failure_kinds": {
            kind: int(sum(f == kind for f in pairs.failure))
            for kind in sorted({k for kinds in FAILURES.values() for k in kinds})
        },
        "curations": {},
    }
    for name in curations:
        if name == "oracle":
            continue
        probs = sampling_probabilities(scores.overall, name, threshold, temperature)
        out["curations"][name] = {
            "failed_share": float(probs[failed].sum()),
            "effective_pairs": effective_sample_size(probs),
        }
    return out
