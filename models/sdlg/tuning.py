"""Choosing SDLG's free knobs on tuning facts, disjoint from the evaluated ones.

``corpus.split_facts`` splits the corpus by fact (seeded, a third of each popularity tier for
tuning): the evaluated questions are the evaluated facts in their first wording
(``fact.question(0)``); tuning asks the tuning facts, never an evaluated fact, in their second
wording (``fact.question(1)``, "which city does anna live in?"). (Until RECIPE_VERSION 2 the
tuning questions were the evaluated facts themselves, reworded.) On the tuning questions
``tune_sdlg``

1. runs the 10-sample sampling baselines once: their mean LM rows are the cost cap, and each
   baseline's length handling (sum or mean of token log-probabilities) is chosen by its
   calibration AUROC, so every method gets the same treatment;
2. runs SDLG once per completion beam width with ``max_alternatives`` (the paper's 10) and
   reads every smaller number of alternatives k off the same run: SDLG adds alternatives in
   rank order and the greedy clusters of the first k + 1 answers are the first k + 1 labels,
   so the first k alternatives, their clusters and ``rows_after[k - 1]`` are exactly what a
   run with ``alternatives=k`` gives;
3. keeps the (beams, k, length) with the highest calibration AUROC whose mean LM rows are
   below the sampling baselines' (ties: fewer rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from edgekit.cache import recipe_key
from edgekit.errors import InputError
from edgekit.models.sdlg.corpus import Fact, is_correct
from edgekit.models.sdlg.entropy import auroc, sdlg_semantic_entropy
from edgekit.models.sdlg.sdlg import LENGTHS, SDLG, SDLGConfig, SDLGResult
from edgekit.models.sdlg.semantic import EquivalenceModel, threshold_key
from edgekit.models.sdlg.vocab import AnswerVocabulary
from edgekit.models.tinylm.causal import CausalLM

CALIBRATION_PARAPHRASE = 1
EVALUATION_PARAPHRASE = 0
RECIPE_VERSION = 2  # 2: tuning facts disjoint from the evaluated ones. Bump when what tuning does changes (split, grid search, SDLG, scoring); edits that do not change the result keep it


def prefix_entropy(result: SDLGResult, k: int, length: str) -> tuple[float, int]:
    """(SDLG entropy, SDLG LM rows) of ``result`` cut to its first ``k`` alternatives.

    ``length`` "sum" scores sequence log-probabilities, "mean" per-token ones."""
    if length not in LENGTHS:
        raise InputError(f"length must be one of {LENGTHS}, got {length!r}")
    n = min(k, len(result.log_probs) - 1)  # alternatives kept
    log_probs = np.asarray(result.log_probs[: n + 1], dtype=np.float64)  # (n + 1,)
    if length == "mean":
        log_probs = log_probs / np.maximum(result.extras["lengths"][: n + 1], 1)
    entropy = sdlg_semantic_entropy(log_probs, result.weights[: n + 1], result.clusters[: n + 1])
    rows = result.extras["rows_after"][n - 1] if n > 0 else 0
    return entropy, int(rows)


def _best(rows: list[dict[str, Any]], cap: float) -> dict[str, Any]:
    """The affordable row (``rows_mean`` < ``cap``) with the highest AUROC, then fewest rows."""
    affordable = [r for r in rows if r["rows_mean"] < cap and np.isfinite(r["auroc"])]
    if not affordable:
        raise InputError(f"no SDLG setting costs under {cap:.1f} LM rows per question")
    return max(affordable, key=lambda r: (r["auroc"], -r["rows_mean"]))


def tune_sdlg(
    lm: CausalLM,
    semantic: EquivalenceModel,
    facts: Sequence[Fact],
    base: SDLGConfig | None = None,
    beams: Sequence[int] = (1, 2, 5),
    max_alternatives: int = 10,
    progress: Callable[[str], None] | None = None,
    vocab: AnswerVocabulary | None = None,
) -> dict[str, Any]:
    """Choose ``completion_beams``, ``alternatives`` and ``length`` on the calibration
    questions of ``facts``, the tuning facts (``corpus.split_facts``; module doc), for an LM
    with vocabulary ``vocab`` (default: the in-repo LM's WordPiece). Returns
    ``config`` (the chosen SDLGConfig as a dict), ``baseline_lengths`` (method -> "sum" |
    "mean"), the AUROC/rows ``table`` of every setting and the sampling baselines'
    calibration numbers."""
    base = base or SDLGConfig()
    if not beams or min(beams) < 1 or max_alternatives < 1:
        raise InputError(
            f"need beam widths >= 1 and max_alternatives >= 1, got {beams}, {max_alternatives}"
        )
    questions = [f.question(CALIBRATION_PARAPHRASE) for f in facts]
    sampler = SDLG(lm, semantic, base, vocab)
    baseline = [sampler.sampling_baselines(q, seed=i) for i, q in enumerate(questions)]
    sampling_rows = float(np.mean([b["rows"] for b in baseline]))
    runs: dict[int, list[SDLGResult]] = {}
    for width in beams:
        sdlg = SDLG(
            lm,
            semantic,
            replace(base, completion_beams=width, alternatives=max_alternatives),
            vocab,
        )
        runs[width] = []
        for q in questions:
            runs[width].append(sdlg.score(q))
            if progress:
                progress(f"calibration, {width} completion beams: {q}")
    # correctness is judged on y0, which the completion width does not change
    incorrect = [
        int(not is_correct(r.answer, f, q))
        for r, f, q in zip(runs[beams[0]], facts, questions, strict=True)
    ]
    if not 0 < sum(incorrect) < len(incorrect):
        raise InputError("calibration questions need both correct and incorrect answers")
    keys = {
        "sum": ("semantic_entropy", "predictive_entropy"),
        "mean": ("semantic_entropy_length_normalised", "predictive_entropy_length_normalised"),
    }
    baseline_auroc = {
        method: {
            length: auroc([b[keys[length][i]] for b in baseline], incorrect) for length in LENGTHS
        }
        for i, method in enumerate(("sampling_se", "predictive_entropy"))
    }
    baseline_lengths = {
        m: max(LENGTHS, key=lambda L, m=m: baseline_auroc[m][L]) for m in baseline_auroc
    }
    table = []
    for width, results in runs.items():
        for k in range(1, max_alternatives + 1):
            for length in LENGTHS:
                scored = [prefix_entropy(r, k, length) for r in results]
                table.append(
                    {
                        "completion_beams": width,
                        "alternatives": k,
                        "length": length,
                        "auroc": auroc([s for s, _ in scored], incorrect),
                        "rows_mean": float(np.mean([rows for _, rows in scored])),
                    }
                )
    best = _best(table, sampling_rows)
    chosen = replace(
        base,
        completion_beams=best["completion_beams"],
        alternatives=best["alternatives"],
        length=best["length"],
    )
    return {
        "split": f"paraphrase {CALIBRATION_PARAPHRASE} of {len(facts)} tuning facts, disjoint "
        f"from the evaluated ones (evaluation: paraphrase {EVALUATION_PARAPHRASE})",
        "questions": len(questions),
        "accuracy": float(1 - np.mean(incorrect)),
        "config": asdict(chosen),
        "chosen": best,
        "sampling_rows_mean": sampling_rows,
        "baseline_auroc": baseline_auroc,
        "baseline_lengths": baseline_lengths,
        "table": table,
    }


def tuning_key(
    lm_key: str,
    base: SDLGConfig,
    beams: Sequence[int],
    max_alternatives: int,
    facts: Sequence[Fact],
) -> str:
    """Cache key (16 hex): ``recipe_key`` over "sdlg-tuning", ``RECIPE_VERSION``, the LM's key,
    the base config, the grid, the tuning facts and the equivalence threshold's key (its
    calibration's version and facts)."""
    config = [
        lm_key,
        asdict(base),
        list(beams),
        max_alternatives,
        [asdict(f) for f in facts],
        threshold_key(facts),
    ]
    return recipe_key("sdlg-tuning", RECIPE_VERSION, config)


def config_from_tuning(tuning: dict[str, Any]) -> SDLGConfig:
    """The SDLGConfig a ``tune_sdlg`` result (possibly read back from JSON) chose."""
    values = dict(tuning["config"])
    values["alphas"] = tuple(values["alphas"])
    return SDLGConfig(**values)
