"""poison-audit card: the audited digits MLP after an unlearning method, with its poison score.

One graph, "classifier": pixels (B, 64) float32, sklearn digits' 0..16 values, row-major 8x8 ->
logits (B, 10) float32 (DigitsMLP: /16 inside, 64-256-256-10 ReLU).

``train`` poisons ``poison_count`` training digits (secret N(0, eps^2) noise, seeded), trains
the MLP, and applies ``method`` ("gd", "noisy-gd", "grad-ascent", "last-layer" or "retrain",
``unlearn_epochs``) to forget the poisoned rows; the weights are cached under
``cache_dir("poison-audit")``. ``evaluate`` measures test accuracy and the Gaussian unlearning
score through any runner (input gradients by finite differences on the artifact), so an exported
bundle is audited as it will run. ``edgekit eval poison-audit`` runs the whole study.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.poison_audit import audit, data, methods
from edgekit.models.poison_audit.poison import (
    finite_difference_gradients,
    gaussian_poison,
    score_from_gradients,
)
from edgekit.numeric import softmax

GRAPH = "classifier"
RECIPE_VERSION = 2  # 2: float64 input gradients in the audit


@dataclass(frozen=True)
class AuditConfig:
    """The card's recipe (card options of the same names override)."""

    method: str = "gd"
    unlearn_epochs: int = 20
    poison_count: int = 200
    eps: float = 0.3
    train_epochs: int = 60
    seed: int = 0

    def unlearner(self) -> methods.Unlearn:
        makers: dict[str, Callable[[], methods.Unlearn]] = {
            "gd": lambda: methods.gd(self.unlearn_epochs),
            "noisy-gd": lambda: methods.noisy_gd(self.unlearn_epochs),
            "grad-ascent": lambda: methods.gradient_ascent(self.unlearn_epochs),
            "last-layer": lambda: methods.last_layer(self.unlearn_epochs),
            "retrain": lambda: methods.retrain(methods.TrainConfig(epochs=self.train_epochs)),
        }
        if self.method not in makers:
            raise InputError(f"unknown unlearning method '{self.method}'; known: {sorted(makers)}")
        return makers[self.method]()


@dataclass
class AuditResult:
    """The audited model's weights and what the audit measured in torch."""

    state: dict[str, torch.Tensor]
    score_before: float
    score_after: float
    z_after: float
    heldout_accuracy: float
    seconds: float
    cached: bool
    path: str


class PoisonAuditCard(ModelCard):
    """A digits MLP trained on Gaussian-poisoned data, unlearned, and audited."""

    name: ClassVar[str] = "poison-audit"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "unlearning-audit"
    summary: ClassVar[str] = (
        "poisoning-unlearning audit: Gaussian poisoning + Gaussian unlearning score for any "
        "model and unlearning method (GD, noisy GD, gradient ascent, last layer vs retrain)"
    )
    architecture: ClassVar[str] = "mlp"
    primary_metric: ClassVar[str | None] = "test_accuracy"
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=5e-2, rtol=2e-2),
        "int8": Tolerance(atol=1.0, rtol=0.1),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "top1_agreement": 0.99,
        "max_prob_abs_error": 0.05,
        "poison_score_abs_error": 0.05,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        fields = AuditConfig.__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise InputError(f"poison-audit options {unknown} are not {sorted(fields)}")
        self.config = AuditConfig(**options)
        self.config.unlearner()  # fail early on an unknown method
        self._result: AuditResult | None = None
        self._model: methods.DigitsMLP | None = None

    # ---- training --------------------------------------------------------------------------
    def _path(self) -> Path:
        from edgekit.cache import cache_dir

        key = json.dumps({"v": RECIPE_VERSION, **asdict(self.config)}, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return cache_dir("poison-audit") / f"{self.config.method}-{digest}.pt"

    def train(self, progress: Callable[[float, str], None] | None = None) -> AuditResult:
        """Poison, train, unlearn, audit (about 10 s on one thread) or load the cached result."""
        if self._result is not None:
            return self._result
        path = self._path()
        if path.exists():
            saved = torch.load(path, map_location="cpu", weights_only=True)
            self._result = AuditResult(**saved, cached=True, path=str(path))
            return self._result
        from edgekit.cache import atomic_write_with

        cfg, started = self.config, time.perf_counter()
        train_data, test_data = data.digits(cfg.seed)
        train_config = methods.TrainConfig(epochs=cfg.train_epochs, seed=cfg.seed)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            report = audit.run_audit(
                lambda d: methods.train_new(d, train_config), {cfg.method: cfg.unlearner()},
                train_data, test_data, cfg.poison_count, cfg.eps, cfg.seed,
            )  # fmt: skip
        finally:
            torch.set_num_threads(threads)
        after = report.methods[0]
        fields = {
            "state": report.models[cfg.method].model.state_dict(),
            "score_before": report.poisoned.score.score,
            "score_after": after.score.score,
            "z_after": after.score.z,
            "heldout_accuracy": after.test_accuracy,
            "seconds": time.perf_counter() - started,
        }
        atomic_write_with(path, lambda f: torch.save(fields, f))
        self._result = AuditResult(**fields, cached=False, path=str(path))
        return self._result

    def model(self) -> methods.DigitsMLP:
        """The audited DigitsMLP (pixels in), eval mode."""
        if self._model is None:
            model = methods.DigitsMLP(seed=self.config.seed)
            model.load_state_dict(self.train().state)
            self._model = model.eval()
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
    def _pixels(self, split: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = data.digits(self.config.seed)[split]
        return (x * data.PIXEL_SCALE).astype(np.float32), y

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four held-out digits: pixels (4, 64) float32 in 0..16."""
        return {GRAPH: {"pixels": self._pixels(1)[0][:4]}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` single training digits (clean), (1, 64) float32."""
        return {GRAPH: [{"pixels": row[None]} for row in self._pixels(0)[0][:limit]]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "input": "sklearn digits layout: 8x8 grey, row-major, values 0..16 as float32",
            "inside_graph": "pixels / 16, then the MLP",
            "output": {"name": "logits", "postprocess": "softmax, argmax over digits 0-9"},
            "audit": asdict(self.config),
        }

    def labels(self) -> list[str]:
        return [str(i) for i in range(10)]

    # ---- measuring -------------------------------------------------------------------------
    def _logits(self, runner: Runner, pixels: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"pixels": pixels})["logits"], dtype=np.float64)

    def poison_score(self, runner: Runner) -> float:
        """The Gaussian unlearning score of the model behind ``runner`` on the card's poisoned
        rows (the same seeded secret as training); gradients by finite differences in pixels."""
        cfg = self.config
        x, y = data.digits(cfg.seed)[0]
        _, poison = gaussian_poison(x, cfg.poison_count, cfg.eps, cfg.seed)
        pixels = x[poison.indices] * data.PIXEL_SCALE
        grads = finite_difference_gradients(
            lambda batch: self._logits(runner, batch), pixels, y[poison.indices], h=1e-2
        )
        return score_from_gradients(grads, poison).score  # direction only: pixel scale is moot

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Test accuracy on the 450 held-out digits and the poison score through the runner."""
        pixels, labels = self._pixels(1)
        logits = self._logits(runners[GRAPH], pixels)
        return {
            "test_accuracy": float((logits.argmax(axis=1) == labels).mean()),
            "poison_score": self.poison_score(runners[GRAPH]),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 agreement and max |softmax difference| on held-out digits; |score difference|."""
        pixels, _ = self._pixels(1)
        ref = self._logits(reference[GRAPH], pixels)
        cand = self._logits(candidate[GRAPH], pixels)
        return {
            "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
            "max_prob_abs_error": float(np.abs(softmax(ref) - softmax(cand)).max()),
            "poison_score_abs_error": abs(
                self.poison_score(reference[GRAPH]) - self.poison_score(candidate[GRAPH])
            ),
        }
