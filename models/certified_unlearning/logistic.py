"""L2-regularised softmax logistic regression: the strongly convex model certified unlearning needs.

Parameters ``w`` (K, d + 1) float64: one row per class, the last column is the bias (inputs are
augmented with a constant 1, so the bias is regularised like the weights). The objective on a
data set of n examples is

    F(w) = (1/n) sum_i CE(w x_i, y_i) + (lam / 2) ||w||_F^2

which is mu-strongly convex with mu = lam and L-smooth with L = max_i ||x_i||^2 / 2 + lam
(the softmax Hessian diag(p) - p p^T is at most I / 2: Boehning 1992). The per-example loss
gradient (p_i - e_{y_i}) x_i^T has Frobenius norm at most sqrt(2) ||x_i||, so G = sqrt(2) R
is its Lipschitz constant when every ||x_i|| <= R.

``fit_erm`` solves to a stated gradient-norm tolerance (the certificates count that residual);
``fit_trimmed`` runs gradient descent whose data gradient is the coordinate-wise trimmed mean of
the per-example gradients, the robust training step of the out-of-distribution method.
"""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError


def augment(x: np.ndarray) -> np.ndarray:
    """(n, d) features -> (n, d + 1) float64 with a trailing constant 1 (the bias input)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise InputError(f"features must be (n, d), got shape {x.shape}")
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)


def _check(w: np.ndarray, xa: np.ndarray, y: np.ndarray) -> None:
    if w.ndim != 2 or w.shape[1] != xa.shape[1]:
        raise InputError(f"weights {w.shape} do not match augmented features {xa.shape}")
    if y.shape != (len(xa),):
        raise InputError(f"labels must be ({len(xa)},), got {y.shape}")
    if len(y) and (y.min() < 0 or y.max() >= w.shape[0]):
        raise InputError(f"labels must be in [0, {w.shape[0]}), got [{y.min()}, {y.max()}]")


def probabilities(w: np.ndarray, xa: np.ndarray) -> np.ndarray:
    """Softmax probabilities (n, K) of augmented inputs ``xa`` (n, d + 1)."""
    z = xa @ w.T  # (n, K)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def cross_entropy(w: np.ndarray, xa: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy (no regulariser) of labels ``y`` (n,) under ``w``."""
    _check(w, xa, y)
    z = xa @ w.T  # (n, K)
    zmax = z.max(axis=1, keepdims=True)
    logsum = np.log(np.exp(z - zmax).sum(axis=1)) + zmax[:, 0]
    return float((logsum - z[np.arange(len(y)), y]).mean())


def objective(w: np.ndarray, xa: np.ndarray, y: np.ndarray, lam: float) -> float:
    """F(w) = mean cross-entropy + lam / 2 ||w||^2."""
    return cross_entropy(w, xa, y) + 0.5 * lam * float((w * w).sum())


def gradient(w: np.ndarray, xa: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """grad F(w), (K, d + 1)."""
    _check(w, xa, y)
    residual = probabilities(w, xa)  # (n, K)
    residual[np.arange(len(y)), y] -= 1.0
    return residual.T @ xa / len(y) + lam * w


def example_gradients(w: np.ndarray, xa: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example loss gradients, flattened: (n, K * (d + 1)) (no regulariser)."""
    _check(w, xa, y)
    residual = probabilities(w, xa)  # (n, K)
    residual[np.arange(len(y)), y] -= 1.0
    return (residual[:, :, None] * xa[:, None, :]).reshape(len(y), -1)


def hessian(w: np.ndarray, xa: np.ndarray, lam: float) -> np.ndarray:
    """Hessian of F, (K (d + 1), K (d + 1)) in the row-major order of ``w``."""
    p = probabilities(w, xa)  # (n, K)
    k, dim = w.shape
    curvature = p[:, :, None] * (np.eye(k)[None] - p[:, None, :])  # (n, K, K)
    h = np.einsum("nab,ni,nj->aibj", curvature, xa, xa, optimize=True) / len(xa)
    return h.reshape(k * dim, k * dim) + lam * np.eye(k * dim)


def smoothness(xa: np.ndarray, lam: float) -> float:
    """L = max_i ||x_i||^2 / 2 + lam for augmented inputs (n, d + 1)."""
    return float((xa * xa).sum(axis=1).max()) / 2.0 + lam


def lipschitz(xa: np.ndarray) -> float:
    """G = sqrt(2) max_i ||x_i||: bound on every per-example loss gradient norm."""
    return float(np.sqrt(2.0 * (xa * xa).sum(axis=1).max()))


def gd_steps(
    w: np.ndarray, xa: np.ndarray, y: np.ndarray, lam: float, steps: int, step: float | None = None
) -> np.ndarray:
    """``steps`` full-batch gradient steps on F from ``w`` with step size ``step`` (1/L default).

    With step 1/L each step contracts the distance to the minimiser by at least (1 - mu/L)
    (Nesterov 2004, Theorem 2.1.15). Returns the new (K, d + 1) weights.
    """
    if steps < 0:
        raise InputError(f"steps must be >= 0, got {steps}")
    step = 1.0 / smoothness(xa, lam) if step is None else step
    w = np.array(w, dtype=np.float64)
    for _ in range(steps):
        w -= step * gradient(w, xa, y, lam)
    return w


def fit_erm(
    xa: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    lam: float,
    tol: float = 1e-9,
    w0: np.ndarray | None = None,
) -> np.ndarray:
    """argmin F on (xa, y) to ||grad F|| <= ``tol`` (L-BFGS restarts, Newton polish).

    Raises InputError when ``lam`` <= 0 (no strong convexity, no certificate) and
    RuntimeError if the tolerance is not reached.
    """
    from scipy.optimize import minimize

    if lam <= 0:
        raise InputError(f"lam must be > 0 (strong convexity), got {lam}")
    shape = (n_classes, xa.shape[1])
    start = np.zeros(shape) if w0 is None else np.asarray(w0, dtype=np.float64)

    def fun(flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = flat.reshape(shape)
        return objective(w, xa, y, lam), gradient(w, xa, y, lam).ravel()

    w = start
    for _ in range(3):  # L-BFGS restarts: ill-conditioned data (far outliers) need several
        result = minimize(
            fun,
            w.ravel(),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": tol / 10, "ftol": 0.0, "maxiter": 20000, "maxcor": 30},
        )
        w = result.x.reshape(shape)
        if np.linalg.norm(gradient(w, xa, y, lam)) <= tol:
            return w
    for _ in range(20):  # Newton polish: L-BFGS can stall near 1e-9 on ill-conditioned data
        newton = np.linalg.solve(hessian(w, xa, lam), gradient(w, xa, y, lam).ravel())
        w = w - newton.reshape(shape)
        if np.linalg.norm(gradient(w, xa, y, lam)) <= tol:
            return w
    raise RuntimeError(
        f"ERM did not reach ||grad|| <= {tol} (now {np.linalg.norm(gradient(w, xa, y, lam)):.3g})"
    )


def trimmed_mean(values: np.ndarray, trim: int) -> np.ndarray:
    """Coordinate-wise trimmed mean of (n, P) values: per column drop the ``trim`` smallest and
    ``trim`` largest, average the n - 2 trim left -> (P,)."""
    n = len(values)
    if trim < 0 or 2 * trim >= n:
        raise InputError(f"trim must be in [0, {(n - 1) // 2}] for {n} values, got {trim}")
    if trim == 0:
        return values.mean(axis=0)
    ordered = np.sort(values, axis=0)
    return ordered[trim : n - trim].mean(axis=0)


def trimmed_gradient(
    w: np.ndarray, xa: np.ndarray, y: np.ndarray, lam: float, trim: int
) -> np.ndarray:
    """Trimmed mean of the per-example gradients + lam w, (K, d + 1)."""
    return trimmed_mean(example_gradients(w, xa, y), trim).reshape(w.shape) + lam * w


def fit_trimmed(
    xa: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    lam: float,
    trim: int,
    step: float,
    tol: float = 1e-6,
    max_steps: int = 20000,
    w0: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Robust training: GD with trimmed-mean gradients until ||trimmed_gradient|| <= ``tol``.

    Returns (weights (K, d + 1), steps taken); RuntimeError when ``max_steps`` is not enough.
    """
    w = np.zeros((n_classes, xa.shape[1])) if w0 is None else np.array(w0, dtype=np.float64)
    for t in range(max_steps):
        g = trimmed_gradient(w, xa, y, lam, trim)
        if np.linalg.norm(g) <= tol:
            return w, t
        w -= step * g
    raise RuntimeError(f"trimmed-mean GD did not reach ||g|| <= {tol} in {max_steps} steps")
