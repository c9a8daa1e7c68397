"""Data for the unlearning study: a synthetic two-class mixture (any dimension, in- and
out-of-distribution forget sets) and sklearn's bundled digits.

Features are rows of float64; ``clip_rows`` bounds their norm so the Lipschitz and smoothness
constants of the certificates hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError

DIGITS_FEATURE_NORM = 1.0  # digits pixels / 16, rows clipped to this norm after scaling
DIGITS_SCALE = 1.0 / 48.0  # pixel (0..16) -> feature; a digit's pixel vector norm is ~50-90


@dataclass
class Split:
    """Train (x (n, d), y (n,)) and test (x_test, y_test) arrays; ``forget`` indexes x."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    forget: np.ndarray
    n_classes: int

    @property
    def retain(self) -> np.ndarray:
        """Indices of the retained training rows (every row not in ``forget``)."""
        keep = np.ones(len(self.x), dtype=bool)
        keep[self.forget] = False
        return np.nonzero(keep)[0]


def clip_rows(x: np.ndarray, max_norm: float) -> np.ndarray:
    """Rows of ``x`` (n, d) scaled down to norm <= ``max_norm`` (shorter rows unchanged)."""
    if max_norm <= 0:
        raise InputError(f"max_norm must be > 0, got {max_norm}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))


def class_direction(dim: int, seed: int) -> np.ndarray:
    """The unit vector (dim,) along which ``mixture``'s class means differ (class 1 at +)."""
    direction = np.random.default_rng([seed, dim]).standard_normal(dim)
    return direction / np.linalg.norm(direction)


def mixture(
    n: int, n_test: int, dim: int, seed: int, separation: float = 0.6
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two Gaussian classes in ``dim`` dimensions, means +-separation/2 along a random unit
    direction, isotropic noise of total variance 0.25 (so norms do not grow with ``dim``),
    rows clipped to norm 1: (x (n, dim), y (n,), x_test, y_test)."""
    if dim < 1 or n < 2:
        raise InputError(f"need dim >= 1 and n >= 2, got dim={dim}, n={n}")
    rng = np.random.default_rng(seed)
    direction = class_direction(dim, seed)

    def draw(count: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 2, count)
        x = np.outer(y - 0.5, direction) * separation
        x += rng.standard_normal((count, dim)) * (0.5 / np.sqrt(dim))
        return clip_rows(x, 1.0), y

    x, y = draw(n)
    x_test, y_test = draw(n_test)
    return x, y, x_test, y_test


def synthetic_split(
    n: int,
    n_test: int,
    dim: int,
    forget: int,
    seed: int,
    out_of_distribution: bool = False,
    ood_norm: float = 20.0,
) -> Split:
    """A mixture split whose forget set is ``forget`` rows.

    In-distribution: a random subset of the mixture. Out-of-distribution: the forget rows are
    replaced by a tight far cluster (norm ``ood_norm``) on class 0's side of the class axis but
    labelled 1, so they pull an ERM model far from the retained solution.
    """
    x, y, x_test, y_test = mixture(n, n_test, dim, seed)
    rng = np.random.default_rng(seed + 1)
    idx = np.sort(rng.choice(n, size=forget, replace=False))
    if out_of_distribution and forget:
        center = -ood_norm * class_direction(dim, seed)
        spread = rng.standard_normal((forget, dim)) * (0.05 * ood_norm / np.sqrt(dim))
        x = x.copy()
        y = y.copy()
        x[idx] = center + spread
        y[idx] = 1
    return Split(x, y, x_test, y_test, idx, 2)


def digits_split(
    forget: int, seed: int = 0, test_fraction: float = 0.25, raw: bool = False
) -> Split:
    """sklearn digits: pixels * DIGITS_SCALE, rows clipped to norm DIGITS_FEATURE_NORM (``raw``:
    the 0..16 pixels as they are); a stratified test split and ``forget`` random training rows
    to forget (the same rows for a given seed either way)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.data if raw else clip_rows(digits.data * DIGITS_SCALE, DIGITS_FEATURE_NORM)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, digits.target, test_size=test_fraction, random_state=seed, stratify=digits.target
    )
    if not 0 <= forget < len(x_tr):
        raise InputError(f"forget must be in [0, {len(x_tr)}), got {forget}")
    rng = np.random.default_rng(seed + 7)
    idx = np.sort(rng.choice(len(x_tr), size=forget, replace=False))
    return Split(x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64), idx, 10)
