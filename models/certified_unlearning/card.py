"""certified-unlearning card: a digits classifier after certified unlearning of a forget set.

One graph, "classifier": pixels (B, 64) float32, sklearn digits' 0..16 values, row-major 8x8 ->
logits (B, 10) float32. Inside the graph: pixels * DIGITS_SCALE, rows clipped to norm 1 (the
bound the certificate assumes), then the released linear layer.

The released weights are: L2-regularised softmax regression (ERM) on the training split, then
``unlearn_steps`` GD steps on the retain set (training split minus ``forget`` random rows),
then Gaussian noise calibrated to the (q, eps) Renyi budget (certify.py). Seconds on one core.

The noise is drawn from OS entropy (``noise_seed=None``, the default), so it cannot be
regenerated and subtracted. ``noise_seed=N`` (tests and reproducible research runs only) warns
and is written into the bundle's ``preprocessing.certificate`` with the warning that the
certificate does not hold for that release. Training (ERM, the unlearning steps) is
deterministic given the config; only the noise is random. The released weights (never the
noise or the noiseless weights) are cached under ``cache_dir("certified-unlearning")``, keyed by
the config and ``RECIPE_VERSION`` and named with a digest of the weights, so every card built
from the same recipe on this machine (export, verify) serves the same release (fresh noise per
export of the same noiseless weights would let anyone average the releases); a bundle records
that name and verifying it against another release fails loudly. ``edgekit eval
certified-unlearning`` runs the synthetic study and the membership audit (experiment.py,
audit.py).
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from edgekit.cache import atomic_write_bytes, cache_dir, recipe_key
from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.models.certified_unlearning import certify, data, logistic
from edgekit.numeric import softmax

GRAPH = "classifier"


class LinearClassifier(nn.Module):
    """forward(pixels (B, 64) float32 in 0..16) -> logits (B, K) float32."""

    def __init__(self, weights: np.ndarray, scale: float, max_norm: float) -> None:
        super().__init__()
        w = torch.as_tensor(weights, dtype=torch.float32)  # (K, d + 1), bias last
        self.linear = nn.Linear(w.shape[1] - 1, w.shape[0])
        with torch.no_grad():
            self.linear.weight.copy_(w[:, :-1])
            self.linear.bias.copy_(w[:, -1])
        self.scale, self.max_norm = scale, max_norm

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels * self.scale  # (B, 64)
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(1e-12)  # (B, 1)
        return self.linear(x * torch.clamp(self.max_norm / norm, max=1.0))  # (B, K)


@dataclass
class UnlearnResult:
    """The released model and its certificate."""

    weights: np.ndarray  # (10, 65) released (noisy) weights
    sigma: float
    steps: int
    distance_bound: float
    heldout_accuracy: float
    retrain_accuracy: float
    seconds: float
    cached: bool = False
    path: Path | None = None  # the cached release, when it came from / went to the cache


RECIPE_VERSION = 1  # bump when what the release does changes (data, fit, unlearning, noise)


@dataclass(frozen=True)
class UnlearnConfig:
    """The card's recipe (card options of the same names override)."""

    forget: int = 20
    lam: float = 0.01
    unlearn_steps: int = 600
    q: float = 2.0
    eps: float = 1.0
    seed: int = 0  # the data split: train / test rows and which rows are forgotten
    noise_seed: int | None = None  # None: release noise from OS entropy (seed only for tests)


_RELEASE_FIELDS = ("weights", "sigma", "steps", "distance_bound", "heldout_accuracy",
                   "retrain_accuracy", "seconds")  # fmt: skip


def release(config: UnlearnConfig) -> UnlearnResult:
    """ERM on the digits training split, unlearn the forget rows, add the noise (~1 s).

    The noise comes from ``certify.release_rng(config.noise_seed)``: a fresh OS-entropy draw
    on every call unless ``noise_seed`` is set. Nothing is cached here.
    """
    started = time.perf_counter()
    rng = certify.release_rng(config.noise_seed)
    split = data.digits_split(config.forget, config.seed)
    xa, keep = logistic.augment(split.x), split.retain
    tol = 1e-8
    trained = logistic.fit_erm(xa, split.y, split.n_classes, config.lam, tol)
    lipschitz = float(np.sqrt(2.0 * (data.DIGITS_FEATURE_NORM**2 + 1.0)))
    distance0 = certify.erm_distance_bound(config.forget, len(xa), lipschitz, config.lam, tol)
    released = certify.unlearn(
        trained, xa[keep], split.y[keep], config.lam, distance0, config.unlearn_steps,
        certify.RenyiBudget(config.q, config.eps), rng,
    )  # fmt: skip
    retrained = logistic.fit_erm(xa[keep], split.y[keep], split.n_classes, config.lam, tol)
    xt = logistic.augment(split.x_test)

    def accuracy(w: np.ndarray) -> float:
        return float((logistic.probabilities(w, xt).argmax(axis=1) == split.y_test).mean())

    return UnlearnResult(
        released.weights, released.sigma, released.steps, released.distance_bound,
        accuracy(released.weights), accuracy(retrained), time.perf_counter() - started,
    )  # fmt: skip


def release_key(config: UnlearnConfig) -> str:
    """``recipe_key`` over "certified-unlearning", ``RECIPE_VERSION`` and the config (16 hex)."""
    return recipe_key("certified-unlearning", RECIPE_VERSION, config)


def _load_release(path: Path) -> UnlearnResult | None:
    try:
        with np.load(path, allow_pickle=False) as blob:
            values = {name: blob[name] for name in _RELEASE_FIELDS}
    except (OSError, KeyError, ValueError):  # a corrupt or foreign file: release anew
        return None
    return UnlearnResult(
        values["weights"].astype(np.float64), float(values["sigma"]), int(values["steps"]),
        float(values["distance_bound"]), float(values["heldout_accuracy"]),
        float(values["retrain_accuracy"]), float(values["seconds"]), True, path,
    )  # fmt: skip


def cached_release(config: UnlearnConfig) -> UnlearnResult:
    """The cached release of ``config`` on this machine, or a new one (``release``) cached as
    ``<key>-<digest of the released weights>.npz``. Only the released weights and their
    certificate / accuracies are stored: the noise and the noiseless weights are not."""
    folder, key = cache_dir("certified-unlearning"), release_key(config)
    for path in sorted(folder.glob(f"{key}-*.npz"), key=lambda p: (p.stat().st_mtime, p.name)):
        loaded = _load_release(path)
        if loaded is not None:
            return loaded
    result = release(config)
    digest = hashlib.sha256(np.ascontiguousarray(result.weights).tobytes()).hexdigest()[:12]
    path = folder / f"{key}-{digest}.npz"
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(getattr(result, name)) for name in _RELEASE_FIELDS})
    atomic_write_bytes(path, buffer.getvalue())
    result.path = path
    return result


class CertifiedUnlearningCard(ModelCard):
    """Softmax regression on digits with a forget set removed under a (q, eps) certificate."""

    name: ClassVar[str] = "certified-unlearning"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "certified-unlearning"
    summary: ClassVar[str] = (
        "certified unlearning: ERM + GD on the retain set + Renyi-calibrated Gaussian noise "
        "(and trimmed-mean training for out-of-distribution forget sets); digits classifier"
    )
    architecture: ClassVar[str] = "linear"
    primary_metric: ClassVar[str | None] = "test_accuracy"
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.3, rtol=0.1),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "top1_agreement": 0.99,
        "max_prob_abs_error": 0.05,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        fields = UnlearnConfig.__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            from edgekit.errors import InputError

            raise InputError(f"certified-unlearning options {unknown} are not {sorted(fields)}")
        self.config = UnlearnConfig(**options)
        if self.config.noise_seed is not None:
            certify.release_rng(self.config.noise_seed)  # validates it and warns, even if cached
        self._result: UnlearnResult | None = None

    def _split(self) -> data.Split:
        return data.digits_split(self.config.forget, self.config.seed)

    def train(self, progress: Callable[[float, str], None] | None = None) -> UnlearnResult:
        """The cached release of this recipe, or a new one (~1 s, see ``cached_release``)."""
        if self._result is None:
            self._result = cached_release(self.config)
        return self._result

    def model(self) -> LinearClassifier:
        """The released classifier as a torch module (eval mode)."""
        module = LinearClassifier(self.train().weights, data.DIGITS_SCALE, data.DIGITS_FEATURE_NORM)
        return module.eval()

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

    def _test_pixels(self) -> tuple[np.ndarray, np.ndarray]:
        split = data.digits_split(self.config.forget, self.config.seed, raw=True)
        return split.x_test.astype(np.float32), split.y_test

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four held-out digits: pixels (4, 64) float32 in 0..16."""
        pixels, _ = self._test_pixels()
        return {GRAPH: {"pixels": pixels[:4]}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` single retained training digits, (1, 64) float32."""
        split = data.digits_split(self.config.forget, self.config.seed, raw=True)
        rows = split.x[split.retain][:limit].astype(np.float32)
        return {GRAPH: [{"pixels": row[None]} for row in rows]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "input": "sklearn digits layout: 8x8 grey, row-major, values 0..16 as float32",
            "inside_graph": f"x = pixels * {data.DIGITS_SCALE:.6g}, rows clipped to norm "
            f"{data.DIGITS_FEATURE_NORM}",
            "output": {"name": "logits", "postprocess": "softmax, argmax over digits 0-9"},
            "certificate": self.certificate(),
        }

    def certificate(self) -> dict[str, Any]:
        """The (q, eps) budget and where the release noise came from (the bundle records it):
        OS entropy, or the seed with ``certify.SEEDED_NOISE_WARNING`` (the certificate void)."""
        record: dict[str, Any] = {"q": self.config.q, "eps": self.config.eps}
        if self.config.noise_seed is None:
            return {**record, "noise": "OS entropy (not recorded, not reproducible)"}
        return {
            **record, "noise": f"noise_seed={self.config.noise_seed}",
            "noise_seed": self.config.noise_seed, "holds": False,
            "warning": certify.SEEDED_NOISE_WARNING,
        }  # fmt: skip

    def labels(self) -> list[str]:
        return [str(i) for i in range(10)]

    def _logits(self, runner: Runner, pixels: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"pixels": pixels})["logits"], dtype=np.float64)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Test accuracy and cross-entropy on the 450 held-out digits."""
        pixels, labels = self._test_pixels()
        logits = self._logits(runners[GRAPH], pixels)
        probs = softmax(logits)
        return {
            "test_accuracy": float((logits.argmax(axis=1) == labels).mean()),
            "test_loss": float(-np.log(probs[np.arange(len(labels)), labels] + 1e-12).mean()),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 agreement and max |softmax difference| on the held-out digits."""
        pixels, _ = self._test_pixels()
        ref = self._logits(reference[GRAPH], pixels)
        cand = self._logits(candidate[GRAPH], pixels)
        return {
            "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
            "max_prob_abs_error": float(np.abs(softmax(ref) - softmax(cand)).max()),
        }
