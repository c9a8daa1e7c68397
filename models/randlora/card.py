"""randlora card: a digits MLP adapted with RandLoRA to permuted pixels, merged for export.

One graph, "classifier": pixels (B, 64) float32 in [0, 1] (an 8x8 digit / 16, row-major, then
permuted by the task's fixed permutation) -> logits (B, 10) float32. The graph is the merged
model: every RandLoRA update is folded into its Linear weight (``merge_adapters``), so the
deployed network is the plain pretrained architecture and costs nothing extra.

Card options are ``AdaptConfig`` fields (method, rank, kind, target, lr, steps, seed); the
default adapts every Linear layer with dense bases of rank 8. ``edgekit eval randlora`` runs the
LoRA vs RandLoRA vs full fine-tuning study (``experiment.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.randlora import data
from edgekit.models.randlora.train import AdaptConfig, DeployResult, DigitMLP, train_cached
from edgekit.numeric import softmax

GRAPH = "classifier"
GOLDEN_ROWS = (0, 1, 2, 3)  # the first four test digits of the permuted task


class RandLoRACard(ModelCard):
    """DigitMLP pretrained on digits, RandLoRA-adapted to permuted digits, merged."""

    name: ClassVar[str] = "randlora"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "parameter-efficient-fine-tuning"
    architecture: ClassVar[str] = "mlp"
    summary: ClassVar[str] = (
        "RandLoRA (full-rank PEFT from shared random bases) adapting a digits MLP to permuted "
        "pixels; merged into the weights for export"
    )
    primary_metric: ClassVar[str | None] = "top1_accuracy"
    int8_budget: ClassVar[float] = 0.02
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
        fields = AdaptConfig.__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise InputError(f"randlora options {unknown} are not AdaptConfig fields")
        self._result: DeployResult | None = None
        self._model: DigitMLP | None = None

    def adapt_config(self) -> AdaptConfig:
        """AdaptConfig defaults overridden by the card options."""
        return AdaptConfig(**self.options)

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> DeployResult:
        """Adapt and merge (a few seconds; the pretrained MLP first when not cached), or load."""
        if self._result is None:
            self._result = train_cached(self.adapt_config(), progress)
        return self._result

    def model(self) -> DigitMLP:
        """The merged adapted MLP (eval mode, plain Linear layers)."""
        if self._model is None:
            self._model = self.train().build()
        return self._model

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
    def _task(self) -> data.Task:
        return data.permuted_task()

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four permuted test digits: pixels (4, 64) float32 in [0, 1]."""
        x = self._task().test.x[list(GOLDEN_ROWS)]
        return {GRAPH: {"pixels": x.numpy().astype(np.float32)}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` single-digit feeds (1, 64) from the permuted training split."""
        x = self._task().train.x[:limit].numpy().astype(np.float32)
        return {GRAPH: [{"pixels": row[None]} for row in x]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "input": "8x8 digit image, values 0..16 divided by 16, flattened row-major (64,)",
            "permutation": f"pixels reordered by torch.randperm(64) under seed "
            f"{data.PERMUTATION_SEED} (the adaptation task's fixed permutation)",
            "adapter": "RandLoRA update merged into the Linear weights (no adapter at run time)",
            "output": {"name": "logits", "postprocess": "softmax, argmax over labels"},
        }

    def labels(self) -> list[str]:
        return [str(c) for c in data.CLASSES]

    # ---- measuring -------------------------------------------------------------------------
    def _logits(self, runner: Runner, x: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"pixels": x})["logits"], dtype=np.float32)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Top-1 accuracy on the permuted test digits (25 % of digits, never trained on)."""
        test = self._task().test
        pred = self._logits(runners[GRAPH], test.x.numpy()).argmax(axis=1)
        return {"top1_accuracy": float((pred == test.y.numpy()).mean())}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 agreement and max |softmax difference| on the permuted test digits."""
        x = self._task().test.x.numpy()
        ref, cand = self._logits(reference[GRAPH], x), self._logits(candidate[GRAPH], x)
        return {
            "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
            "max_prob_abs_error": float(np.abs(softmax(ref) - softmax(cand)).max()),
        }
