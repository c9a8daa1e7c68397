"""J, F, J&F and the click protocol of edgekit.segmentation.metrics, on hand-checked small masks."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.segmentation import metrics as sm


def _square(size: int, y0: int, x0: int, side: int) -> np.ndarray:
    mask = np.zeros((size, size), bool)
    mask[y0 : y0 + side, x0 : x0 + side] = True
    return mask


def test_tolerance_is_ceil_of_0008_diagonal() -> None:
    assert sm.boundary_tolerance((256, 256)) == 3  # 0.008 * 362.04 = 2.90
    assert sm.boundary_tolerance((480, 854)) == 8  # DAVIS 480p: 0.008 * 979.7 = 7.84
    assert sm.boundary_tolerance((10, 10)) == 1


def test_identical_masks_score_one() -> None:
    truth = _square(64, 10, 12, 20)
    assert sm.region_similarity(truth, truth) == 1.0
    assert sm.contour_accuracy(truth, truth) == 1.0


def test_hand_computed_iou() -> None:
    a = _square(10, 0, 0, 4)  # 16 px
    b = _square(10, 2, 2, 4)  # 16 px, overlap 2x2 = 4
    assert sm.region_similarity(a, b) == pytest.approx(4 / 28)


def test_boundary_map_of_a_square() -> None:
    edges = sm.boundary_map(_square(6, 1, 1, 3))
    # changes to the right / below / diagonal: the top-left outside ring plus the inner right
    # and bottom sides, as the DAVIS seg2bmap marks them.
    expected = np.array(
        [
            [1, 1, 1, 1, 0, 0],
            [1, 0, 0, 1, 0, 0],
            [1, 0, 0, 1, 0, 0],
            [1, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0],
        ],
        bool,
    )
    np.testing.assert_array_equal(edges, expected)


def test_hand_computed_f_with_zero_tolerance() -> None:
    truth = _square(8, 1, 1, 3)  # boundary: 12 px ring (see above)
    pred = _square(8, 1, 1, 4)  # boundary: 16 px ring shifted outward by one on right/bottom
    pe, te = sm.boundary_map(pred), sm.boundary_map(truth)
    precision = (pe & te).sum() / pe.sum()
    recall = (pe & te).sum() / te.sum()
    assert (pe & te).sum() == 7  # top row 4 px and left column 3 more coincide
    expected = 2 * precision * recall / (precision + recall)
    assert sm.contour_accuracy(pred, truth, tolerance=0) == pytest.approx(expected)
    assert expected < 1.0


def test_empty_conventions() -> None:
    empty = np.zeros((32, 32), bool)
    obj = _square(32, 4, 4, 10)
    assert sm.region_similarity(empty, empty) == 1.0
    assert sm.contour_accuracy(empty, empty) == 1.0
    assert sm.region_similarity(empty, obj) == 0.0
    assert sm.contour_accuracy(empty, obj) == 0.0
    assert sm.region_similarity(obj, empty) == 0.0
    assert sm.contour_accuracy(obj, empty) == 0.0


def test_one_pixel_shift_lowers_j_but_f_stays_one() -> None:
    truth = _square(256, 100, 100, 40)
    shifted = np.roll(truth, 1, axis=1)
    assert sm.region_similarity(shifted, truth) < 1.0
    assert sm.region_similarity(shifted, truth) == pytest.approx(40 * 39 / (40 * 41))
    assert sm.contour_accuracy(shifted, truth) == 1.0
    far = np.roll(truth, 8, axis=1)  # beyond the 3 px tolerance: the shifted sides miss
    assert sm.contour_accuracy(far, truth) < 1.0


def test_score_video_and_summary_in_percent() -> None:
    truth = np.zeros((4, 2, 32, 32), bool)
    truth[:, 0, 5:15, 5:15] = True
    truth[:, 1, 20:30, 20:30] = True
    pred = truth.copy()
    pred[:, 1] = False  # object 2 missed everywhere
    scores = sm.score_video(pred, truth)
    assert scores.j.shape == (2, 4)
    summary = sm.summarize([scores])
    assert summary["J"] == pytest.approx(50.0)
    assert summary["F"] == pytest.approx(50.0)
    assert summary["J&F"] == pytest.approx(50.0)
    # objects at 100 and 0: sample std 70.7, over sqrt(2) objects
    assert summary["J&F_se"] == pytest.approx(50.0)
    assert "J&F_se" not in sm.summarize([sm.score_video(pred[:, :1], truth[:, :1])])
    dropped = sm.score_video(pred, truth, drop_first_last=True)
    assert dropped.j.shape == (2, 2)


def test_drop_first_last_ignores_end_frames() -> None:
    truth = np.zeros((3, 1, 16, 16), bool)
    truth[:, 0, 4:8, 4:8] = True
    pred = np.zeros_like(truth)
    pred[1] = truth[1]  # only the middle frame is right
    assert sm.summarize([sm.score_video(pred, truth, drop_first_last=True)])["J&F"] == 100.0
    assert sm.summarize([sm.score_video(pred, truth)])["J"] == pytest.approx(100 / 3)


def test_shape_mismatch_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="differs"):
        sm.region_similarity(np.zeros((4, 4)), np.zeros((4, 5)))


def test_first_click_is_the_deepest_interior_point() -> None:
    truth = np.zeros((20, 30), bool)
    truth[2:9, 3:10] = True  # 7x7 square: centre (x=6, y=5)
    truth[10:19, 15:28] = True  # 9x13 rectangle: deeper, centre row 14
    x, y, positive = sm.first_click(truth)
    assert positive and y == 14 and 19 <= x <= 23
    with pytest.raises(InputError):
        sm.first_click(np.zeros((5, 5), bool))


def test_next_click_targets_largest_error_region_with_sign() -> None:
    truth = _square(40, 5, 5, 20)
    pred = truth.copy()
    pred[5:25, 5:10] = False  # a 20x5 missed strip (100 px)
    pred[30:35, 30:35] = True  # a 5x5 false blob (25 px)
    x, y, positive = sm.next_click(pred, truth)
    assert positive and 5 <= x < 10 and 5 <= y < 25
    pred[5:25, 5:10] = True
    x, y, positive = sm.next_click(pred, truth)
    assert not positive and (x, y) == (32, 32)
    assert sm.next_click(truth, truth) is None


def test_interactive_iou_runs_the_click_loop() -> None:
    truth = _square(32, 4, 4, 16)
    seen: list[int] = []

    def predict(clicks):
        seen.append(len(clicks))
        mask = np.zeros_like(truth)
        for x, y, positive in clicks:  # paint an 8x8 block per click
            mask[max(0, y - 4) : y + 4, max(0, x - 4) : x + 4] = positive
        return mask

    ious = sm.interactive_iou(predict, truth, clicks=5)
    assert len(ious) == 5 and seen == [1, 2, 3, 4, 5]
    assert ious[0] == pytest.approx(64 / 256)
    assert ious[-1] > ious[0]
    perfect = sm.interactive_iou(lambda clicks: truth, truth, clicks=5)
    assert perfect == [1.0] * 5


def test_paired_difference_counts_objects_and_its_error_is_the_paired_one() -> None:
    a = np.array([0.2, 0.9, 0.5, 0.7])
    b = a + np.array([0.1, 0.0, 0.3, -0.2])
    row = sm.paired_difference(a, b)
    assert row["A"] == pytest.approx(57.5) and row["B"] == pytest.approx(62.5)
    assert row["delta"] == pytest.approx(5.0)
    assert row["delta_se"] == pytest.approx(100 * np.std([0.1, 0.0, 0.3, -0.2], ddof=1) / 2)
    assert (row["better"], row["worse"], row["tied"], row["objects"]) == (2, 1, 1, 4)
    # B = A + a constant: the unpaired spread is large, the paired error is zero
    assert sm.paired_difference(a, a + 0.05)["delta_se"] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(InputError, match="equal-length"):
        sm.paired_difference(a, b[:3])
