"""Empirical audits of the forgotten rows: a membership-inference attack and a distinguisher.

The certificate says the release (trained model, T GD steps on the retain set, Gaussian noise
sigma) is within Renyi divergence eps of the retrained model plus the same noise. Both audits
test that claim from the outside; their noise draws come from their own seeded generator (an
evaluation, not a release).

Membership inference (``membership_audit``, the main audit). The loss-threshold attack (Yeom
et al. 2018, "Privacy risk in machine learning"): a row is called a training member when its
cross-entropy under the model is low. Its ROC AUC at telling the forgotten rows (members of the
original training set) from held-out rows that no model saw (the test split) is measured on

- ``original``: the trained model before unlearning, no noise: the positive control, what the
  attack finds when nothing was forgotten;
- ``skipped``: the trained model plus the release's noise sigma, its GD steps skipped: a broken
  unlearning method the audit must catch;
- ``unlearned``: the release (the trained model, T GD steps on the retain set, noise sigma);
- ``retrained``: the model retrained on the retain set plus the same noise sigma: the reference
  the certificate compares with.

The attacker sees one release, so a noisy model's AUC is averaged over ``draws`` noise draws
(the attack's expected AUC), each draw shared by the noisy models (common random numbers, so
their difference is not noise). 95 % intervals: percentile bootstrap over rows, forgotten and
held-out rows resampled separately, the same resample for every model, so the differences
``model - retrained`` are paired. Read the differences: the retrained model never saw the
forgotten rows, so its AUC away from 0.5 only says how much easier those rows are than the
held-out ones. ``share_of_control``, (AUC(unlearned) - AUC(retrained)) / (AUC(original) -
AUC(retrained)), is the part of the original model's excess leakage the release keeps: 0 is
retraining, 1 is no unlearning at all. The certificate bounds a divergence, not this share, so a
small positive share (unlearning stops within sigma of retraining, not at it) is expected and a
powerful enough audit will find it. The positive control has two readings:
``control_above_chance`` (the original model's AUC interval above 0.5: the attack alone finds
members) and ``control_above_retrained`` (the paired difference above 0: the audit has power on
this scenario). Without the second, the audit's verdict on the release means nothing.

Two scenarios: ``DIGITS``, the card's recipe (20 forgotten digits, lam = 0.01: a strongly
regularised linear model that hardly memorises), and ``MEMORISING`` (random labels, 256
dimensions, 200 rows: the original model can only fit its labels by memorising them).

Distinguishing (``distinguishing_audit``). An attacker that knows the forget set sees one model
and computes the mean cross-entropy of the forgotten rows under it, guessing "unlearned" when it
is low. Over ``draws`` noise draws of the audited model and of the reference (retrained + the
same noise) it reports the attack's AUC (P(forget loss under the audited model < under the
reference)) with a bootstrap interval over draws, and the mean per-row loss gap (reference -
audited) with a bootstrap interval over rows; the trained model plus the same noise (no
unlearning steps) is its control.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.certified_unlearning import certify, data, logistic


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap 95 % interval."""

    value: float
    low: float
    high: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class Scenario:
    """A recipe to audit: data, forget-set size, lam, unlearning steps, (q, eps) budget.

    ``dim = 0``: the card's digits split (``seed`` as the card's ``seed``); ``dim > 0``: ``n``
    training and ``n_test`` held-out rows with random labels (``data.mixture`` with no class
    separation) in ``dim`` dimensions, rows of norm <= 1.
    """

    name: str
    forget: int
    lam: float
    unlearn_steps: int
    q: float = 2.0
    eps: float = 1.0
    seed: int = 0
    dim: int = 0
    n: int = 0
    n_test: int = 0


DIGITS = Scenario("digits (the card's release)", forget=20, lam=0.01, unlearn_steps=600)
MEMORISING = Scenario(
    "memorising (random labels, d = 256, n = 200)", forget=100, lam=0.001, unlearn_steps=7000,
    dim=256, n=200, n_test=1000,
)  # fmt: skip
SCENARIOS = {"digits": DIGITS, "memorising": MEMORISING}


@dataclass
class Problem:
    """Augmented training rows (xa, y), forgotten indices, held-out rows, classes, G."""

    xa: np.ndarray
    y: np.ndarray
    forget: np.ndarray
    xa_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    lipschitz: float

    @property
    def retain(self) -> np.ndarray:
        keep = np.ones(len(self.xa), dtype=bool)
        keep[self.forget] = False
        return np.nonzero(keep)[0]


def problem(scenario: Scenario) -> Problem:
    """The rows of ``scenario`` (see ``Scenario``); features have norm <= 1 either way."""
    lipschitz = float(np.sqrt(2.0 * (data.DIGITS_FEATURE_NORM**2 + 1.0)))  # G for ||x|| <= 1
    if scenario.dim == 0:
        split = data.digits_split(scenario.forget, scenario.seed)
        return Problem(
            logistic.augment(split.x), split.y, split.forget, logistic.augment(split.x_test),
            split.y_test, split.n_classes, lipschitz,
        )  # fmt: skip
    if not 0 < scenario.forget < scenario.n or scenario.n_test < 1:
        raise InputError(f"need 0 < forget < n and n_test >= 1, got {scenario}")
    x, y, x_test, y_test = data.mixture(
        scenario.n, scenario.n_test, scenario.dim, scenario.seed, separation=0.0
    )
    rng = np.random.default_rng(scenario.seed + 1)
    forget = np.sort(rng.choice(scenario.n, size=scenario.forget, replace=False))
    return Problem(logistic.augment(x), y, forget, logistic.augment(x_test), y_test, 2, lipschitz)


@dataclass
class Models:
    """The three models of an audit: trained (on all rows), unlearned (noiseless), retrained."""

    trained: np.ndarray
    unlearned: np.ndarray
    retrained: np.ndarray
    sigma: float  # the release's noise std, for the unlearned and the retrained model


def unlearning_models(scenario: Scenario, prob: Problem, tol: float = 1e-8) -> Models:
    """ERM on all rows, the card's unlearning (``certify.unlearn``, its noise set aside: the
    audits draw their own) and ERM on the retained rows."""
    keep = prob.retain
    trained = logistic.fit_erm(prob.xa, prob.y, prob.n_classes, scenario.lam, tol)
    distance0 = certify.erm_distance_bound(
        scenario.forget, len(prob.xa), prob.lipschitz, scenario.lam, tol
    )
    budget = certify.RenyiBudget(scenario.q, scenario.eps)
    unlearned = certify.unlearn(
        trained, prob.xa[keep], prob.y[keep], scenario.lam, distance0, scenario.unlearn_steps,
        budget, np.random.default_rng(0),
    )  # fmt: skip
    retrained = logistic.fit_erm(prob.xa[keep], prob.y[keep], prob.n_classes, scenario.lam, tol)
    return Models(trained, unlearned.clean_weights, retrained, unlearned.sigma)


def attack_auc(audited: np.ndarray, reference: np.ndarray) -> float:
    """P(a < r) + P(a = r) / 2 over all pairs of audited losses a and reference losses r."""
    a, r = np.asarray(audited)[:, None], np.asarray(reference)[None, :]
    return float((a < r).mean() + 0.5 * (a == r).mean())


def bootstrap(
    statistic: Callable[[np.ndarray], float], n: int, boots: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile 95 % interval of ``statistic(indices)`` over ``boots`` resamples of range(n)."""
    values = [statistic(rng.integers(0, n, n)) for _ in range(boots)]
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def row_losses(w: np.ndarray, xa: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy (n,) of each row of (xa, y) under weights ``w``."""
    probs = logistic.probabilities(w, xa)
    return -np.log(probs[np.arange(len(y)), y] + 1e-12)


@dataclass(frozen=True)
class MembershipRow:
    """The loss-threshold attack on one model: its AUC, its AUC minus the reference's, and that
    excess as a share of the control's excess (None for the reference / the control)."""

    model: str
    sigma: float
    auc: Interval
    minus_reference: Interval | None
    share_of_control: Interval | None = None


def membership_attack(
    models: Mapping[str, tuple[np.ndarray, float]],
    members: tuple[np.ndarray, np.ndarray],
    nonmembers: tuple[np.ndarray, np.ndarray],
    reference: str,
    control: str | None = None,
    draws: int = 100,
    boots: int = 2000,
    rng: np.random.Generator | None = None,
) -> list[MembershipRow]:
    """Loss-threshold membership attack on each of ``models`` (name -> (weights (K, d + 1),
    noise std)), members and non-members as (augmented rows, labels): AUC of "member" at low
    loss, averaged over ``draws`` noise draws (one model when the std is 0), with paired
    row-bootstrap 95 % intervals for the AUC, for the AUC minus ``reference``'s and for that
    excess over ``control``'s excess (the share of the control's leakage a model keeps)."""
    for name in (reference, control):
        if name is not None and name not in models:
            raise InputError(f"model {name!r} is not one of {sorted(models)}")
    if draws < 1 or boots < 10:
        raise InputError(f"need draws >= 1 and boots >= 10, got draws={draws}, boots={boots}")
    rng = rng or np.random.default_rng(0)
    m, h = len(members[1]), len(nonmembers[1])
    if m < 2 or h < 2:
        raise InputError(f"need >= 2 members and non-members, got {m} and {h}")
    shapes = {np.shape(weights) for weights, _ in models.values()}
    if len(shapes) != 1:
        raise InputError(f"models must have one weight shape, got {sorted(shapes)}")
    shape = shapes.pop()

    def comparisons(w: np.ndarray) -> np.ndarray:  # (m, h): 1 if member i's loss is lower
        a, b = row_losses(w, *members)[:, None], row_losses(w, *nonmembers)[None, :]
        return (a < b) + 0.5 * (a == b)

    # pairs[name] (m, h): P(member i's loss < non-member j's) over the noise draws; every draw
    # is shared by all noisy models (common random numbers: their differences are not noise)
    pairs = {name: comparisons(w) for name, (w, sigma) in models.items() if sigma == 0}
    noisy = {name: model for name, model in models.items() if model[1] > 0}
    totals = {name: np.zeros((m, h)) for name in noisy}
    for _ in range(draws if noisy else 0):
        z = rng.standard_normal(shape)
        for name, (weights, sigma) in noisy.items():
            totals[name] += comparisons(weights + sigma * z)
    pairs |= {name: total / draws for name, total in totals.items()}
    pairs = {name: pairs[name] for name in models}  # the caller's order
    member_counts = rng.multinomial(m, np.full(m, 1.0 / m), size=boots)  # (boots, m)
    nonmember_counts = rng.multinomial(h, np.full(h, 1.0 / h), size=boots)  # (boots, h)
    resampled = {
        name: ((member_counts @ p) * nonmember_counts).sum(axis=1) / (m * h)  # (boots,)
        for name, p in pairs.items()
    }

    def interval(value: float, values: np.ndarray) -> Interval:
        low, high = np.percentile(values, [2.5, 97.5])
        return Interval(float(value), float(low), float(high))

    auc = {name: float(p.mean()) for name, p in pairs.items()}
    excess = {name: resampled[name] - resampled[reference] for name in models}
    rows = []
    for name in models:
        diff = auc[name] - auc[reference]
        share = None
        if control is not None and name not in (reference, control):
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = excess[name] / excess[control]
            share = interval(diff / (auc[control] - auc[reference]), ratios)
        rows.append(
            MembershipRow(
                name,
                float(models[name][1]),
                interval(auc[name], resampled[name]),
                None if name == reference else interval(diff, excess[name]),
                share,
            )  # fmt: skip
        )
    return rows


@dataclass(frozen=True)
class MembershipAudit:
    """``membership_attack`` on the original, skipped, unlearned and retrained models."""

    scenario: Scenario
    sigma: float
    members: int
    nonmembers: int
    rows: list[MembershipRow]
    seconds: float = 0.0

    def row(self, model: str) -> MembershipRow:
        return next(r for r in self.rows if r.model == model)

    @property
    def control_above_chance(self) -> bool:
        """The original model's AUC interval lies above 0.5: the attack alone finds members."""
        return self.row("original").auc.low > 0.5

    @property
    def control_above_retrained(self) -> bool:
        """AUC(original) - AUC(retrained) has an interval above 0: the paired comparison finds
        the original model's leakage (the audit has power on this scenario)."""
        diff = self.row("original").minus_reference
        return diff is not None and diff.low > 0


def membership_audit(
    scenario: Scenario = DIGITS, draws: int = 100, boots: int = 2000, seed: int = 0
) -> MembershipAudit:
    """The loss-threshold membership attack on ``scenario`` (module docstring): forgotten rows
    against the held-out rows; models original, skipped, unlearned and retrained."""
    import time

    started = time.perf_counter()
    prob = problem(scenario)
    models = unlearning_models(scenario, prob)
    rows = membership_attack(
        {
            "original": (models.trained, 0.0),
            "skipped": (models.trained, models.sigma),
            "unlearned": (models.unlearned, models.sigma),
            "retrained": (models.retrained, models.sigma),
        },
        (prob.xa[prob.forget], prob.y[prob.forget]),
        (prob.xa_test, prob.y_test),
        "retrained", "original", draws, boots, np.random.default_rng(seed),
    )  # fmt: skip
    return MembershipAudit(
        scenario, models.sigma, len(prob.forget), len(prob.y_test), rows,
        time.perf_counter() - started,
    )  # fmt: skip


@dataclass(frozen=True)
class DistinguishingAudit:
    """The distinguisher against the unlearned model and against the no-unlearning control."""

    sigma: float
    unlearned_auc: Interval
    unlearned_loss_gap: Interval
    control_auc: Interval
    control_loss_gap: Interval


def distinguishing_audit(
    scenario: Scenario = DIGITS, draws: int = 200, boots: int = 1000, seed: int = 0
) -> DistinguishingAudit:
    """The distinguishing attack on ``scenario`` (module docstring)."""
    if draws < 2 or boots < 10:
        raise InputError(f"need draws >= 2 and boots >= 10, got draws={draws}, boots={boots}")
    prob = problem(scenario)
    models = unlearning_models(scenario, prob)
    rng, sigma = np.random.default_rng(seed), models.sigma
    xf, yf = prob.xa[prob.forget], prob.y[prob.forget]

    def noisy_losses(clean: np.ndarray) -> np.ndarray:  # (draws, forget) per-row losses
        return np.stack(
            [row_losses(clean + sigma * rng.standard_normal(clean.shape), xf, yf)
             for _ in range(draws)]
        )  # fmt: skip

    reference = noisy_losses(models.retrained)

    def attack(audited: np.ndarray) -> tuple[Interval, Interval]:
        ref_mean, aud_mean = reference.mean(axis=1), audited.mean(axis=1)  # (draws,)
        auc = attack_auc(aud_mean, ref_mean)
        auc_ci = bootstrap(lambda i: attack_auc(aud_mean[i], ref_mean[i]), draws, boots, rng)
        gaps = (reference - audited).mean(axis=0)  # (forget,)
        gap_ci = bootstrap(lambda i: float(gaps[i].mean()), len(gaps), boots, rng)
        return Interval(auc, *auc_ci), Interval(float(gaps.mean()), *gap_ci)

    unlearned_auc, unlearned_gap = attack(noisy_losses(models.unlearned))
    control_auc, control_gap = attack(noisy_losses(models.trained))
    return DistinguishingAudit(sigma, unlearned_auc, unlearned_gap, control_auc, control_gap)
