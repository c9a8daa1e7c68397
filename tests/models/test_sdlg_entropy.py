"""SDLG's entropy maths (semantic entropy of weighted and sampled answers, AUROC) and the
greedy clustering of answers, against hand-computed values and scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.models.sdlg.entropy import (
    auroc,
    predictive_entropy,
    roc_curve,
    sampling_semantic_entropy,
    sdlg_semantic_entropy,
)
from edgekit.models.sdlg.semantic import greedy_clusters


def test_sdlg_entropy_of_known_clusters() -> None:
    p, w = [0.5, 0.1, 0.025 / 0.25], [1.0, 0.5, 0.25]
    # weighted q = p * w / sum(w) = [0.5, 0.05, 0.025] / 1.75; clusters {0, 1}, {2}
    s0, s1 = math.log(0.55 / 1.75), math.log(0.025 / 1.75)
    pi0, pi1 = 0.55 / 0.575, 0.025 / 0.575
    got = sdlg_semantic_entropy(np.log(p), w, [0, 0, 1])
    assert got == pytest.approx(-(pi0 * s0 + pi1 * s1), rel=1e-12)
    # one cluster: -log of the total weighted mass
    assert sdlg_semantic_entropy(np.log(p), w, [0, 0, 0]) == pytest.approx(-math.log(0.575 / 1.75))
    # splitting a cluster raises the entropy when mass is spread
    assert got > sdlg_semantic_entropy(np.log(p), w, [0, 0, 0])
    with pytest.raises(ValueError):
        sdlg_semantic_entropy([0.0, 0.0], [1.0, 0.0], [0, 1])


def test_sampling_entropy_counts_a_repeated_sample_once_in_the_mass() -> None:
    lp = np.log([0.5, 0.5, 0.2])
    keys = ["a", "a", "b"]
    assert sampling_semantic_entropy(lp, [0, 0, 0], keys) == pytest.approx(-math.log(0.7))
    expected = -(2 * math.log(0.5) + math.log(0.2)) / 3
    assert sampling_semantic_entropy(lp, [0, 0, 1], keys) == pytest.approx(expected)
    assert predictive_entropy(lp) == pytest.approx(expected)


def test_auroc_and_roc_curve_match_sklearn() -> None:
    from sklearn.metrics import roc_auc_score
    from sklearn.metrics import roc_curve as sk_roc

    rng = np.random.default_rng(0)
    for _ in range(5):
        labels = rng.integers(0, 2, 60)
        scores = np.round(rng.normal(size=60) + labels, 1)  # rounding makes ties
        assert auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
        fpr, tpr = roc_curve(scores, labels)
        sk_fpr, sk_tpr, _ = sk_roc(labels, scores, drop_intermediate=False)
        np.testing.assert_allclose(fpr, sk_fpr)
        np.testing.assert_allclose(tpr, sk_tpr)
    with pytest.raises(ValueError):
        auroc([0.1, 0.2], [1, 1])


def test_greedy_clusters_compare_with_each_clusters_first_member() -> None:
    items = ["paris", "in paris", "london", "paris!", "rome", "london?"]
    same = lambda i, j: items[i].strip("in !?") == items[j].strip("in !?")  # noqa: E731
    assert greedy_clusters(len(items), same) == [0, 0, 1, 0, 2, 1]
    assert greedy_clusters(0, same) == []
