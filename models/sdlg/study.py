"""The SDLG study: per-question SDLG, sampling semantic entropy and predictive entropy on the
synthetic QA corpus, their AUROC for predicting incorrect answers, and their LM cost.

``calibrate_threshold`` fixes the MiniLM cosine threshold from answer-form pairs of the corpus
templates (same value in two wordings = equivalent; different values = not) for the people and
attributes of the tuning facts only (``corpus.split_facts``), independent of the LM's answers.
``run_study`` scores a list of facts through any ``CausalLM`` (torch or a runtime session) and
returns per-question records and the summary metrics: AUROC of each
method (at its chosen length handling, and both handlings as an ablation), LM rows per
question, and per popularity tier the accuracy, the mean scores and where SDLG substituted
(a value word, a word copied from the question such as the name, a template word such as
"in" / "a", or a truncation by EOS).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.sdlg.corpus import (
    ATTRIBUTES,
    TEMPLATE_WORDS,
    TIERS,
    Fact,
    is_correct,
)
from edgekit.models.sdlg.entropy import auroc
from edgekit.models.sdlg.sdlg import LENGTHS, SDLG, SDLGConfig
from edgekit.models.sdlg.semantic import CosineEquivalence, EquivalenceModel, text_ids
from edgekit.models.sdlg.vocab import WORDPIECE, AnswerVocabulary
from edgekit.models.tinylm.causal import CausalLM
from edgekit.models.tinylm.tokens import encode
from edgekit.numeric import bootstrap_interval

METHODS = {
    "sdlg": "SDLG semantic entropy",
    "sampling_se": "sampling semantic entropy (10 samples)",
    "predictive_entropy": "predictive entropy (10 samples)",
}
# every method from sequence ("sum") and per-token ("mean") log-probabilities: an ablation
VARIANTS = {
    f"{m}_{length}": f"{title}, {length} of token log-probs"
    for m, title in METHODS.items()
    for length in LENGTHS
}
SUBSTITUTION_KINDS = ("value", "question", "template", "truncation")


def substitution_kind(
    answer: list[int],
    position: int,
    token: int,
    question: str,
    vocab: AnswerVocabulary = WORDPIECE,
) -> str:
    """Which word of the answer (ids of ``vocab``) a substitution replaced
    (``SUBSTITUTION_KINDS``)."""
    if token in vocab.stop_ids:
        return "truncation"
    word = vocab.word(answer, position)
    if word in TEMPLATE_WORDS:
        return "template"
    return "question" if word in set(question.lower().replace("?", " ").split()) else "value"


def calibration_pairs(facts: Sequence[Fact], seed: int = 7) -> tuple[list, list[int]]:
    """((question ids, answer ids a, answer ids b) triples, labels 1 = same meaning) built from
    the corpus templates for the (person, attribute) of each of ``facts`` (the tuning facts:
    never an evaluated one) with random values (no LM output involved): per fact, every pair
    of answer forms of one value (equivalent) and of two values (not)."""
    rng = random.Random(seed)
    triples, labels = [], []
    for fact in facts:
        spec = ATTRIBUTES[fact.attribute]
        v1, v2 = rng.sample(spec["values"], 2)
        f1, f2 = Fact(fact.name, fact.attribute, v1, "-"), Fact(fact.name, fact.attribute, v2, "-")
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


def calibrate_threshold(semantic: CosineEquivalence, facts: Sequence[Fact]) -> dict[str, float]:
    """The cosine threshold with the best balanced accuracy on ``calibration_pairs(facts)``
    (``facts``: the tuning facts)."""
    if not facts:
        raise InputError("the threshold is calibrated on tuning facts: got none")
    triples, labels = calibration_pairs(facts)
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
        "facts": len(facts),
    }


def run_study(
    lm: CausalLM,
    semantic: EquivalenceModel,
    facts: Sequence[Fact],
    config: SDLGConfig | None = None,
    progress: Callable[[str], None] | None = None,
    baseline_lengths: Mapping[str, str] | None = None,
    paraphrase: int = 0,
    vocab: AnswerVocabulary | None = None,
) -> dict[str, Any]:
    """Score every fact's question (wording ``paraphrase``) by the three methods; records +
    summary. SDLG's score uses ``config.length``; the baselines' ``baseline_lengths``
    (method -> "sum" | "mean", default "sum"); ``vocab`` is the LM's (default: the in-repo
    LM's WordPiece)."""
    vocab = vocab or WORDPIECE
    sdlg = SDLG(lm, semantic, config, vocab)
    lengths = {"sampling_se": "sum", "predictive_entropy": "sum", **(baseline_lengths or {})}
    if any(v not in LENGTHS for v in lengths.values()):
        raise InputError(f"baseline_lengths values must be in {LENGTHS}, got {lengths}")
    lengths["sdlg"] = sdlg.config.length
    records = []
    for i, fact in enumerate(facts):
        question = fact.question(paraphrase)
        result = sdlg.score(question)
        base = sdlg.sampling_baselines(question, seed=i)
        variants = {
            "sdlg_sum": result.extras["entropy_sum"],
            "sdlg_mean": result.extras["entropy_mean"],
            "sampling_se_sum": base["semantic_entropy"],
            "sampling_se_mean": base["semantic_entropy_length_normalised"],
            "predictive_entropy_sum": base["predictive_entropy"],
            "predictive_entropy_mean": base["predictive_entropy_length_normalised"],
        }
        records.append(
            {
                "question": question,
                "tier": fact.tier,
                "reference": fact.value,
                "answer": result.answer,
                "incorrect": int(not is_correct(result.answer, fact, question)),
                **{m: variants[f"{m}_{lengths[m]}"] for m in METHODS},
                **variants,
                "alternatives": result.alternatives,
                "weights": result.weights,
                "substitutions": [
                    substitution_kind(result.answer_ids, t, v, question, vocab)
                    for t, v in result.extras["substitutions"]
                ],
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
    return {
        "records": records,
        "summary": summarise(records),
        "config": asdict(sdlg.config),
        "lengths": lengths,
    }


def auroc_intervals(
    records: Sequence[dict[str, Any]], incorrect: np.ndarray, resamples: int = 2000
) -> dict[str, float]:
    """95 % bootstrap intervals over the evaluated questions: each method's AUROC
    (``{method}_auroc_ci_low`` / ``_high``) and SDLG's AUROC minus each baseline's, paired on
    the same resampled questions (``sdlg_minus_{baseline}_auroc_ci_*``). A resample with only
    right or only wrong answers is dropped."""
    scores = {m: np.array([r[m] for r in records], dtype=np.float64) for m in METHODS}

    def area(method: str, i: np.ndarray) -> float:
        wrong = incorrect[i]
        return auroc(scores[method][i], wrong) if 0 < wrong.sum() < wrong.size else np.nan

    out: dict[str, float] = {}
    n = len(incorrect)
    for method in METHODS:
        low, high = bootstrap_interval(lambda i, m=method: area(m, i), n, resamples)
        out[f"{method}_auroc_ci_low"], out[f"{method}_auroc_ci_high"] = low, high
    for base in (m for m in METHODS if m != "sdlg"):
        low, high = bootstrap_interval(lambda i, b=base: area("sdlg", i) - area(b, i), n, resamples)
        out[f"sdlg_minus_{base}_auroc_ci_low"], out[f"sdlg_minus_{base}_auroc_ci_high"] = low, high
    return out


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """AUROC per method and variant (with bootstrap intervals, ``auroc_intervals``), accuracy,
    mean LM rows per question, and per tier the
    accuracy, mean scores, SDLG alternatives, mean alternative weight and substitution kinds."""
    incorrect = np.array([r["incorrect"] for r in records])
    summary: dict[str, Any] = {"questions": len(records), "accuracy": float(1 - incorrect.mean())}
    both = 0 < incorrect.sum() < incorrect.size
    for method in (*METHODS, *VARIANTS):
        scores = [r[method] for r in records]
        summary[f"{method}_auroc"] = auroc(scores, incorrect) if both else float("nan")
    if both:
        summary.update(auroc_intervals(records, incorrect))
    for key in ("initial_rows", "sdlg_rows", "sampling_rows"):
        summary[f"{key}_mean"] = float(np.mean([r[key] for r in records]))
    summary["sdlg_alternatives_mean"] = float(np.mean([len(r["alternatives"]) for r in records]))
    for tier in TIERS:
        rows = [r for r in records if r["tier"] == tier]
        if not rows:
            continue
        summary[f"accuracy_{tier}"] = float(1 - np.mean([r["incorrect"] for r in rows]))
        kinds = [k for r in rows for k in r["substitutions"]]
        wrong = [r["incorrect"] for r in rows]
        within = 0 < sum(wrong) < len(wrong)  # AUROC inside the tier needs both labels
        summary[f"tier_{tier}"] = {
            "questions": len(rows),
            "incorrect": int(sum(r["incorrect"] for r in rows)),
            **{f"{m}_mean": float(np.mean([r[m] for r in rows])) for m in METHODS},
            **{
                f"{m}_auroc": auroc([r[m] for r in rows], wrong) if within else float("nan")
                for m in METHODS
            },
            "sdlg_alternatives_mean": float(np.mean([len(r["alternatives"]) for r in rows])),
            "sdlg_alternative_weight_mean": float(
                np.mean([w for r in rows for w in r["weights"][1:]] or [np.nan])
            ),
            "substitutions": {k: kinds.count(k) / max(len(kinds), 1) for k in SUBSTITUTION_KINDS},
        }
    return summary
