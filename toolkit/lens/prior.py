"""A calibrated setting prior for Lens: VisiT plus what the calibration scenes say about each
grid setting (not in the paper; an edgekit option, reported beside the paper's Lens).

VisiT ranks one scene's captures by the classifier's own confidence. Some classifiers are
confidently wrong at some settings (the sensor-aware ViT on es-diverse: Lens K=27 below
best-fixed although its oracle is 97 %). Best-fixed already reads the calibration scenes, but
keeps only their argmax; the prior keeps all of it. Per grid setting i,

    prior_i = (right_i + 1) / (n + 2)          (Laplace-smoothed calibration accuracy)
    conf_i  = mean VisiT quality of the setting's calibration captures

and one of two forms ranks a capture of quality q_i (top-1 probability, margin, or
1 - normalised entropy, in [0, 1]):

    "log":    score_i = log q_i + weight * log prior_i
    "offset": score_i = q_i - weight * (conf_i - prior_i)   (the setting's over-confidence
                                                             on the calibration scenes removed)

``weight`` = 0 is the paper's Lens. The form and weight are chosen on the calibration scenes
only, by two-fold cross-fitting over scenes (fit the prior on one half, score Lens K=27 on the
other, both ways); ties go to VisiT alone, then to the "log" form, then to the smaller weight.
Test scenes are never read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import InputError

PRIOR_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)  # "log" form; fixed before any test run
OFFSET_WEIGHTS = (0.5, 1.0, 2.0)  # "offset" form; fixed before its 5-seed runs
FORMS = ("log", "offset")
CANDIDATES = tuple(("log", w) for w in PRIOR_WEIGHTS) + tuple(("offset", w) for w in OFFSET_WEIGHTS)
SCHEMA = "edgekit.lens.controller-prior/1"


def visit_quality(scores: np.ndarray, variant: str = "top1") -> np.ndarray:
    """VisiT ``scores`` (...) of ``variant`` (visit.VARIANTS) as a quality in [0, 1]: top-1 and
    margin as they are, entropy (in [-1, 0]) as 1 + score (the same for their -flip forms)."""
    from edgekit.lens.visit import check_variant

    base, _ = check_variant(variant)
    s = np.asarray(scores, dtype=np.float64)
    return 1.0 + s if base == "entropy" else s


def smoothed_accuracy(correct: np.ndarray) -> np.ndarray:
    """Laplace-smoothed accuracy (N,) per setting of ``correct`` (S, N) bool: (right+1)/(S+2)."""
    c = np.asarray(correct, dtype=np.float64)
    if c.ndim != 2 or c.shape[0] == 0:
        raise InputError(f"calibration correctness must be (scenes, settings), got {c.shape}")
    return (c.sum(axis=0) + 1.0) / (c.shape[0] + 2.0)


def adjusted_scores(
    scores: np.ndarray,
    accuracy: np.ndarray,
    weight: float,
    variant: str = "top1",
    form: str = "log",
    confidence: np.ndarray | None = None,
) -> np.ndarray:
    """Selection scores (..., N) of VisiT ``scores`` (..., N) with each setting's calibration
    ``accuracy`` (N,): "log" form log q + ``weight`` x log accuracy; "offset" form q -
    ``weight`` x (``confidence`` (N,), the mean calibration quality, - accuracy). ``weight`` 0
    ranks as VisiT alone."""
    q = visit_quality(scores, variant)
    acc = np.asarray(accuracy, np.float64)
    if form == "log":
        return np.log(np.clip(q, 1e-12, None)) + weight * np.log(np.clip(acc, 1e-12, None))
    if form != "offset":
        raise InputError(f"unknown Lens prior form '{form}'; expected one of {', '.join(FORMS)}")
    if confidence is None:
        raise InputError("the 'offset' Lens prior needs each setting's calibration confidence")
    return q - weight * (np.asarray(confidence, np.float64) - acc)


def mean_quality(scores: np.ndarray, variant: str = "top1") -> np.ndarray:
    """Mean VisiT quality (N,) per setting of calibration ``scores`` (..., N)."""
    q = visit_quality(scores, variant)
    return q.reshape(-1, q.shape[-1]).mean(axis=0)


def _k27_accuracy(scores: np.ndarray, correct: np.ndarray) -> float:
    """Accuracy of picking each row's best score: ``scores``/``correct`` (S, N)."""
    picks = np.argmax(scores, axis=1)
    return float(correct[np.arange(len(picks)), picks].mean())


def prior_candidate_key(form: str, weight: float) -> str:
    """Calibration key of one cross-fitted prior candidate: "lens K=27 prior log 0.5
    (cross-fitted)"."""
    return f"lens K=27 prior {form} {weight:g} (cross-fitted)"


def best_candidate(results: dict[tuple[str, float], float]) -> tuple[str, float]:
    """The (form, weight) of ``results`` with the highest accuracy; ties go to weight 0 (VisiT
    alone), then to the earlier candidate in CANDIDATES order ("log" before "offset", smaller
    weights first)."""
    best = max(results.values())
    tied = [c for c, a in results.items() if a >= best - 1e-9]
    return min(tied, key=lambda c: (c[1] != 0.0, _candidate_order(c)))


def choose_weight(
    scores: np.ndarray,
    correct: np.ndarray,
    variant: str = "top1",
    candidates: tuple[tuple[str, float], ...] = CANDIDATES,
) -> tuple[tuple[str, float], dict[tuple[str, float], float]]:
    """The prior (form, weight) with the best cross-fitted Lens K=27 accuracy on calibration
    captures.

    ``scores``/``correct`` (E, S, N): VisiT and correctness per environment, calibration scene
    and setting. Scenes split into even/odd halves (every environment of a scene on one side);
    the prior of one half scores the other, both ways. Returns ((form, weight), {(form,
    weight): accuracy}); ties as ``best_candidate``."""
    scores, correct = np.asarray(scores), np.asarray(correct, bool)
    if scores.shape != correct.shape or scores.ndim != 3:
        raise InputError(
            f"scores {scores.shape} and correctness {correct.shape} must both be (E, S, N)"
        )
    if scores.shape[1] < 2:
        raise InputError("choosing the prior weight needs at least 2 calibration scenes")
    n = scores.shape[2]
    halves = [np.arange(scores.shape[1]) % 2 == h for h in (0, 1)]
    results = {}
    for form, w in candidates:
        hits, total = 0.0, 0
        for fit, held in (halves, halves[::-1]):
            acc = smoothed_accuracy(correct[:, fit].reshape(-1, n))
            conf = mean_quality(scores[:, fit], variant)
            held_scores = adjusted_scores(
                scores[:, held].reshape(-1, n), acc, w, variant, form, conf
            )
            rows = held_scores.shape[0]
            hits += _k27_accuracy(held_scores, correct[:, held].reshape(-1, n)) * rows
            total += rows
        results[(form, float(w))] = hits / total
    return best_candidate(results), results


@dataclass
class SettingPrior:
    """A calibrated prior over a Lens grid. ``accuracy`` (N,) smoothed calibration accuracy per
    setting, ``weight`` and ``form`` ("log" or "offset", see the module) how it is combined with
    VisiT, ``confidence`` (N,) the mean calibration VisiT quality per setting ("offset" form),
    ``settings`` the grid it belongs to (``CaptureSettings.describe()`` strings), ``variant``
    the VisiT variant it was chosen with, ``scenes`` how many calibration captures per setting
    it was fitted on, ``cross_fit`` the cross-fitted Lens K=27 accuracy of every candidate
    (form, weight) it was chosen from."""

    accuracy: np.ndarray
    weight: float
    settings: list[str]
    variant: str = "top1"
    scenes: int = 0
    model: str | None = None
    cross_fit: dict[tuple[str, float], float] = field(default_factory=dict)
    form: str = "log"
    confidence: np.ndarray | None = None

    @classmethod
    def fit(
        cls,
        scores: np.ndarray,
        correct: np.ndarray,
        settings: list[str],
        variant: str = "top1",
        model: str | None = None,
    ) -> SettingPrior:
        """Fit on calibration captures ``scores``/``correct`` (E, S, N): the form and weight by
        ``choose_weight``, the accuracy and confidence on all of them."""
        (form, weight), cross_fit = choose_weight(scores, correct, variant)
        flat = np.asarray(correct, bool).reshape(-1, np.shape(correct)[-1])
        if len(settings) != flat.shape[1]:
            raise InputError(f"{len(settings)} settings for {flat.shape[1]} grid columns")
        acc = smoothed_accuracy(flat)
        conf = mean_quality(scores, variant)
        return cls(
            acc, weight, list(settings), variant, flat.shape[0], model, cross_fit, form, conf
        )

    def check_grid(self, settings: list[str]) -> None:
        """Refuse a grid other than the one the prior was fitted on (InputError naming both)."""
        if list(settings) != list(self.settings):
            raise InputError(
                f"the Lens prior was calibrated on a {len(self.settings)}-setting grid "
                f"({', '.join(self.settings[:3])}, ...) but the controller's grid has "
                f"{len(settings)} ({', '.join(list(settings)[:3])}, ...); calibrate a prior "
                "for this camera's grid"
            )

    def adjust(
        self, scores: np.ndarray, indices: list[int] | np.ndarray | None = None
    ) -> np.ndarray:
        """Selection scores of VisiT ``scores`` (K,) of grid settings ``indices`` (default all)."""
        pick = slice(None) if indices is None else np.asarray(indices, int)
        conf = None if self.confidence is None else self.confidence[pick]
        return adjusted_scores(
            scores, self.accuracy[pick], self.weight, self.variant, self.form, conf
        )

    def describe(self) -> str:
        """How the prior ranks, for reports: "VisiT alone", "log, weight 2", "offset, weight 1"."""
        return "VisiT alone" if self.weight == 0 else f"{self.form}, weight {self.weight:g}"

    def to_json(self) -> dict[str, Any]:
        conf = None if self.confidence is None else [round(float(c), 6) for c in self.confidence]
        return {
            "schema": SCHEMA,
            "model": self.model,
            "variant": self.variant,
            "form": self.form,
            "weight": self.weight,
            "scenes": self.scenes,
            "settings": self.settings,
            "accuracy": [round(float(a), 6) for a in self.accuracy],
            "confidence": conf,
            "cross_fit": [[f, w, round(a, 6)] for (f, w), a in self.cross_fit.items()],
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the prior as JSON (atomically)."""
        from edgekit.cache import atomic_write_text

        return atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SettingPrior:
        """Read a prior written by ``save`` (``edgekit eval lens`` writes one per classifier);
        a missing file, another schema or inconsistent fields are InputErrors."""
        p = Path(path)
        if not p.is_file():
            raise InputError(f"Lens prior file not found: {p}")
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"Lens prior {p} is not valid JSON: {exc}") from exc
        return cls.load_json(raw, str(p))

    @classmethod
    def load_json(cls, raw: Any, source: str = "Lens prior") -> SettingPrior:
        """A prior from its ``to_json`` form, validated (InputError naming ``source``). A file
        without a "form" field is read as the "log" form, and its [weight, accuracy] cross-fit
        pairs as log-form candidates."""
        if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
            raise InputError(f"{source} is not a Lens prior (expected schema '{SCHEMA}')")
        acc = np.asarray(raw.get("accuracy", []), dtype=np.float64)
        settings = raw.get("settings", [])
        if acc.ndim != 1 or len(acc) != len(settings) or not len(acc):
            raise InputError(f"{source}: 'accuracy' and 'settings' must be equal-length lists")
        if np.any(acc <= 0) or np.any(acc > 1):
            raise InputError(f"{source}: accuracies must lie in (0, 1]")
        weight = float(raw.get("weight", -1))
        if weight < 0:
            raise InputError(f"{source}: 'weight' must be >= 0, got {raw.get('weight')}")
        form = raw.get("form", "log")
        if form not in FORMS:
            raise InputError(f"{source}: unknown 'form' {form!r}; expected one of {FORMS}")
        conf = raw.get("confidence")
        if conf is not None:
            conf = np.asarray(conf, dtype=np.float64)
            if conf.shape != acc.shape:
                raise InputError(f"{source}: 'confidence' must have one entry per setting")
        elif form == "offset":
            raise InputError(f"{source}: an 'offset' prior needs its 'confidence' list")
        variant = raw.get("variant", "top1")
        visit_quality(np.zeros(1), variant)  # an unknown variant: InputError
        try:
            cross_fit = {}
            for entry in raw.get("cross_fit", []):
                if len(entry) == 2:  # [weight, accuracy] with no form: a log-form candidate
                    entry = ["log", *entry]
                name, w, accuracy = entry
                cross_fit[(str(name), float(w))] = float(accuracy)
        except (TypeError, ValueError, IndexError) as exc:
            raise InputError(
                f"{source}: 'cross_fit' must be [[form, weight, accuracy], ...]"
            ) from exc
        scenes = int(raw.get("scenes", 0))
        return cls(
            acc, weight, list(settings), variant, scenes, raw.get("model"), cross_fit, form, conf
        )


def pool_priors(runs: list[dict[str, Any]], model: str | None = None) -> SettingPrior:
    """One prior from several runs' prior JSONs (one per simulator seed, each with its
    "cross_fit" [[form, weight, accuracy], ...] from ``choose_weight``): the settings' counts
    summed, the confidences scene-weighted, the (form, weight) with the best scene-weighted mean
    cross-fitted accuracy (ties as ``best_candidate``). Runs must share the grid and the VisiT
    variant."""
    if not runs:
        raise InputError("pooling a Lens prior needs at least one run")
    priors = [SettingPrior.load_json(r, "a run's Lens prior") for r in runs]
    for p in priors[1:]:
        if p.settings != priors[0].settings or p.variant != priors[0].variant:
            raise InputError("Lens priors of different grids or VisiT variants cannot be pooled")
    n = sum(p.scenes for p in priors)
    right = sum(np.round(p.accuracy * (p.scenes + 2) - 1) for p in priors)  # (N,) exact counts
    tables = [p.cross_fit for p in priors]
    candidates = set.intersection(*(set(t) for t in tables))
    if not candidates:
        raise InputError("the runs' Lens priors share no cross-fitted weight")
    score = {
        c: sum(t[c] * p.scenes for t, p in zip(tables, priors, strict=True)) for c in candidates
    }
    cross_fit = {c: score[c] / n for c in sorted(candidates, key=_candidate_order)}
    form, weight = best_candidate(cross_fit)
    acc = (right + 1.0) / (n + 2.0)
    conf = None
    if all(p.confidence is not None for p in priors):
        conf = sum(p.confidence * p.scenes for p in priors) / n  # type: ignore[operator]
    elif form == "offset":
        raise InputError("pooling an 'offset' Lens prior needs every run's confidence")
    return SettingPrior(
        acc, weight, priors[0].settings, priors[0].variant, n, model, cross_fit, form, conf
    )


def _candidate_order(c: tuple[str, float]) -> int:
    return CANDIDATES.index(c) if c in CANDIDATES else len(CANDIDATES)
