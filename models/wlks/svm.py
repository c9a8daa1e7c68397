"""Precomputed-kernel SVMs over WLKS kernels, model selection on validation micro-F1, and the
deployable decision function as a torch module.

Multiclass is one-vs-rest: one ``sklearn.svm.SVC(kernel="precomputed")`` per class, so the
decision function of class c is sum_i W[i, c] K(x, x_i) + b[c] over the training subgraphs.
``KernelSVM`` folds the kernel itself in: it holds the (normalised) training histograms of each
level and computes K(x, .) = sum_l w_l <x_l, X_l> / (||x_l|| ||X_l||) from raw histograms.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.wlks.wl import LevelFeatures, combined_kernel, linear_kernel

DEPTHS = (1, 2, 3, 4)
COSTS = (0.1, 1.0, 10.0)
GLOBAL_WEIGHTS = (0.25, 0.5, 0.75)  # a_c in K = a_c K(D) + (1 - a_c) K(0) for the combined kernel


def micro_f1(pred: np.ndarray, labels: np.ndarray) -> float:
    """Micro-averaged F1 of single-label predictions (equal to accuracy)."""
    return float((np.asarray(pred) == np.asarray(labels)).mean())


@dataclass
class OvRSVM:
    """One-vs-rest SVCs on a precomputed kernel: ``dual`` (n_train, C), ``bias`` (C,)."""

    dual: np.ndarray
    bias: np.ndarray

    @classmethod
    def fit(cls, gram: np.ndarray, labels: np.ndarray, classes: int, cost: float) -> OvRSVM:
        """Fit on the (n, n) training kernel and (n,) int labels in 0..classes-1."""
        from sklearn.svm import SVC

        if gram.shape != (len(labels), len(labels)):
            raise InputError(f"gram must be ({len(labels)}, {len(labels)}), got {gram.shape}")
        dual = np.zeros((len(labels), classes))
        bias = np.full(classes, -1.0)  # a class absent from training never wins
        for c in range(classes):
            target = labels == c
            if target.all() or not target.any():
                continue
            svc = SVC(kernel="precomputed", C=cost).fit(gram, target)
            dual[svc.support_, c] = svc.dual_coef_[0]
            bias[c] = svc.intercept_[0]
        return cls(dual, bias)

    def decision(self, rows: np.ndarray) -> np.ndarray:
        """(B, C) scores from kernel rows (B, n_train) against the training subgraphs."""
        return rows @ self.dual + self.bias

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return self.decision(rows).argmax(axis=1)


@dataclass
class KernelChoice:
    """A WLKS configuration: levels used (k values), their weights, WL depth and SVM cost."""

    levels: tuple[int, ...]
    weights: tuple[float, ...]
    depth: int
    cost: float
    val_f1: float = 0.0
    test_f1: float = 0.0
    fit_seconds: float = 0.0
    grid: list[dict[str, Any]] = field(default_factory=list)


def _grams(
    levels: list[LevelFeatures], depth: int, rows: np.ndarray, cols: np.ndarray
) -> list[np.ndarray]:
    return [linear_kernel(f.features(depth)[rows], f.features(depth)[cols]) for f in levels]


def select(
    levels: list[LevelFeatures],
    labels: np.ndarray,
    split: tuple[np.ndarray, np.ndarray, np.ndarray],
    classes: int,
    weight_grid: list[tuple[float, ...]],
    depths: tuple[int, ...] = DEPTHS,
    costs: tuple[float, ...] = COSTS,
) -> tuple[KernelChoice, OvRSVM]:
    """Grid over WL depth x SVM cost x kernel weights, picked on validation micro-F1 (ties:
    the first, i.e. the shallowest); returns the choice (with its test micro-F1) and its SVM."""
    train, val, test = split
    started = time.perf_counter()
    best: tuple[float, KernelChoice, OvRSVM] | None = None
    grid = []
    for depth in depths:
        tr = _grams(levels, depth, train, train)
        va = _grams(levels, depth, val, train)
        for weights in weight_grid:
            k_tr, k_va = combined_kernel(tr, list(weights)), combined_kernel(va, list(weights))
            for cost in costs:
                svm = OvRSVM.fit(k_tr, labels[train], classes, cost)
                f1 = micro_f1(svm.predict(k_va), labels[val])
                grid.append({"depth": depth, "weights": list(weights), "cost": cost, "val_f1": f1})
                if best is None or f1 > best[0]:
                    choice = KernelChoice(tuple(f.k for f in levels), weights, depth, cost, f1)
                    best = (f1, choice, svm)
    assert best is not None
    _, choice, svm = best
    choice.fit_seconds = time.perf_counter() - started
    k_te = combined_kernel(_grams(levels, choice.depth, test, train), list(choice.weights))
    choice.test_f1 = micro_f1(svm.predict(k_te), labels[test])
    choice.grid = grid
    return choice, svm


class KernelSVM(nn.Module):
    """Raw WL histograms -> one-vs-rest SVM scores, the kernel computed inside.

    Input ``histograms`` (B, F) float32: the levels' histograms (rounds 0..depth) concatenated
    in ``levels`` order, F = sum_l F_l. Output ``scores`` (B, C) float32; argmax is the class.
    """

    def __init__(self, support: list[np.ndarray], weights: tuple[float, ...], svm: OvRSVM) -> None:
        super().__init__()
        keep = np.flatnonzero(np.abs(svm.dual).sum(axis=1) > 0)  # support vectors only
        self.sizes = [int(s.shape[1]) for s in support]
        units = [
            s[keep] / np.maximum(np.linalg.norm(s[keep], axis=1, keepdims=True), 1e-12)
            for s in support
        ]
        self.register_buffer(
            "units", torch.tensor(np.concatenate(units, axis=1), dtype=torch.float32)
        )
        self.register_buffer("level_weights", torch.tensor(weights, dtype=torch.float32))
        self.register_buffer("dual", torch.tensor(svm.dual[keep], dtype=torch.float32))
        self.register_buffer("bias", torch.tensor(svm.bias, dtype=torch.float32))

    def forward(self, histograms: torch.Tensor) -> torch.Tensor:
        rows = torch.zeros(histograms.shape[0], self.units.shape[0], dtype=histograms.dtype)
        start = 0
        for level, size in enumerate(self.sizes):
            x = histograms[:, start : start + size]  # (B, F_l)
            x = x / torch.clamp(torch.linalg.vector_norm(x, dim=1, keepdim=True), min=1e-12)
            rows = rows + self.level_weights[level] * (x @ self.units[:, start : start + size].T)
            start += size
        return rows @ self.dual + self.bias  # (B, C)


def level_histograms(levels: list[LevelFeatures], depth: int, index: np.ndarray) -> np.ndarray:
    """(len(index), F) float32 concatenated histograms, the ``KernelSVM`` input layout."""
    return np.concatenate([f.features(depth)[index] for f in levels], axis=1).astype(np.float32)
