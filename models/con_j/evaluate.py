"""Verdict accuracy of judges (greedy judgments) and of the reward model on preference pairs.

A judge's verdict is parsed from its greedy judgment; a judgment without one counts as wrong.
Besides accuracy: the share of invalid judgments, of verdicts "a" (position bias, 0.5 unbiased),
of rationales stating the fact's true value, of verdicts consistent with the rationale (the
quoted value is the one the rationale states), and accuracy on the pairs whose
worse answer is the long one (against the training set's length bias).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgekit.models.con_j.generate import Decoder
from edgekit.models.con_j.judge_format import (
    judgment_text,
    pair_prompt,
    pair_verdict,
    quoted,
    rationale_value,
)
from edgekit.models.con_j.prefs import PrefPair
from edgekit.numeric import bootstrap_interval

KNOWN_TIERS = ("frequent", "medium")  # facts the base LM saw 16 or 4 times


def judge_records(decode: Decoder, pairs: Sequence[PrefPair]) -> list[dict[str, Any]]:
    """One record per pair: greedy judgment text, verdict, correctness and rationale checks."""
    generated = decode([pair_prompt(p) for p in pairs], None)
    records = []
    for pair, tokens in zip(pairs, generated, strict=True):
        verdict = pair_verdict(tokens, pair)
        value = rationale_value(tokens, pair.fact.attribute)
        records.append(
            {
                "question": pair.question,
                "answer_a": pair.answer_a,
                "answer_b": pair.answer_b,
                "better": pair.better,
                "judgment": judgment_text(tokens),
                "verdict": verdict,
                "correct": verdict == pair.better,
                "rationale_true": value == pair.fact.value,
                "consistent": value is not None and quoted(tokens) == value,
                "tier": pair.fact.tier,
                "worse_is_long": pair.worse_is_long,
            }
        )
    return records


def verdict_records(
    pairs: Sequence[PrefPair], verdicts: Sequence[str | None]
) -> list[dict[str, Any]]:
    """Records of externally decided verdicts (the reward model's), same keys where they apply."""
    return [
        {
            "question": p.question,
            "answer_a": p.answer_a,
            "answer_b": p.answer_b,
            "better": p.better,
            "verdict": v,
            "correct": v == p.better,
            "tier": p.fact.tier,
            "worse_is_long": p.worse_is_long,
        }
        for p, v in zip(pairs, verdicts, strict=True)
    ]


def _mean(values: Sequence[bool]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """accuracy (with its 95 % bootstrap interval over pairs, ``accuracy_ci_low`` / ``_high``;
    chance is 0.5, the pairs are position balanced), accuracy_known (frequent/medium-tier
    facts), accuracy_anti_bias (worse answer long), share_a, and for judges invalid_rate,
    rationale_true_rate, consistent_rate."""
    correct = np.array([bool(r["correct"]) for r in records])
    low, high = bootstrap_interval(lambda i: float(correct[i].mean()), len(correct))
    out = {
        "pairs": float(len(records)),
        "accuracy": _mean([r["correct"] for r in records]),
        "accuracy_ci_low": low,
        "accuracy_ci_high": high,
        "accuracy_known": _mean([r["correct"] for r in records if r["tier"] in KNOWN_TIERS]),
        "accuracy_anti_bias": _mean([r["correct"] for r in records if r["worse_is_long"]]),
        "share_a": _mean([r["verdict"] == "a" for r in records]),
    }
    if records and "judgment" in records[0]:
        out["invalid_rate"] = _mean([r["verdict"] is None for r in records])
        out["rationale_true_rate"] = _mean([r["rationale_true"] for r in records])
        out["consistent_rate"] = _mean([r["consistent"] for r in records])
    return out
