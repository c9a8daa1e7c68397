"""MMIE-Score aggregation: mean score per category and overall, on the 0-6 scale and in percent.

The overall score is the mean over all scored answers (every answer weighs the same); the
macro score, the mean of the category means, is reported beside it. Answers whose judgement
could not be parsed (score None) are counted and either skipped or scored SCORE_MIN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edgekit.errors import InputError
from edgekit.models.mmie.rubrics import CATEGORIES, SCORE_MAX, SCORE_MIN, check_category


def _summary(values: list[float], unparsed: int) -> dict[str, Any]:
    mean = sum(values) / len(values) if values else float("nan")
    return {
        "mean": mean,
        "percent": 100.0 * mean / SCORE_MAX,
        "count": len(values),
        "unparsed": unparsed,
    }


def aggregate(
    categories: Sequence[str], scores: Sequence[float | None], unparsed: str = "skip"
) -> dict[str, Any]:
    """Per-category and overall MMIE-Score.

    ``categories[i]`` names the category of answer i and ``scores[i]`` its parsed score (None
    when unreadable). ``unparsed``: "skip" leaves unreadable answers out of the means, "zero"
    scores them SCORE_MIN. Returns {"per_category": {category: {mean, percent, count,
    unparsed}}, "overall": {...}, "macro": {"mean", "percent"}}; categories with no answers are
    left out."""
    if unparsed not in ("skip", "zero"):
        raise InputError(f"unparsed must be 'skip' or 'zero', got {unparsed!r}")
    if len(categories) != len(scores):
        raise InputError(
            f"aggregate needs one category per score: got {len(categories)} categories "
            f"and {len(scores)} scores"
        )
    values: dict[str, list[float]] = {}
    misses: dict[str, int] = {}
    for category, score in zip(categories, scores, strict=True):
        check_category(category)
        values.setdefault(category, [])
        misses.setdefault(category, 0)
        if score is None:
            misses[category] += 1
            if unparsed == "zero":
                values[category].append(float(SCORE_MIN))
            continue
        if not SCORE_MIN <= score <= SCORE_MAX:
            raise InputError(f"score {score} is outside the scale {SCORE_MIN}..{SCORE_MAX}")
        values[category].append(float(score))
    per_category = {c: _summary(values[c], misses[c]) for c in CATEGORIES if c in values}
    every = [v for c in per_category for v in values[c]]
    means = [s["mean"] for s in per_category.values() if s["count"]]
    macro = sum(means) / len(means) if means else float("nan")
    return {
        "per_category": per_category,
        "overall": _summary(every, sum(misses.values())),
        "macro": {"mean": macro, "percent": 100.0 * macro / SCORE_MAX},
    }
