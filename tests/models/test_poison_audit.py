"""Poisoning-unlearning audit: the score's null, exposure after poisoned training, the methods."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.poison_audit import audit, data, methods
from edgekit.models.poison_audit.experiment import StudyConfig, write_study
from edgekit.models.poison_audit.poison import (
    GaussianPoison,
    finite_difference_gradients,
    gaussian_poison,
    input_gradients,
    score_from_gradients,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_poison_is_seeded_and_only_touches_the_chosen_rows() -> None:
    x = np.zeros((50, 4), dtype=np.float32)
    poisoned, secret = gaussian_poison(x, 10, 0.5, seed=3)
    again, secret2 = gaussian_poison(x, 10, 0.5, seed=3)
    np.testing.assert_array_equal(poisoned, again)
    np.testing.assert_array_equal(secret.indices, secret2.indices)
    untouched = np.setdiff1d(np.arange(50), secret.indices)
    assert np.all(poisoned[untouched] == 0)
    np.testing.assert_array_equal(poisoned[secret.indices], secret.noise)
    with pytest.raises(InputError):
        gaussian_poison(x, 0, 0.5, seed=0)
    with pytest.raises(InputError):
        gaussian_poison(x, 5, -1.0, seed=0)


def test_score_hand_computation_and_null_distribution() -> None:
    noise = np.array([[0.3, 0.4], [0.0, -0.5]])
    secret = GaussianPoison(np.array([0, 1]), noise, eps=0.5)
    # gradient = -noise: z_i = ||xi_i|| / eps = 1.0 each
    hand = score_from_gradients(-noise, secret)
    np.testing.assert_allclose(hand.per_point, [1.0, 1.0])
    assert hand.score == pytest.approx(1.0) and hand.z == pytest.approx(math.sqrt(2))
    # orthogonal gradients carry nothing: z = 0
    assert score_from_gradients(np.array([[0.4, -0.3], [1.0, 0.0]]), secret).score == 0.0
    # gradients independent of the poison: z_i ~ N(0, 1)
    rng = np.random.default_rng(0)
    big = GaussianPoison(np.arange(4000), rng.standard_normal((4000, 64)) * 0.2, eps=0.2)
    null = score_from_gradients(rng.standard_normal((4000, 64)) * 5.0, big)
    assert abs(null.score) < 4 / math.sqrt(4000)
    assert null.per_point.std() == pytest.approx(1.0, abs=0.05)
    assert 0.0001 < null.p_value < 0.9999


def test_finite_differences_match_autograd() -> None:
    model = methods.DigitsMLP(hidden=32, seed=1).eval()
    (x, y), _ = data.digits(0)
    pixels = x[:20] * data.PIXEL_SCALE
    exact = input_gradients(model, pixels, y[:20])

    def logits(batch: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.from_numpy(batch)).double().numpy()

    approx = finite_difference_gradients(logits, pixels, y[:20], h=1e-2)
    cos = (exact * approx).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(approx, axis=1)
    assert np.median(cos) > 0.99999  # exact inside a ReLU region
    assert cos.min() > 0.99  # a kink within h of a point bends its estimate slightly


@pytest.fixture(scope="module")
def small_audit() -> audit.AuditReport:
    """A poisoned MLP (40 epochs), two cheap unlearning methods and retraining (~15 s)."""
    torch.set_num_threads(1)
    train_data, test_data = data.digits(0)
    config = methods.TrainConfig(epochs=40, seed=0)
    return audit.run_audit(
        lambda d: methods.train_new(d, config),
        {
            "gd-2ep": methods.gd(2),
            "last-layer-2ep": methods.last_layer(2),
            "retrain": methods.retrain(config),
        },
        train_data, test_data, poison_count=150, eps=0.3, seed=0,
    )  # fmt: skip


def test_score_is_null_without_poison_and_positive_after_poisoned_training(
    small_audit: audit.AuditReport,
) -> None:
    poisoned = small_audit.poisoned
    retrain = {m.name: m for m in small_audit.methods}["retrain"]  # never saw the poison
    # measured with this seed: poisoned about +0.3 (z about 4), retrained about 0
    assert poisoned.score.score > 0.15 and poisoned.score.z > 3.0 and not poisoned.removed
    assert abs(retrain.score.z) < audit.Z_REMOVED and retrain.removed
    assert retrain.test_accuracy > 0.9 and poisoned.test_accuracy > 0.9


def test_cheap_unlearning_leaves_the_poison(small_audit: audit.AuditReport) -> None:
    by_name = {m.name: m for m in small_audit.methods}
    for name in ("gd-2ep", "last-layer-2ep"):
        assert not by_name[name].removed, by_name[name].to_json()
        assert by_name[name].score.score > 0.5 * small_audit.poisoned.score.score
    assert set(small_audit.models) == {"poisoned", "gd-2ep", "last-layer-2ep", "retrain"}


def test_methods_return_new_models_and_last_layer_moves_only_the_head() -> None:
    (x, y), _ = data.digits(0)
    model = methods.train_new((x[:200], y[:200]), methods.TrainConfig(epochs=1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    retain, forget = (x[200:400], y[200:400]), (x[:20], y[:20])
    for unlearn in (methods.gd(1), methods.noisy_gd(1), methods.gradient_ascent(1)):
        out = unlearn(model, retain, forget)
        assert out is not model
        assert any(not torch.equal(out.state_dict()[k], before[k]) for k in before)
    head = methods.last_layer(1)(model, retain, forget).state_dict()
    for key, value in before.items():
        assert torch.equal(head[key], value) == (not key.startswith("model.net.4")), key
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_card_options_are_checked() -> None:
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="unknown unlearning method"):
        get_card("poison-audit", method="forget-harder")
    with pytest.raises(InputError):
        get_card("poison-audit", learning_rate=1.0)


@pytest.mark.study
def test_study_writes_report_and_plot(tmp_path: Path) -> None:
    report = write_study(tmp_path, False, StudyConfig(seeds=(0,), train_epochs=6, poison_count=50))
    saved = json.loads((tmp_path / "report.json").read_text())
    assert (tmp_path / "audit.png").stat().st_size > 1000
    names = [r["method"] for r in saved["summary"]]
    assert names[0] == "poisoned" and names[-1] == "retrain" and len(names) == 10
    assert report["null_band"] == pytest.approx(audit.Z_REMOVED / math.sqrt(50))


@pytest.mark.study
def test_study_pairs_every_method_with_retraining_per_seed(tmp_path: Path) -> None:
    """Scores over seeds are mean ± SE, and each method's difference from retraining is paired
    on the seed (checked by hand from the per-seed rows)."""
    config = StudyConfig(seeds=(0, 1), train_epochs=4, poison_count=40)
    report = write_study(tmp_path, False, config)
    rows = report["rows"]
    retrain = {r["seed"]: r["score"] for r in rows if r["method"] == "retrain"}
    for summary in report["summary"]:
        mine = [r for r in rows if r["method"] == summary["method"]]
        scores = np.array([r["score"] for r in mine])
        assert summary["score"] == pytest.approx(scores.mean())
        assert summary["score_se"] == pytest.approx(scores.std(ddof=1) / math.sqrt(2))
        if summary["method"] == "retrain":
            assert summary["vs_retrain"] is None
            continue
        diffs = scores - np.array([retrain[r["seed"]] for r in mine])
        assert summary["vs_retrain"]["diff"] == pytest.approx(diffs.mean())
        assert summary["vs_retrain"]["diff_se"] == pytest.approx(diffs.std(ddof=1) / math.sqrt(2))
        assert summary["vs_retrain"]["wins"] == int((diffs > 0).sum())
    saved = json.loads((tmp_path / "report.json").read_text())
    assert (
        saved["summary"][0]["vs_retrain"]["values"] == report["summary"][0]["vs_retrain"]["values"]
    )
