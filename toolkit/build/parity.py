"""Tensor parity: elementwise tolerance plus the error distribution (quantiles), per output."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgekit.card import Tolerance


def tensor_parity(
    reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], tol: Tolerance
) -> dict[str, dict[str, Any]]:
    """Compare every reference output with the candidate's output of the same name.

    Returns per output: ``passed`` (|c - r| <= atol + rtol * |r| everywhere), ``max_abs``,
    ``mean_abs``, quantiles ``p50_abs``/``p90_abs``/``p99_abs`` of |c - r|, ``max_rel``,
    ``violations`` (count of elements outside tolerance), ``cosine`` (flattened), and the
    tolerance used. A missing output or a shape mismatch is a failed entry with a ``reason``.
    """
    report: dict[str, dict[str, Any]] = {}
    for name, ref in reference.items():
        if name not in candidate:
            report[name] = {"passed": False, "reason": f"candidate has no output '{name}'"}
            continue
        r = np.asarray(ref, dtype=np.float64)
        c = np.asarray(candidate[name], dtype=np.float64)
        if r.shape != c.shape:
            report[name] = {
                "passed": False,
                "reason": f"shape {list(c.shape)} differs from reference {list(r.shape)}",
            }
            continue
        diff = np.abs(c - r)
        limit = tol.atol + tol.rtol * np.abs(r)
        violations = int(np.count_nonzero(diff > limit)) + int(np.count_nonzero(~np.isfinite(c)))
        denom = np.linalg.norm(r.ravel()) * np.linalg.norm(c.ravel())
        flat = diff.ravel() if diff.size else np.zeros(1)
        report[name] = {
            "passed": violations == 0,
            "max_abs": float(flat.max()),
            "mean_abs": float(flat.mean()),
            "p50_abs": float(np.quantile(flat, 0.5)),
            "p90_abs": float(np.quantile(flat, 0.9)),
            "p99_abs": float(np.quantile(flat, 0.99)),
            "max_rel": float((diff / np.maximum(np.abs(r), 1e-12)).max()) if diff.size else 0.0,
            "violations": violations,
            "elements": int(diff.size),
            "cosine": float(np.dot(r.ravel(), c.ravel()) / denom) if denom > 0 else 1.0,
            "atol": tol.atol,
            "rtol": tol.rtol,
        }
    return report
