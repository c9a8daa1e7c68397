"""The audited model (a small MLP on digits), its training routine and the unlearning methods.

Every unlearning method has the signature ``unlearn(model, retain, forget) -> model`` with
``retain`` and ``forget`` = (x (N, D) float32, y (N,) int64); it returns a new model and never
changes the one it is given. ``retrain`` is the gold standard: a fresh model trained on the
retain set alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgekit.errors import InputError

Data = tuple[np.ndarray, np.ndarray]
Unlearn = Callable[[nn.Module, Data, Data], nn.Module]


class DigitsMLP(nn.Module):
    """forward(pixels (B, 64) float32, digits' 0..16 values) -> logits (B, 10).

    Scales to [0, 1] inside (the poison lives in that scaled space), then 64-256-256-10 ReLU.
    """

    scale: float = 1.0 / 16.0

    def __init__(self, hidden: int = 256, seed: int = 0) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.net = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 10),
        )  # fmt: skip
        torch.random.set_rng_state(generator_state)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.features_to_logits(pixels * self.scale)

    def features_to_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits (B, 10) of scaled features (B, 64) in [0, 1] (what the audit perturbs)."""
        return self.net(features)


class ScaledView(nn.Module):
    """The model seen on scaled features: forward(features (B, 64)) -> logits (B, 10)."""

    def __init__(self, model: DigitsMLP) -> None:
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.model.features_to_logits(features)


@dataclass(frozen=True)
class TrainConfig:
    """Minibatch Adam on cross-entropy."""

    epochs: int = 60
    lr: float = 1e-3
    batch: int = 64
    weight_decay: float = 0.0
    seed: int = 0


def _batches(n: int, batch: int, generator: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=generator)
    return [perm[i : i + batch] for i in range(0, n, batch)]


def fit(
    model: nn.Module,
    data: Data,
    config: TrainConfig,
    params: list[nn.Parameter] | None = None,
    noise_std: float = 0.0,
    ascent: bool = False,
) -> nn.Module:
    """Train ``model`` in place on scaled features ``data`` for ``config.epochs``; only
    ``params`` (default all) move; ``noise_std`` adds N(0, s^2) to them after each step;
    ``ascent`` maximises the loss instead. Returns the model in eval mode."""
    x, y = torch.as_tensor(data[0], dtype=torch.float32), torch.as_tensor(data[1])
    if len(x) == 0:
        raise InputError("cannot train on an empty data set")
    params = list(model.parameters()) if params is None else params
    optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    sign = -1.0 if ascent else 1.0
    model.train()
    for _ in range(config.epochs):
        for idx in _batches(len(x), config.batch, generator):
            optimizer.zero_grad()
            loss = sign * nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            if noise_std > 0:
                with torch.no_grad():
                    for p in params:
                        p.add_(torch.randn(p.shape, generator=generator) * noise_std)
    return model.eval()


def train_new(data: Data, config: TrainConfig | None = None, hidden: int = 256) -> ScaledView:
    """A fresh DigitsMLP trained on scaled features ``data``; returned as its ScaledView."""
    config = config or TrainConfig()
    view = ScaledView(DigitsMLP(hidden, config.seed))
    fit(view, data, config)
    return view


def _last_linear(model: nn.Module) -> nn.Linear:
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise InputError("last-layer fine-tuning needs a model with an nn.Linear layer")
    return layers[-1]


def gd(epochs: int = 10, lr: float = 1e-3) -> Unlearn:
    """Keep training on the retain set for ``epochs`` (fine-tuning, 'GD')."""

    def unlearn(model: nn.Module, retain: Data, forget: Data) -> nn.Module:
        return fit(copy.deepcopy(model), retain, TrainConfig(epochs, lr, seed=101))

    return unlearn


def noisy_gd(epochs: int = 10, lr: float = 1e-3, noise_std: float = 2e-3) -> Unlearn:
    """GD on the retain set with Gaussian noise N(0, noise_std^2) added to every weight
    after each step."""

    def unlearn(model: nn.Module, retain: Data, forget: Data) -> nn.Module:
        return fit(copy.deepcopy(model), retain, TrainConfig(epochs, lr, seed=102), None, noise_std)

    return unlearn


def gradient_ascent(epochs: int = 5, lr: float = 1e-4) -> Unlearn:
    """Maximise the loss on the forget set for ``epochs`` passes."""

    def unlearn(model: nn.Module, retain: Data, forget: Data) -> nn.Module:
        config = TrainConfig(epochs, lr, batch=32, seed=103)
        return fit(copy.deepcopy(model), forget, config, ascent=True)

    return unlearn


def last_layer(epochs: int = 10, lr: float = 1e-3) -> Unlearn:
    """Fine-tune only the last nn.Linear on the retain set (the rest frozen)."""

    def unlearn(model: nn.Module, retain: Data, forget: Data) -> nn.Module:
        copied = copy.deepcopy(model)
        params = list(_last_linear(copied).parameters())
        return fit(copied, retain, TrainConfig(epochs, lr, seed=104), params)

    return unlearn


def retrain(config: TrainConfig | None = None, seed: int = 7) -> Unlearn:
    """Gold standard: a fresh model trained on the retain set only (another init seed)."""
    base = config or TrainConfig()

    def unlearn(model: nn.Module, retain: Data, forget: Data) -> nn.Module:
        fresh = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(seed)
        for module in fresh.modules():
            if isinstance(module, nn.Linear):
                bound = 1.0 / np.sqrt(module.in_features)
                with torch.no_grad():
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.uniform_(-bound, bound, generator=generator)
        cfg = TrainConfig(base.epochs, base.lr, base.batch, base.weight_decay, seed)
        return fit(fresh, retain, cfg)

    return unlearn


def default_methods(train_epochs: int = 60) -> dict[str, Unlearn]:
    """The audited methods at a small and a large compute budget (epochs over the retain set;
    the large one is a third of the original training), GD with as many epochs as training
    itself, plus retraining."""
    small, large = max(1, train_epochs // 12), max(2, train_epochs // 3)
    return {
        f"gd-{small}ep": gd(small),
        f"gd-{large}ep": gd(large),
        f"gd-{train_epochs}ep": gd(train_epochs),
        f"noisy-gd-{small}ep": noisy_gd(small),
        f"noisy-gd-{large}ep": noisy_gd(large),
        "grad-ascent-1ep": gradient_ascent(1),
        "grad-ascent-5ep": gradient_ascent(5),
        f"last-layer-{large}ep": last_layer(large),
        "retrain": retrain(TrainConfig(epochs=train_epochs)),
    }
