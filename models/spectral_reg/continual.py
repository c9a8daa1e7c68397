"""Continual learning over a long sequence of digits tasks, with a regulariser as a loss term.

Tasks (``ContinualConfig.task_kind``):

- "random-labels": a fixed set of ``samples`` digits gets fresh random labels (10 classes) per
  task; the network must memorise each new labelling. What is measured is trainability: the
  training accuracy reached at the end of each task's fixed step budget.
- "permuted": each task is the ten digit classes under a fresh pixel permutation; training
  accuracy and held-out accuracy (digits never trained on) are both measured.

After each task the exact sigma_max (torch.linalg.matrix_norm, ord 2) of every layer is logged.
One run is seeded and single-threaded; 50 tasks take seconds to tens of seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgekit.errors import InputError
from edgekit.models.spectral_reg.regularizer import (
    REGULARIZERS,
    make_regularizer,
    matrix_view,
    weighted_layers,
)

TASK_KINDS = ("random-labels", "permuted")
PIXELS, CLASSES = 64, 10
Progress = Callable[[float, str], None]


class ContinualMLP(nn.Module):
    """forward(pixels (B, 64) float32 in [0, 1]) -> logits (B, 10) float32."""

    def __init__(self, hidden: int = 128, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = PIXELS
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels)


@dataclass(frozen=True)
class ContinualConfig:
    """One continual run: the task stream, the network, the optimiser and the regulariser."""

    regularizer: str = "spectral"
    strength: float = 1e-3  # lambda: loss = task + strength * penalty (best spectral of the sweep)
    task_kind: str = "random-labels"
    tasks: int = 50
    samples: int = 128  # digits per task (random-labels) / training digits per task (permuted)
    steps: int = 240  # optimiser steps per task (60 passes over 128 digits in batches of 32)
    batch_size: int = 32
    lr: float = 3e-3
    hidden: int = 128
    depth: int = 2
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        if self.regularizer not in REGULARIZERS:
            raise InputError(f"regularizer must be one of {REGULARIZERS}, got {self.regularizer!r}")
        if self.task_kind not in TASK_KINDS:
            raise InputError(f"task_kind must be one of {TASK_KINDS}, got {self.task_kind!r}")
        if self.tasks < 1 or self.steps < 1 or self.samples < self.batch_size:
            raise InputError(
                f"need tasks >= 1, steps >= 1 and samples >= batch_size, got tasks={self.tasks}, "
                f"steps={self.steps}, samples={self.samples}, batch_size={self.batch_size}"
            )


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)


@dataclass(frozen=True)
class TaskData:
    """One task: train inputs (n, 64) / labels (n,), held-out inputs / labels (may be empty)."""

    x: torch.Tensor
    y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def task_stream(config: ContinualConfig) -> list[TaskData]:
    """The config's tasks, seeded; every task uses the same ``samples`` digits for training."""
    x, y = _digits()
    rng = np.random.default_rng(config.seed + 1000)
    order = rng.permutation(len(y))
    train_idx, test_idx = order[: config.samples], order[config.samples :]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    tasks = []
    for _ in range(config.tasks):
        if config.task_kind == "random-labels":
            labels = torch.from_numpy(rng.integers(0, CLASSES, size=config.samples))
            empty = torch.empty(0, PIXELS)
            tasks.append(TaskData(xt[train_idx], labels, empty, torch.empty(0, dtype=torch.int64)))
        else:
            perm = torch.from_numpy(rng.permutation(PIXELS))
            px = xt[:, perm]
            tasks.append(TaskData(px[train_idx], yt[train_idx], px[test_idx], yt[test_idx]))
    return tasks


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    if len(y) == 0:
        return float("nan")
    return float((model(x).argmax(dim=1) == y).float().mean())


@torch.no_grad()
def layer_sigmas(model: nn.Module) -> dict[str, float]:
    """Exact sigma_max of every Linear / Conv layer (matrix view), by torch.linalg."""
    return {
        name: float(torch.linalg.matrix_norm(matrix_view(m.weight), ord=2))
        for name, m in weighted_layers(model)
    }


@dataclass
class ContinualResult:
    """Per-task curves and the final model of one continual run."""

    config: ContinualConfig
    train_accuracy: list[float]  # end-of-task accuracy on the task's training data
    test_accuracy: list[float]  # end-of-task held-out accuracy (nan for random labels)
    first_epoch_accuracy: list[float]  # accuracy on the task's data after its first pass
    sigmas: list[dict[str, float]]  # per task: layer -> sigma_max at the end of the task
    init_sigmas: dict[str, float]  # layer -> sigma_max at initialisation
    seconds: float
    model: nn.Module


def run_continual(config: ContinualConfig, progress: Progress | None = None) -> ContinualResult:
    """Train one network through the whole task stream of ``config`` (Adam, kept across tasks)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        model = ContinualMLP(config.hidden, config.depth)
        init_sigmas = layer_sigmas(model)
        regularizer = make_regularizer(config.regularizer, model)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        generator = torch.Generator().manual_seed(config.seed)
        epoch_steps = config.samples // config.batch_size
        train_acc, test_acc, first_acc, sigmas = [], [], [], []
        started = time.perf_counter()
        for t, task in enumerate(task_stream(config)):
            model.train()
            for step in range(config.steps):
                if step % epoch_steps == 0:
                    order = torch.randperm(config.samples, generator=generator)
                if step == epoch_steps:
                    first_acc.append(_accuracy(model, task.x, task.y))
                batch = order[(step % epoch_steps) * config.batch_size :][: config.batch_size]
                loss = F.cross_entropy(model(task.x[batch]), task.y[batch])
                if config.regularizer != "none":
                    loss = loss + config.strength * regularizer.penalty()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            model.eval()
            if len(first_acc) <= t:
                first_acc.append(_accuracy(model, task.x, task.y))
            train_acc.append(_accuracy(model, task.x, task.y))
            test_acc.append(_accuracy(model, task.test_x, task.test_y))
            sigmas.append(layer_sigmas(model))
            if progress:
                progress(
                    (t + 1) / config.tasks,
                    f"{config.regularizer}: task {t + 1}/{config.tasks} acc {train_acc[-1]:.3f}",
                )
        seconds = time.perf_counter() - started
    finally:
        torch.set_num_threads(previous)
    return ContinualResult(
        config, train_acc, test_acc, first_acc, sigmas, init_sigmas, seconds, model.eval()
    )
