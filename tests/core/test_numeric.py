"""Seed summaries: hand-computed means, standard errors and paired differences."""

from __future__ import annotations

import math

import pytest

from edgekit.numeric import mean_se, seed_summary


def test_mean_se_hand_computed() -> None:
    mean, se = mean_se([1.0, 2.0, 3.0, 4.0])
    assert mean == pytest.approx(2.5)
    assert se == pytest.approx(math.sqrt(5 / 3) / 2)  # sample SD sqrt(5/3), n = 4


def test_one_seed_has_no_spread() -> None:
    mean, se = mean_se([0.7])
    assert mean == 0.7 and math.isnan(se)
    assert all(math.isnan(v) for v in mean_se([]))


def test_paired_difference_shown_only_beyond_two_se() -> None:
    base = [0.50, 0.60, 0.55, 0.52, 0.58]
    clear = seed_summary([b + 0.05 + 0.001 * i for i, b in enumerate(base)], against=base)
    assert clear["diff"] == pytest.approx(0.052) and clear["wins"] == 5 and clear["shown"]
    noisy = seed_summary([0.56, 0.55, 0.60, 0.49, 0.59], against=base)  # diffs +-, mean ~ 0
    assert noisy["wins"] == 3 and not noisy["shown"]
    with pytest.raises(ValueError, match="5 values against 4"):
        seed_summary(base, against=base[:4])
