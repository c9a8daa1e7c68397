"""Noise calibration and the two certified unlearning procedures.

Definition. A procedure U is (q, eps)-Renyi unlearning when, for a forget set F of f of the n
training points and retain set R = D \\ F (m = n - f points), the Renyi divergence of order q
between U's output and a reference that only ever saw R is at most eps, both ways round. The
reference here is the retrained model plus the same noise: theta_R* + N(0, sigma^2 I), where
theta_R* = argmin F_R is the exact regularised ERM solution on R.

Calibration (``gaussian_sigma``). For two Gaussians with the same covariance,
D_q(N(a, s^2 I) || N(b, s^2 I)) = q ||a - b||^2 / (2 s^2) (Mironov 2017, "Renyi Differential
Privacy", Proposition 7 / Table 2), symmetric in a and b. If the released point before noise is
within Delta of theta_R*, then

    sigma = Delta * sqrt(q / (2 eps))

gives D_q <= eps. Delta must be bounded without looking at theta_R* or at F beyond its size
(the noise level must not depend on the forgotten data), so it comes from the bounds below.

ERM warm start (``erm_distance_bound``, in-distribution method). F_D and F_R are both
mu-strongly convex (mu = lam). With per-example gradients bounded by G,
grad F_R(theta_D*) = (1/m - 1/n) sum_R g_i - (1/n) sum_F g_i has norm <= 2 G f / n, so
||theta_D* - theta_R*|| <= ||grad F_R(theta_D*)|| / mu <= 2 G f / (mu n). A trained model
solved only to ||grad F_D|| <= tol adds tol / mu. (The issue's notes give 2 G f / (mu (n - f)),
marked unverified; it is looser, so the bound used here is the tighter one derived above.)
T steps of GD on F_R with step 1/L contract the distance by (1 - mu/L)^T (Nesterov 2004,
Theorem 2.1.15): Delta_T = (1 - mu/L)^T Delta_0. T = 0 is differentially private training
with output perturbation ("unlearning for free"), the DP baseline.

Trimmed-mean warm start (``trimmed_distance_bound``, out-of-distribution method). The model is
trained with the coordinate-wise trimmed mean (k dropped at each end, k >= f) of per-example
gradients to a residual tol. In each coordinate j, let W_j bound the spread of the retained
examples' gradients (here 2 max_R |x_ij|: softmax residuals lie in [-1, 1]). A trimmed mean
keeps only values between retained order statistics, whatever the f forget values are, which
gives |TM_k(D) - TM_k(R)| <= W_j (2f/(n - 2k) + f/(m - 2k)), and |mean_R - TM_k(R)|
<= W_j 2k/m; so ||grad F_R(theta_rob)|| <= c ||W|| + tol with
c = 2k/m + 2f/(n - 2k) + f/(m - 2k), and Delta_0 = (c ||W|| + tol) / mu. Unlike 2 G f / (mu n),
this does not grow with how far the forget points lie from the retained data (our derivation;
the paper's own constants were not available here). Unlearning then runs the same GD on F_R and
the same output noise.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.certified_unlearning import logistic


@dataclass(frozen=True)
class RenyiBudget:
    """(q, eps): Renyi order q > 1 and divergence bound eps > 0 (eps = inf: no noise)."""

    q: float = 2.0
    eps: float = 1.0

    def __post_init__(self) -> None:
        if not self.q > 1:
            raise InputError(f"Renyi order q must be > 1, got {self.q}")
        if not self.eps > 0:
            raise InputError(f"Renyi eps must be > 0, got {self.eps}")


def gaussian_sigma(distance: float, budget: RenyiBudget) -> float:
    """sigma = Delta sqrt(q / (2 eps)): Gaussian noise std making N(a, s^2) and N(b, s^2) with
    ||a - b|| <= Delta (q, eps)-Renyi close (Mironov 2017, Prop. 7). 0 when eps is inf."""
    if distance < 0:
        raise InputError(f"distance bound must be >= 0, got {distance}")
    if math.isinf(budget.eps):
        return 0.0
    return distance * math.sqrt(budget.q / (2.0 * budget.eps))


def erm_distance_bound(f: int, n: int, lipschitz: float, mu: float, tol: float = 0.0) -> float:
    """Delta_0 = 2 G f / (mu n) + tol / mu: ||theta_D - theta_R*|| for an ERM solution on n
    points solved to ||grad|| <= tol, after removing any f of them (module docstring)."""
    if not 0 <= f < n:
        raise InputError(f"forget-set size f must be in [0, n) with n = {n}, got {f}")
    if mu <= 0:
        raise InputError(f"strong convexity mu must be > 0, got {mu}")
    return 2.0 * lipschitz * f / (mu * n) + tol / mu


def trimmed_distance_bound(
    f: int, n: int, trim: int, spread: np.ndarray, mu: float, tol: float = 0.0
) -> float:
    """Delta_0 = (c ||W|| + tol) / mu for a trimmed-mean model (module docstring);
    ``spread`` W (P,) bounds each gradient coordinate's spread over the retained examples."""
    m = n - f
    if not 0 <= f <= trim:
        raise InputError(f"trimmed-mean bound needs 0 <= f <= trim, got f={f}, trim={trim}")
    if m - 2 * trim <= 0:
        raise InputError(f"trim {trim} leaves nothing of {m} retained points")
    c = 2 * trim / m + 2 * f / (n - 2 * trim) + f / (m - 2 * trim)
    return (c * float(np.linalg.norm(spread)) + tol) / mu


def retained_spread(xa_retain: np.ndarray, n_classes: int) -> np.ndarray:
    """W (K * (d + 1),): 2 max_R |x_ij| per gradient coordinate (class-major, as the weights)."""
    bound = 2.0 * np.abs(xa_retain).max(axis=0)  # (d + 1,)
    return np.tile(bound, n_classes)


def contraction(mu: float, smooth: float) -> float:
    """Per-step GD contraction factor 1 - mu/L (step 1/L)."""
    return 1.0 - mu / smooth


def steps_needed(distance0: float, target: float, mu: float, smooth: float) -> int:
    """Smallest T with (1 - mu/L)^T Delta_0 <= target (0 if already there)."""
    if target <= 0:
        raise InputError(f"target distance must be > 0, got {target}")
    if distance0 <= target:
        return 0
    return math.ceil(math.log(distance0 / target) / -math.log(contraction(mu, smooth)))


SEEDED_NOISE_WARNING = (
    "release noise drawn from a fixed noise_seed: anyone who knows the seed can regenerate the "
    "noise and subtract it, so the unlearning certificate does not hold for this release (use "
    "it for tests and reproducible research runs only)"
)


def release_rng(noise_seed: int | None = None) -> np.random.Generator:
    """The generator for a released model's Gaussian noise.

    ``None`` (the only default anywhere) draws fresh OS entropy, so nobody can regenerate the
    noise and subtract it from the released weights; the certificate relies on the noise being
    secret. An explicit non-negative ``noise_seed`` makes the draw reproducible (tests and
    research runs only: a seeded release certifies nothing against anyone who knows the seed)
    and warns so (``SEEDED_NOISE_WARNING``, a UserWarning).
    """
    if noise_seed is None:
        return np.random.default_rng(np.random.SeedSequence())
    if isinstance(noise_seed, bool) or not isinstance(noise_seed, int) or noise_seed < 0:
        raise InputError(f"noise_seed must be None or an int >= 0, got {noise_seed!r}")
    warnings.warn(f"{SEEDED_NOISE_WARNING} (noise_seed={noise_seed})", UserWarning, stacklevel=2)
    return np.random.default_rng(noise_seed)


@dataclass
class Unlearned:
    """A released model: weights (K, d + 1) after noise, the noiseless ones, the certificate."""

    weights: np.ndarray
    clean_weights: np.ndarray
    sigma: float
    steps: int
    distance_bound: float  # Delta_T: bound on ||clean_weights - theta_R*||
    budget: RenyiBudget


def unlearn(
    weights: np.ndarray,
    xa_retain: np.ndarray,
    y_retain: np.ndarray,
    lam: float,
    distance0: float,
    steps: int,
    budget: RenyiBudget,
    rng: np.random.Generator,
) -> Unlearned:
    """``steps`` GD steps on the retain objective from ``weights`` (step 1/L_R), then Gaussian
    noise with sigma = (1 - mu/L_R)^T Delta_0 sqrt(q / (2 eps)).

    ``distance0`` is Delta_0 from ``erm_distance_bound`` or ``trimmed_distance_bound``.
    ``steps = 0`` is the DP baseline (output perturbation of the trained model).
    """
    smooth = logistic.smoothness(xa_retain, lam)
    clean = logistic.gd_steps(weights, xa_retain, y_retain, lam, steps, 1.0 / smooth)
    distance = contraction(lam, smooth) ** steps * distance0
    sigma = gaussian_sigma(distance, budget)
    noisy = clean + sigma * rng.standard_normal(clean.shape)
    return Unlearned(noisy, clean, sigma, steps, distance, budget)
