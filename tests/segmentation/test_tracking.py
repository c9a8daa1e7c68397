"""Box tracking metrics (edgekit.segmentation.tracking): known values, and the edge cases a
tracker's output produces (empty masks, boxes that do not touch)."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.segmentation import tracking as T


def test_mask_box_covers_the_pixels_and_is_none_when_empty():
    mask = np.zeros((10, 12), bool)
    assert T.mask_box(mask) is None
    mask[2:5, 3:9] = True
    assert T.mask_box(mask) == (3.0, 2.0, 9.0, 5.0)
    with pytest.raises(InputError, match=r"\(H, W\)"):
        T.mask_box(np.zeros((2, 3, 4), bool))


def test_box_iou_known_values():
    a = (0.0, 0.0, 10.0, 10.0)
    assert T.box_iou(a, a) == 1.0
    assert T.box_iou(a, (5.0, 0.0, 15.0, 10.0)) == pytest.approx(50 / 150)
    assert T.box_iou(a, (10.0, 0.0, 20.0, 10.0)) == 0.0  # touching edges: no overlap
    assert T.box_iou(a, None) == 0.0 and T.box_iou(None, a) == 0.0


def test_success_auc_and_lost_share():
    assert T.success_auc([1.0] * 5) == pytest.approx(20 / 21)  # IoU 1 > every t < 1
    assert T.success_auc([0.0, 0.0]) == 0.0
    # one frame at IoU 0.52: above thresholds 0 .. 0.5 (11 of 21)
    assert T.success_auc([0.52]) == pytest.approx(11 / 21)
    assert T.lost_share([0.0, 0.05, 0.5, 0.9]) == 0.5
    assert np.isnan(T.success_auc([])) and np.isnan(T.lost_share([]))


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_frames():
    rng = np.random.default_rng(3)
    few = [rng.uniform(0, 1, 5).tolist(), rng.uniform(0, 1, 4).tolist()]
    many = [rng.uniform(0, 1, 500).tolist(), rng.uniform(0, 1, 400).tolist()]
    for groups in (few, many):
        low, high = T.bootstrap_ci(groups)
        pooled = np.concatenate(groups)
        assert low < pooled.mean() < high
    assert np.subtract(*T.bootstrap_ci(many)[::-1]) < np.subtract(*T.bootstrap_ci(few)[::-1]) / 3
    assert T.bootstrap_ci([[0.5, 0.5, 0.5]]) == (0.5, 0.5)


def test_check_box_names_what_is_wrong():
    assert T.check_box([1, 2, 3, 4], (10, 10)) == (1.0, 2.0, 3.0, 4.0)
    with pytest.raises(InputError, match="four finite numbers"):
        T.check_box([1, 2, 3])
    with pytest.raises(InputError, match="x0 < x1"):
        T.check_box([5, 0, 5, 4])
    with pytest.raises(InputError, match="outside the 10 x 8 frame"):
        T.check_box([0, 0, 11, 4], (8, 10))
