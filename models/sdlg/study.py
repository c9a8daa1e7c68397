"""The SDLG study: per-question SDLG, sampling semantic entropy and predictive entropy on the
synthetic QA corpus, their AUROC for predicting incorrect answers, and their LM cost.

``calibrate_threshold`` fixes the MiniLM cosine threshold from answer-form pairs of the corpus
templates (same value in two wordings = equivalent; different values = not), independent of
the LM's answers. ``run_study`` scores a list of facts through any ``CausalLM`` (torch or a
runtime session) and returns per-question records and the summary metrics.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from edgekit.models.sdlg.causal_lm import CausalLM
from edgekit.models.sdlg.corpus import ATTRIBUTES, NAMES, TIERS, Fact, is_correct
from edgekit.models.sdlg.entropy import auroc
from edgekit.models.sdlg.lm import encode
from edgekit.models.sdlg.sdlg import SDLG, SDLGConfig
from edgekit.models.sdlg.semantic import CosineEquivalence, text_ids

METHODS = {
    "sdlg": "SDLG semantic entropy",
    "sampling_se": "sampling semantic entropy (10 samples)",
    "predictive_entropy": "predictive entropy (10 samples)",
}
# the same scores from per-token (length-normalised) log-probabilities: an ablation
NORMALISED = {f"{m}_ln": f"{title}, length-normalised" for m, title in METHODS.items()}


def calibration_pairs(seed: int = 7, people: int = 20) -> tuple[list, list[int]]:
    """((question ids, answer ids a, answer ids b) triples, labels 1 = same meaning) built from
    the corpus templates with random values (no LM output involved)."""
    rng = random.Random(seed)
    triples, labels = [], []
    for name in rng.sample(NAMES, people):
        for attribute, spec in ATTRIBUTES.items():
            v1, v2 = rng.sample(spec["values"], 2)
            f1, f2 = Fact(name, attribute, v1, "-"), Fact(name, attribute, v2, "-")
            q = encode(f1.question(rng.randrange(2)))
            forms = range(len(spec["answers"]))
            for i in forms:
                for j in forms:
                    if i < j:
                        triples.append((q, encode(f1.answer(i)), encode(f1.answer(j))))
                        labels.append(1)
                    triples.append((q, encode(f1.answer(i)), encode(f2.answer(j))))
                    labels.append(0)
    return triples, labels


def calibrate_threshold(semantic: CosineEquivalence) -> dict[str, float]:
    """The cosine threshold with the best balanced accuracy on ``calibration_pairs``."""
    triples, labels = calibration_pairs()
    y = np.array(labels, dtype=bool)
    cos = np.array([semantic.similarity(text_ids(q, a), text_ids(q, b)) for q, a, b in triples])
    values = np.unique(cos)
    cuts = np.r_[values[0] - 1e-6, (values[1:] + values[:-1]) / 2, values[-1] + 1e-6]
    best = (-1.0, 0.0)
    for cut in cuts:
        pred = cos >= cut
        balanced = 0.5 * (pred[y].mean() + (~pred[~y]).mean())
        best = max(best, (float(balanced), float(cut)))
    return {
        "threshold": best[1],
        "balanced_accuracy": best[0],
        "pairs": int(y.size),
        "equivalent_pairs": int(y.sum()),
        "cosine_auroc": auroc(cos, y.astype(int)),
    }


def run_study(
    lm: CausalLM,
    semantic: CosineEquivalence,
    facts: Sequence[Fact],
    config: SDLGConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score every fact's question (paraphrase 0) by the three methods; records + summary."""
    sdlg = SDLG(lm, semantic, config)
    records = []
    for i, fact in enumerate(facts):
        question = fact.question(0)
        result = sdlg.score(question)
        base = sdlg.sampling_baselines(question, seed=i)
        records.append(
            {
                "question": question,
                "tier": fact.tier,
                "reference": fact.value,
                "answer": result.answer,
                "incorrect": int(not is_correct(result.answer, fact, question)),
                "sdlg": result.entropy,
                "sampling_se": base["semantic_entropy"],
                "predictive_entropy": base["predictive_entropy"],
                "sdlg_ln": result.extras["entropy_length_normalised"],
                "sampling_se_ln": base["semantic_entropy_length_normalised"],
                "predictive_entropy_ln": base["predictive_entropy_length_normalised"],
                "alternatives": result.alternatives,
                "sdlg_clusters": max(result.clusters) + 1,
                "samples": base["samples"],
                "sampling_clusters": max(base["clusters"]) + 1,
                "initial_rows": result.initial_rows,
                "sdlg_rows": result.rows,
                "sampling_rows": base["rows"],
            }
        )
        if progress:
            progress(question)
    return {"records": records, "summary": summarise(records), "config": asdict(sdlg.config)}


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """AUROC per method, accuracy (overall, per tier) and mean LM rows per question."""
    incorrect = np.array([r["incorrect"] for r in records])
    summary: dict[str, Any] = {"questions": len(records), "accuracy": float(1 - incorrect.mean())}
    for method in (*METHODS, *NORMALISED):
        scores = [r[method] for r in records]
        both = 0 < incorrect.sum() < incorrect.size
        summary[f"{method}_auroc"] = auroc(scores, incorrect) if both else float("nan")
    for tier in TIERS:
        rows = [r for r in records if r["tier"] == tier]
        if rows:
            summary[f"accuracy_{tier}"] = float(1 - np.mean([r["incorrect"] for r in rows]))
    for key in ("initial_rows", "sdlg_rows", "sampling_rows"):
        summary[f"{key}_mean"] = float(np.mean([r[key] for r in records]))
    summary["sdlg_alternatives_mean"] = float(np.mean([len(r["alternatives"]) for r in records]))
    return summary
