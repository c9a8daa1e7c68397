"""WLKS end to end on a subgraph task: WL histograms per level, kernel, validated SVM.

``fit_wlks(task, "combined")`` runs WL on k = D (global) and k = 0 (induced) once up to the
deepest depth tried, then selects WL depth, SVM cost and a_c in K = a_c K(D) + (1 - a_c) K(0)
on validation micro-F1; "k0" and "kD" use one level alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.wlks.svm import (
    DEPTHS,
    GLOBAL_WEIGHTS,
    KernelChoice,
    KernelSVM,
    OvRSVM,
    level_histograms,
    select,
)
from edgekit.models.wlks.tasks import SubgraphTask
from edgekit.models.wlks.wl import GLOBAL, LevelFeatures, WLFeaturizer, subgraph_histograms

KERNELS: dict[str, tuple[int, ...]] = {"k0": (0,), "kD": (GLOBAL,), "combined": (GLOBAL, 0)}


@dataclass
class WLKSResult:
    """A fitted WLKS model on one task: the chosen configuration, its SVM and the histograms."""

    task: SubgraphTask
    kernel: str
    choice: KernelChoice
    svm: OvRSVM
    levels: list[LevelFeatures]
    wl_seconds: float

    @property
    def seconds(self) -> float:
        """WL refinement + kernel + whole validation grid, in seconds."""
        return self.wl_seconds + self.choice.fit_seconds

    def histograms(self, index: np.ndarray) -> np.ndarray:
        """(len(index), F) float32 ``KernelSVM`` inputs of the task's subgraphs ``index``."""
        return level_histograms(self.levels, self.choice.depth, index)

    def featurizer(self) -> WLFeaturizer:
        """The fitted WL palettes (rounds 0..depth): histograms of subgraphs of any graph in the
        layout ``module()`` reads; on the task's own subgraphs equal to ``histograms``."""
        return WLFeaturizer.from_levels(self.levels, self.choice.depth)

    def module(self) -> KernelSVM:
        """The decision function as a torch module (eval mode): histograms -> scores."""
        support = [f.features(self.choice.depth)[self.task.train] for f in self.levels]
        return KernelSVM(support, self.choice.weights, self.svm).eval()


def fit_wlks(
    task: SubgraphTask, kernel: str = "combined", depths: tuple[int, ...] = DEPTHS
) -> WLKSResult:
    """Fit WLKS with ``kernel`` in KERNELS ("k0", "kD", "combined") on ``task``."""
    if kernel not in KERNELS:
        raise InputError(f"unknown WLKS kernel '{kernel}'; expected one of {', '.join(KERNELS)}")
    started = time.perf_counter()
    levels = [
        subgraph_histograms(task.graph, task.subgraphs, k, max(depths)) for k in KERNELS[kernel]
    ]
    wl_seconds = time.perf_counter() - started
    weights = [(a, 1.0 - a) for a in GLOBAL_WEIGHTS] if kernel == "combined" else [(1.0,)]
    choice, svm = select(
        levels, task.labels, (task.train, task.val, task.test), task.classes, weights, depths
    )
    return WLKSResult(task, kernel, choice, svm, levels, wl_seconds)
