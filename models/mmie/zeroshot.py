"""The untuned judge: the same inputs read zero-shot with the rubric as rules.

It has no trained weights: text steps are compared by raw MiniLM cosine, images by cosine of
an untrained (randomly initialised, seeded) image encoder's features. Answer and reference
steps are paired one to one by text cosine (Hungarian assignment), then the rubric's defects
are detected with fixed thresholds and their category penalties subtracted from 6:

- missing_step: one per reference step left without an answer step;
- off_topic / text_error: a paired middle step whose text cosine is below ``off_topic`` /
  below ``text``;
- wrong_final: the final reference step's pair is below ``text``;
- missing_images: the reference has images and the answer none;
- image_swap: a pair (above ``off_topic``) whose image cosine is below ``image``;
- reordered: the paired answer positions, in reference order, are not increasing.

``RuleThresholds()`` are a priori values (the "untuned" judge); ``calibrate`` picks them on
labelled training items (a calibrated rule judge, to separate calibration from fine-tuning).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgekit.models.mmie.batch import Batch
from edgekit.models.mmie.parser import format_judgement
from edgekit.models.mmie.rubrics import CATEGORIES, rubric_score


@dataclass(frozen=True)
class RuleThresholds:
    """Cosine cut-offs of the rule judge."""

    text: float = 0.9
    off_topic: float = 0.5
    image: float = 0.9


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)


def detect_defects(
    batch: Batch, ref_image: np.ndarray, ans_image: np.ndarray, t: RuleThresholds
) -> list[list[str]]:
    """The defects the rules find in each item; image embeddings are (B, S, D)."""
    text = _unit(batch.answer.text) @ _unit(batch.reference.text).transpose(0, 2, 1)
    image = _unit(ans_image) @ _unit(ref_image).transpose(0, 2, 1)  # (B, Sa, Sr)
    from scipy.optimize import linear_sum_assignment

    found: list[list[str]] = []
    for b in range(len(batch)):
        n_ref = int(batch.reference.mask[b].sum())
        n_ans = int(batch.answer.mask[b].sum())
        sim = text[b, :n_ans, :n_ref]  # (Sa, Sr)
        rows, cols = linear_sum_assignment(sim, maximize=True)  # one answer step per ref step
        pairs = sorted(zip(cols.tolist(), rows.tolist(), strict=True))  # (ref r, answer a)
        defects = ["missing_step"] * (n_ref - len(pairs))
        ref_has, ans_has = batch.reference.has_image[b], batch.answer.has_image[b]
        for r, a in pairs:
            if r == n_ref - 1:
                if sim[a, r] < t.text:
                    defects.append("wrong_final")
            elif sim[a, r] < t.off_topic:
                defects.append("off_topic")
            elif sim[a, r] < t.text:
                defects.append("text_error")
            if ref_has[r] and ans_has[a] and sim[a, r] >= t.off_topic and image[b, a, r] < t.image:
                defects.append("image_swap")
        if ref_has[:n_ref].any() and not ans_has[:n_ans].any():
            defects.append("missing_images")
        order = [a for _, a in pairs]
        if any(x > y for x, y in itertools.pairwise(order)):
            defects.append("reordered")
        found.append(defects)
    return found


def rule_scores(
    batch: Batch, ref_image: np.ndarray, ans_image: np.ndarray, t: RuleThresholds | None = None
) -> np.ndarray:
    """(B,) int64 rubric scores of the detected defects."""
    t = t or RuleThresholds()
    defects = detect_defects(batch, ref_image, ans_image, t)
    return np.array(
        [rubric_score(CATEGORIES[c], d) for c, d in zip(batch.category, defects, strict=True)],
        np.int64,
    )


def rule_texts(
    batch: Batch, ref_image: np.ndarray, ans_image: np.ndarray, t: RuleThresholds | None = None
) -> list[str]:
    """The rule judge's verdicts in the "### Feedback ... ### Score: N" template."""
    t = t or RuleThresholds()
    out = []
    for c, d in zip(batch.category, detect_defects(batch, ref_image, ans_image, t), strict=True):
        note = "Defects found: " + (", ".join(d) if d else "none") + "."
        out.append(format_judgement(note, rubric_score(CATEGORIES[c], d)))
    return out


def calibrate(
    batch: Batch,
    ref_image: np.ndarray,
    ans_image: np.ndarray,
    text_grid: Sequence[float] = (0.85, 0.9, 0.95, 0.97, 0.98, 0.99),
    image_grid: Sequence[float] = (0.7, 0.9, 0.95, 0.97, 0.98, 0.99),
) -> RuleThresholds:
    """The grid thresholds with the most exact agreement with ``batch.label``."""
    best, best_acc = RuleThresholds(), -1.0
    for tt, ti in itertools.product(text_grid, image_grid):
        t = RuleThresholds(text=tt, image=ti)
        acc = float((rule_scores(batch, ref_image, ans_image, t) == batch.label).mean())
        if acc > best_acc:
            best, best_acc = t, acc
    return best
