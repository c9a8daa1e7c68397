"""spectral-reg card: the MLP at the end of 50 continual tasks trained with spectral regularisation.

One graph, "classifier": pixels (B, 64) float32 in [0, 1] (an 8x8 digit / 16, row-major) ->
logits (B, 10) float32, the network's answer for the last task of the stream (a random
labelling of 128 digits, see continual.py). Its metric is how well it learned that last task,
measured on the task's own training digits: the trainability that spectral regularisation is
there to keep (random labels leave nothing to hold out). A "permuted" stream adds
``last_task_heldout_accuracy`` on digits no task trained on.

Card options are ``ContinualConfig`` fields (regularizer, strength, tasks, steps, ...); the
default is the study's best spectral run (lambda 1e-3). ``edgekit eval spectral-reg`` runs the study
(none / L2 / L2-to-init / spectral, ``experiment.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.spectral_reg.cache import continual_cached, run_path
from edgekit.models.spectral_reg.continual import (
    ContinualConfig,
    ContinualMLP,
    ContinualResult,
    TaskData,
    task_stream,
)
from edgekit.numeric import softmax

GRAPH = "classifier"


@dataclass
class TrainSummary:
    """What ``edgekit train spectral-reg`` reports: last-task accuracies, seconds, cache state.

    ``last_task_train_accuracy`` is measured on the last task's training digits (what the
    stream tests: can the network still fit a new task). ``heldout_accuracy`` is the last task's
    accuracy on digits the run never trained on, for "permuted" streams; ``None`` for
    "random-labels" streams, whose labels carry nothing a held-out digit could be scored on.
    """

    last_task_train_accuracy: float
    heldout_accuracy: float | None
    seconds: float
    cached: bool
    path: Path
    result: ContinualResult


class SpectralRegCard(ModelCard):
    """ContinualMLP after a 50-task random-label stream under spectral regularisation."""

    name: ClassVar[str] = "spectral-reg"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "continual-learning"
    architecture: ClassVar[str] = "mlp"
    summary: ClassVar[str] = (
        "spectral regularisation (sigma_max of every layer pushed to 1, power iteration) "
        "keeping an MLP trainable over 50 sequential random-label digits tasks"
    )
    primary_metric: ClassVar[str | None] = "last_task_accuracy"
    int8_budget: ClassVar[float] = 0.03
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.5, rtol=0.1),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "top1_agreement": 0.99,
        "max_prob_abs_error": 0.05,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        unknown = sorted(set(options) - set(ContinualConfig.__dataclass_fields__))
        if unknown:
            raise InputError(f"spectral-reg options {unknown} are not ContinualConfig fields")
        self._result: ContinualResult | None = None
        self._last: TaskData | None = None

    def continual_config(self) -> ContinualConfig:
        """ContinualConfig defaults (the spectral run) overridden by the card options."""
        return ContinualConfig(**self.options)

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> TrainSummary:
        """Run the continual stream (about a minute on one thread) or load the cached run."""
        config = self.continual_config()
        path = run_path(config)
        cached = path.is_file()
        if self._result is None:
            self._result = continual_cached(config, progress)
        heldout = self._result.test_accuracy[-1]
        return TrainSummary(
            self._result.train_accuracy[-1],
            None if math.isnan(heldout) else heldout,
            self._result.seconds,
            cached,
            path,
            self._result,
        )

    def model(self) -> ContinualMLP:
        """The final continual model (eval mode)."""
        return self.train().result.model  # type: ignore[return-value]

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "classifier": pixels (B, 64) float32 -> logits (B, 10) float32."""
        example = torch.from_numpy(self.golden_inputs()[GRAPH]["pixels"][:2].copy())
        return [
            GraphSpec(
                name=GRAPH,
                module=self.model(),
                example_inputs={"pixels": example},
                output_names=["logits"],
                dynamic_axes={"pixels": {0: "batch"}, "logits": {0: "batch"}},
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def last_task(self) -> TaskData:
        """The stream's last task (the one the deployed model serves)."""
        if self._last is None:
            self._last = task_stream(self.continual_config())[-1]
        return self._last

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four digits of the last task: pixels (4, 64) float32 in [0, 1]."""
        return {GRAPH: {"pixels": self.last_task().x[:4].numpy().astype(np.float32)}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` single-digit feeds (1, 64) of the last task's digits."""
        x = self.last_task().x[:limit].numpy().astype(np.float32)
        return {GRAPH: [{"pixels": row[None]} for row in x]}

    def preprocessing(self) -> dict[str, Any]:
        config = self.continual_config()
        return {
            "input": "8x8 digit image, values 0..16 divided by 16, flattened row-major (64,)",
            "task": f"task {config.tasks} of a {config.task_kind} stream (seed {config.seed})",
            "training": f"{config.regularizer} regularisation, lambda {config.strength:g}",
            "output": {"name": "logits", "postprocess": "softmax, argmax over labels"},
        }

    def labels(self) -> list[str]:
        return [str(c) for c in range(10)]

    # ---- measuring -------------------------------------------------------------------------
    def _logits(self, runner: Runner, x: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"pixels": x})["logits"], dtype=np.float32)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Accuracy on the last task's training digits with its labels (what continual training
        reached) and, when the stream holds digits out ("permuted"), on those."""
        task = self.last_task()
        pred = self._logits(runners[GRAPH], task.x.numpy()).argmax(axis=1)
        metrics = {"last_task_accuracy": float((pred == task.y.numpy()).mean())}
        if len(task.test_y):
            held = self._logits(runners[GRAPH], task.test_x.numpy()).argmax(axis=1)
            metrics["last_task_heldout_accuracy"] = float((held == task.test_y.numpy()).mean())
        return metrics

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 agreement and max |softmax difference| on the last task's digits."""
        x = self.last_task().x.numpy()
        ref, cand = self._logits(reference[GRAPH], x), self._logits(candidate[GRAPH], x)
        return {
            "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
            "max_prob_abs_error": float(np.abs(softmax(ref) - softmax(cand)).max()),
        }
