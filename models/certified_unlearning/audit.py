"""Empirical membership-inference audit of the forgotten rows.

The certificate says the released model is within Renyi divergence eps of the retrained model
plus the same Gaussian noise. This audit plays the attacker that knows the forget set: it sees
one model, computes the mean cross-entropy of the forgotten rows under it, and guesses
"unlearned" when that loss is low. Over ``draws`` independent noise draws of the audited model
and of the reference (retrained on the retain set + N(0, sigma^2 I), same sigma), it reports

- ``auc``: P(forget loss under the audited model < under the reference), the attack's ROC AUC
  (0.5: indistinguishable, 1: always told apart), with a bootstrap 95 % interval over draws;
- ``loss_gap``: mean over forgotten rows of (reference loss - audited loss), averaged over the
  draws, with a bootstrap 95 % interval over rows (> 0: the forgotten rows are still fitted).

The same numbers for the trained model plus the same noise (no unlearning steps) are the
control: what the attack finds when nothing was unlearned. Audit draws use their own seeded
generator (an evaluation, not a release).
"""

from __future__ import annotations

from collections.abc import Callable
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


@dataclass(frozen=True)
class AuditResult:
    """The attack against the unlearned model and against the no-unlearning control."""

    sigma: float
    unlearned_auc: Interval
    unlearned_loss_gap: Interval
    control_auc: Interval
    control_loss_gap: Interval


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


def _row_losses(w: np.ndarray, xa: np.ndarray, y: np.ndarray) -> np.ndarray:
    probs = logistic.probabilities(w, xa)
    return -np.log(probs[np.arange(len(y)), y] + 1e-12)


def membership_audit(
    forget: int = 20,
    lam: float = 0.01,
    unlearn_steps: int = 600,
    budget: certify.RenyiBudget | None = None,
    split_seed: int = 0,
    draws: int = 200,
    boots: int = 1000,
    seed: int = 0,
) -> AuditResult:
    """Audit the digits recipe of the card (same split, lam, steps, budget; see module doc)."""
    if draws < 2 or boots < 10:
        raise InputError(f"need draws >= 2 and boots >= 10, got draws={draws}, boots={boots}")
    budget = budget or certify.RenyiBudget(2.0, 1.0)
    split = data.digits_split(forget, split_seed)
    xa, keep = logistic.augment(split.x), split.retain
    tol = 1e-8
    trained = logistic.fit_erm(xa, split.y, split.n_classes, lam, tol)
    lipschitz = float(np.sqrt(2.0 * (data.DIGITS_FEATURE_NORM**2 + 1.0)))
    distance0 = certify.erm_distance_bound(forget, len(xa), lipschitz, lam, tol)
    rng = np.random.default_rng(seed)
    unlearned = certify.unlearn(
        trained, xa[keep], split.y[keep], lam, distance0, unlearn_steps, budget, rng
    )
    retrained = logistic.fit_erm(xa[keep], split.y[keep], split.n_classes, lam, tol)
    sigma = unlearned.sigma
    xf, yf = xa[split.forget], split.y[split.forget]

    def noisy_losses(clean: np.ndarray) -> np.ndarray:  # (draws, forget) per-row losses
        return np.stack(
            [
                _row_losses(clean + sigma * rng.standard_normal(clean.shape), xf, yf)
                for _ in range(draws)
            ]
        )

    reference = noisy_losses(retrained)

    def attack(audited: np.ndarray) -> tuple[Interval, Interval]:
        ref_mean, aud_mean = reference.mean(axis=1), audited.mean(axis=1)  # (draws,)
        auc = attack_auc(aud_mean, ref_mean)
        auc_ci = bootstrap(lambda i: attack_auc(aud_mean[i], ref_mean[i]), draws, boots, rng)
        gaps = (reference - audited).mean(axis=0)  # (forget,)
        gap_ci = bootstrap(lambda i: float(gaps[i].mean()), len(gaps), boots, rng)
        return Interval(auc, *auc_ci), Interval(float(gaps.mean()), *gap_ci)

    unlearned_auc, unlearned_gap = attack(noisy_losses(unlearned.clean_weights))
    control_auc, control_gap = attack(noisy_losses(trained))
    return AuditResult(sigma, unlearned_auc, unlearned_gap, control_auc, control_gap)
