"""Certified unlearning: the calibration maths, the distance bounds, convergence to retraining."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.models.certified_unlearning import certify, data, logistic
from edgekit.models.certified_unlearning.audit import Interval
from edgekit.models.certified_unlearning.experiment import StudyConfig, write_study


def _renyi_numeric(q: float, a: float, b: float, sigma: float) -> float:
    """D_q(N(a, s^2) || N(b, s^2)) by quadrature of (1/(q-1)) log int p^q r^(1-q)."""
    from scipy.integrate import quad
    from scipy.stats import norm

    def integrand(x: float) -> float:
        return norm.pdf(x, a, sigma) ** q * norm.pdf(x, b, sigma) ** (1 - q)

    value, _ = quad(integrand, min(a, b) - 20 * sigma, max(a, b) + 20 * sigma, limit=200)
    return math.log(value) / (q - 1)


def test_sigma_matches_hand_computation_and_the_renyi_divergence() -> None:
    # Delta = 0.3, q = 4, eps = 0.5: sigma = 0.3 * sqrt(4 / 1) = 0.6
    budget = certify.RenyiBudget(q=4.0, eps=0.5)
    sigma = certify.gaussian_sigma(0.3, budget)
    assert sigma == pytest.approx(0.6)
    # two Gaussians 0.3 apart with that sigma are exactly eps apart in Renyi order 4
    assert _renyi_numeric(4.0, 0.0, 0.3, sigma) == pytest.approx(0.5, rel=1e-5)
    assert _renyi_numeric(4.0, 0.3, 0.0, sigma) == pytest.approx(0.5, rel=1e-5)


def test_noise_grows_as_eps_shrinks_and_vanishes_at_infinity() -> None:
    sigmas = [certify.gaussian_sigma(1.0, certify.RenyiBudget(2.0, e)) for e in (8, 2, 0.5, 0.1)]
    assert all(a < b for a, b in zip(sigmas, sigmas[1:], strict=False))
    assert sigmas[-1] / sigmas[0] == pytest.approx(math.sqrt(80))
    assert certify.gaussian_sigma(1.0, certify.RenyiBudget(2.0, math.inf)) == 0.0
    with pytest.raises(InputError):
        certify.RenyiBudget(q=1.0, eps=1.0)
    with pytest.raises(InputError):
        certify.RenyiBudget(q=2.0, eps=0.0)


def test_steps_needed_hand_computation() -> None:
    # mu / L = 0.1: 0.9^T * 10 <= 0.01 first at T = ceil(log(1000) / -log(0.9)) = 66
    assert certify.steps_needed(10.0, 0.01, 0.1, 1.0) == 66
    assert 0.9**66 * 10 <= 0.01 < 0.9**65 * 10
    assert certify.steps_needed(0.005, 0.01, 0.1, 1.0) == 0
    # ERM bound: 2 G f / (mu n) + tol / mu = 2 * 2 * 5 / (0.1 * 1000) + 1e-6 / 0.1
    assert certify.erm_distance_bound(5, 1000, 2.0, 0.1, 1e-6) == pytest.approx(0.2 + 1e-5)


def test_trimmed_mean_matches_scipy() -> None:
    from scipy.stats import trim_mean

    values = np.random.default_rng(0).standard_normal((50, 7))
    values[:3] += 100.0  # outliers
    ours = logistic.trimmed_mean(values, 5)
    np.testing.assert_allclose(ours, trim_mean(values, 0.1, axis=0), rtol=1e-12)
    assert np.abs(ours).max() < 1.0  # the outliers are gone
    with pytest.raises(InputError):
        logistic.trimmed_mean(values, 25)


def test_gradient_matches_finite_differences() -> None:
    split = data.synthetic_split(60, 10, 3, 0, seed=1)
    xa = logistic.augment(split.x)
    w = np.random.default_rng(2).standard_normal((2, 4))
    grad = logistic.gradient(w, xa, split.y, 0.1)
    h, numeric = 1e-6, np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        e = np.zeros_like(w)
        e[idx] = h
        f_plus = logistic.objective(w + e, xa, split.y, 0.1)
        numeric[idx] = (f_plus - logistic.objective(w - e, xa, split.y, 0.1)) / (2 * h)
    np.testing.assert_allclose(grad, numeric, atol=1e-7)


@pytest.mark.parametrize("ood", [False, True])
def test_distance_bounds_hold(ood: bool) -> None:
    f, n, lam = 10, 400, 0.05
    split = data.synthetic_split(n, 10, 8, f, seed=3, out_of_distribution=ood, ood_norm=20.0)
    xa, keep = logistic.augment(split.x), split.retain
    trained = logistic.fit_erm(xa, split.y, 2, lam, 1e-9)
    retrained = logistic.fit_erm(xa[keep], split.y[keep], 2, lam, 1e-9)
    actual = np.linalg.norm(trained - retrained)
    bound = certify.erm_distance_bound(f, n, logistic.lipschitz(xa), lam, 1e-9)
    assert 0 < actual <= bound
    step = 1.0 / logistic.smoothness(xa[keep], lam)
    robust, _ = logistic.fit_trimmed(xa, split.y, 2, lam, f, step, tol=1e-8)
    spread = certify.retained_spread(xa[keep], 2)
    robust_bound = certify.trimmed_distance_bound(f, n, f, spread, lam, 1e-8)
    assert np.linalg.norm(robust - retrained) <= robust_bound
    if ood:  # far forget points: the trimmed-mean model starts closer to the retrained one
        assert np.linalg.norm(robust - retrained) < actual
        assert robust_bound < bound


def test_noiseless_unlearning_converges_to_retraining() -> None:
    f, n, lam = 20, 500, 0.05
    split = data.synthetic_split(n, 10, 6, f, seed=4, out_of_distribution=True, ood_norm=10.0)
    xa, keep = logistic.augment(split.x), split.retain
    trained = logistic.fit_erm(xa, split.y, 2, lam, 1e-10)
    retrained = logistic.fit_erm(xa[keep], split.y[keep], 2, lam, 1e-10)
    distance0 = certify.erm_distance_bound(f, n, logistic.lipschitz(xa), lam, 1e-10)
    budget = certify.RenyiBudget(2.0, math.inf)
    gaps = []
    for steps in (0, 50, 1500):
        out = certify.unlearn(
            trained, xa[keep], split.y[keep], lam, distance0, steps, budget,
            np.random.default_rng(0),
        )  # fmt: skip
        assert out.sigma == 0.0 and np.array_equal(out.weights, out.clean_weights)
        gaps.append(np.linalg.norm(out.weights - retrained))
        assert gaps[-1] <= out.distance_bound + 1e-10 / lam  # + the retrained model's own error
    assert gaps[0] > 1e-2 and gaps[1] < gaps[0] and gaps[2] < 1e-7


def test_noise_is_the_calibrated_sigma() -> None:
    split = data.synthetic_split(300, 10, 30, 5, seed=5)
    xa, keep = logistic.augment(split.x), split.retain
    trained = logistic.fit_erm(xa, split.y, 2, 0.1, 1e-9)
    budget = certify.RenyiBudget(2.0, 0.5)
    out = certify.unlearn(trained, xa[keep], split.y[keep], 0.1, 1.0, 3, budget,
                          np.random.default_rng(1))  # fmt: skip
    expected = (1 - 0.1 / logistic.smoothness(xa[keep], 0.1)) ** 3 * math.sqrt(2.0)
    assert out.sigma == pytest.approx(expected)
    noise = (out.weights - out.clean_weights).ravel()  # 62 draws of N(0, sigma^2)
    assert 0.7 * expected < noise.std() < 1.3 * expected


def test_card_releases_a_useful_classifier() -> None:
    from edgekit.registry import get_card

    card = get_card("certified-unlearning")
    result = card.train()
    assert result.sigma > 0 and result.steps == card.config.unlearn_steps
    assert result.heldout_accuracy > 0.85
    assert abs(result.heldout_accuracy - result.retrain_accuracy) < 0.03
    with pytest.raises(InputError):
        get_card("certified-unlearning", not_an_option=1)


def test_release_noise_is_fresh_unless_a_seed_is_given() -> None:
    from edgekit.models.certified_unlearning.card import UnlearnConfig, release

    assert UnlearnConfig().noise_seed is None
    config = UnlearnConfig(unlearn_steps=5)  # few steps: large sigma, fast
    first, second = release(config), release(config)
    assert first.sigma == second.sigma > 0
    # same recipe, same noiseless weights: the difference is two independent noise draws
    diff = (first.weights - second.weights).ravel()
    assert 0.7 * math.sqrt(2) * first.sigma < diff.std() < 1.3 * math.sqrt(2) * first.sigma
    seeded = UnlearnConfig(unlearn_steps=5, noise_seed=7)
    with pytest.warns(UserWarning, match="certificate does not hold"):
        np.testing.assert_array_equal(release(seeded).weights, release(seeded).weights)
        seven, eight = certify.release_rng(7), certify.release_rng(8)
    assert not np.array_equal(seven.standard_normal(4), eight.standard_normal(4))
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError):
            certify.release_rng(bad)  # type: ignore[arg-type]


def test_card_serves_one_cached_release_per_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.cache import CACHE_ENV
    from edgekit.registry import get_card
    from edgekit.sources import weights_record

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    first = get_card("certified-unlearning", unlearn_steps=5).train()
    again = get_card("certified-unlearning", unlearn_steps=5).train()
    assert not first.cached and again.cached and again.path == first.path
    np.testing.assert_array_equal(again.weights, first.weights)
    with np.load(first.path) as blob:
        stored = set(blob.files)
    assert "weights" in stored and not stored & {"clean_weights", "noise", "entropy"}
    card = get_card("certified-unlearning", unlearn_steps=5)
    assert weights_record(card) == {"weights": first.path.stem}
    first.path.unlink()  # another release: another name, so a bundle of the old one is told apart
    fresh = get_card("certified-unlearning", unlearn_steps=5).train()
    assert fresh.path != first.path and not np.array_equal(fresh.weights, first.weights)


def test_the_bundle_records_where_the_noise_came_from() -> None:
    from edgekit.registry import get_card

    default = get_card("certified-unlearning").preprocessing()["certificate"]
    assert default["noise"].startswith("OS entropy") and "noise_seed" not in default
    with pytest.warns(UserWarning, match="certificate does not hold"):
        seeded = get_card("certified-unlearning", noise_seed=3)
    record = seeded.preprocessing()["certificate"]
    assert record["noise_seed"] == 3 and record["holds"] is False
    assert record["warning"] == certify.SEEDED_NOISE_WARNING
    assert seeded.source()["options"] == {"noise_seed": 3}  # the manifest's source.options
    with pytest.raises(InputError):
        get_card("certified-unlearning", noise_seed=-1)


def test_attack_auc_hand_computation() -> None:
    from edgekit.models.certified_unlearning.audit import attack_auc

    # pairs (a, r): 1<2, 1<3, 2=2 (half), 2<3 -> (3 + 0.5) / 4
    assert attack_auc(np.array([1.0, 2.0]), np.array([2.0, 3.0])) == pytest.approx(0.875)
    assert attack_auc(np.array([5.0]), np.array([1.0, 2.0])) == 0.0


def test_distinguisher_cannot_tell_unlearned_from_retrained_but_catches_no_unlearning() -> None:
    from edgekit.models.certified_unlearning.audit import distinguishing_audit

    result = distinguishing_audit(draws=100, boots=300)
    # the control (trained model + the same noise, nothing unlearned) is caught
    assert result.control_auc.low > 0.9
    assert result.control_loss_gap.low > 0
    # the unlearned release: the attack is near coin-flipping (a 95 % interval misses 0.5 one
    # seed in twenty, so the margins are wider) and the forgotten rows' loss gap to retraining
    # is a small fraction of the control's
    assert abs(result.unlearned_auc.value - 0.5) < 0.15
    assert abs(result.unlearned_loss_gap.value) < 0.2 * result.control_loss_gap.value
    with pytest.raises(InputError):
        distinguishing_audit(draws=1)


def test_audit_digits_scenario_is_the_cards_recipe() -> None:
    from edgekit.models.certified_unlearning.audit import DIGITS
    from edgekit.models.certified_unlearning.card import UnlearnConfig

    recipe = UnlearnConfig()
    for name in ("forget", "lam", "unlearn_steps", "q", "eps", "seed"):
        assert getattr(DIGITS, name) == getattr(recipe, name), name
    assert DIGITS.dim == 0


def test_membership_attack_pairs_models_and_checks_its_inputs() -> None:
    from edgekit.models.certified_unlearning.audit import membership_attack

    rng = np.random.default_rng(0)
    members = (logistic.augment(rng.standard_normal((6, 3))), rng.integers(0, 2, 6))
    nonmembers = (logistic.augment(rng.standard_normal((8, 3))), rng.integers(0, 2, 8))
    w = rng.standard_normal((2, 4))
    rows = membership_attack(
        {"a": (w, 0.0), "b": (w.copy(), 0.0), "c": (-w, 0.0)}, members, nonmembers, "b", "c",
        draws=3, boots=50,
    )  # fmt: skip
    a, b, c = rows
    # the same model twice: the same AUC on every resample, so a zero-width zero difference
    assert a.auc == b.auc and a.minus_reference == Interval(0.0, 0.0, 0.0)
    assert a.share_of_control is not None and a.share_of_control.value == 0.0
    assert b.minus_reference is None and c.share_of_control is None
    # -w reverses every binary logit: member i below non-member j exactly when it was above
    assert c.auc.value == pytest.approx(1.0 - a.auc.value)
    with pytest.raises(InputError):
        membership_attack({"a": (w, 0.0)}, members, nonmembers, "missing")
    with pytest.raises(InputError):
        membership_attack({"a": (w, 0.0), "b": (w[:, :2], 0.0)}, members, nonmembers, "a")


def test_membership_audit_finds_memorised_rows_and_a_broken_unlearner_but_not_retraining() -> None:
    from edgekit.models.certified_unlearning.audit import Scenario, membership_audit

    # random labels, d = 256 > n = 100: the original model fits them only by memorising
    small = Scenario(
        "small memorising", forget=50, lam=0.001, unlearn_steps=7000, dim=256, n=100, n_test=200
    )
    result = membership_audit(small, draws=20, boots=400)
    original, skipped = result.row("original"), result.row("skipped")
    unlearned, retrained = result.row("unlearned"), result.row("retrained")
    assert result.sigma > 0 and [r.model for r in result.rows][-1] == "retrained"
    # a model that never saw the forgotten rows: the attack is at chance
    assert retrained.auc.contains(0.5) and abs(retrained.auc.value - 0.5) < 0.1
    # a model that memorised them: clearly found, absolutely and against retraining
    assert original.auc.low > 0.75
    assert result.control_above_chance and result.control_above_retrained
    # the broken method (noise without the unlearning steps) keeps all of that leakage
    assert skipped.minus_reference is not None and skipped.minus_reference.low > 0.2
    assert skipped.share_of_control is not None and skipped.share_of_control.low > 0.9
    # the release keeps none of it that the attack can see
    assert unlearned.share_of_control is not None and unlearned.share_of_control.high < 0.01
    assert abs(unlearned.auc.value - retrained.auc.value) < 0.01


@pytest.mark.study
def test_study_writes_report_and_plot(tmp_path: Path) -> None:
    config = StudyConfig(
        n=400, n_test=200, dims=(4,), forget_sizes=(2, 16), noise_draws=3, cost_dim=4,
        unlearn_steps=30, audit_scenarios=("memorising",), audit_draws=5, audit_boots=50,
        distinguish_draws=0,
    )  # fmt: skip
    report = write_study(tmp_path, False, config)
    assert (tmp_path / "study.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "report.json").read_text())
    assert len(saved["utility"]) == 2 and len(saved["cost"]) == 4
    (audit,) = saved["membership"]
    assert [r["model"] for r in audit["rows"]] == ["original", "skipped", "unlearned", "retrained"]
    assert audit["control_above_retrained"] and saved["distinguishing"] is None
    big = report["utility"][-1]
    assert big["dp_sigma"] > big["unlearn_sigma"] > 0
    assert big["unlearn_loss"] < big["dp_loss"]
