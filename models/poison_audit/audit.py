"""The audit any user can run on their model, training routine and unlearning method(s).

``run_audit`` poisons a share of the training inputs with secret Gaussian noise, trains with the
user's routine, then asks each unlearning method to forget exactly the poisoned rows and
measures the Gaussian unlearning score before and after, with test accuracy and time. Retraining
on the retain set (a method named "retrain", or the user's routine) is the reference: a method
"removes" the poison when its score is indistinguishable from the null (|z| < z_removed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.poison_audit.methods import Data, Unlearn
from edgekit.models.poison_audit.poison import (
    GaussianPoison,
    PoisonScore,
    gaussian_poison,
    gaussian_unlearning_score,
)

Z_REMOVED = 2.58  # two-sided 1 % under the null N(0, 1)


@dataclass
class MethodResult:
    """One unlearning method's outcome on the poisoned rows."""

    name: str
    score: PoisonScore
    test_accuracy: float
    seconds: float
    removed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.name,
            **self.score.to_json(),
            "test_accuracy": self.test_accuracy,
            "seconds": self.seconds,
            "removed": self.removed,
        }


@dataclass
class AuditReport:
    """Scores of the poisoned model, of each method, and the models (name -> module)."""

    poison: GaussianPoison
    poisoned: MethodResult
    methods: list[MethodResult]
    models: dict[str, nn.Module] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "poison_count": len(self.poison.indices),
            "poison_eps": self.poison.eps,
            "poisoned_model": self.poisoned.to_json(),
            "methods": [m.to_json() for m in self.methods],
        }


def accuracy(model: nn.Module, data: Data) -> float:
    """Top-1 accuracy of a torch classifier on (x (N, D), y (N,))."""
    with torch.inference_mode():
        logits = model(torch.as_tensor(data[0], dtype=torch.float32))
    return float((logits.argmax(dim=1).numpy() == np.asarray(data[1])).mean())


def run_audit(
    train: Callable[[Data], nn.Module],
    methods: Mapping[str, Unlearn],
    train_data: Data,
    test_data: Data,
    poison_count: int,
    eps: float,
    seed: int = 0,
) -> AuditReport:
    """Poison, train, unlearn the poisoned rows with every method, score each model.

    ``train(data) -> model`` trains a fresh classifier (logits (B, C) from inputs (B, D));
    ``methods``: name -> ``unlearn(model, retain, forget) -> model``. Inputs are the space the
    poison is added in (the model's input). Returns the AuditReport.
    """
    if not methods:
        raise InputError("run_audit needs at least one unlearning method")
    x, y = np.asarray(train_data[0], dtype=np.float32), np.asarray(train_data[1])
    poisoned_x, poison = gaussian_poison(x, poison_count, eps, seed)
    started = time.perf_counter()
    model = train((poisoned_x, y))
    elapsed = time.perf_counter() - started

    def measure(name: str, candidate: nn.Module, seconds: float) -> MethodResult:
        score = gaussian_unlearning_score(candidate, x, y, poison)
        return MethodResult(
            name, score, accuracy(candidate, test_data), seconds, abs(score.z) < Z_REMOVED
        )

    keep = np.setdiff1d(np.arange(len(x)), poison.indices)
    retain = (poisoned_x[keep], y[keep])
    forget = (poisoned_x[poison.indices], y[poison.indices])
    results, models = [], {"poisoned": model}
    for name, unlearn in methods.items():
        started = time.perf_counter()
        candidate = unlearn(model, retain, forget)
        results.append(measure(name, candidate, time.perf_counter() - started))
        models[name] = candidate
    return AuditReport(poison, measure("poisoned", model, elapsed), results, models)
