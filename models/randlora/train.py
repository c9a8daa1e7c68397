"""Pretraining the digits MLP and adapting it with RandLoRA, LoRA or full fine-tuning.

Everything is full-batch Adam on a few hundred digits, seeded and single-threaded: a run takes
about a second. The pretrained MLP and the card's adapted model are cached under
``cache_dir("randlora")``, keyed by their config and ``RECIPE_VERSION``; merged weights shipped in
the package's ``weights/`` folder are found first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.cache import cache_dir, recipe_key
from edgekit.errors import InputError
from edgekit.models.randlora import data
from edgekit.models.randlora.layers import (
    apply_randlora,
    freeze,
    merge_adapters,
    trainable_parameters,
)
from edgekit.models.randlora.lora import apply_lora
from edgekit.weights_cache import load_or_train

Progress = Callable[[float, str], None]
METHODS = ("randlora", "lora", "full", "none")
TARGETS = ("all", "first")  # which Linear layers get adapters: every one, or only the input layer
# bump when what pretraining or adaptation does changes (data, loss, network, schedule)
RECIPE_VERSION = 1


FIRST_LAYER = "net.0"


class DigitMLP(nn.Module):
    """forward(pixels (B, 64) float32 in [0, 1]) -> logits (B, classes) float32."""

    def __init__(self, hidden: int = 128, classes: int = len(data.CLASSES)) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(data.PIXELS, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixels)


@torch.no_grad()
def accuracy(model: nn.Module, split: data.Split) -> float:
    """Top-1 accuracy of ``model`` on ``split``."""
    model.eval()
    return float((model(split.x).argmax(dim=1) == split.y).float().mean())


def fit(model: nn.Module, split: data.Split, steps: int, lr: float) -> float:
    """Full-batch Adam on the trainable parameters of ``model``; returns the last loss."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return float("nan")
    optimizer = torch.optim.Adam(params, lr=lr)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        loss = F.cross_entropy(model(split.x), split.y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return float(loss.detach())


@contextlib.contextmanager
def torch_threads(threads: int = 1) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads (tiny full-batch steps: 1 is fastest)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _key(config: Any) -> str:
    """``recipe_key`` over "randlora", ``RECIPE_VERSION`` and ``config`` (a PretrainConfig, or an
    AdaptConfig, which holds its PretrainConfig)."""
    return recipe_key("randlora", RECIPE_VERSION, config)


@dataclass(frozen=True)
class PretrainConfig:
    """The source model: DigitMLP trained on unpermuted digits 0-9."""

    hidden: int = 128
    steps: int = 300
    lr: float = 3e-3
    seed: int = 0


def pretrained_mlp(config: PretrainConfig | None = None) -> DigitMLP:
    """The pretrained source MLP (eval mode), trained once (~1 s) and cached."""
    config = config or PretrainConfig()
    path = cache_dir("randlora") / f"pretrained-{_key(config)}.pt"

    def load(blob: dict[str, Any], found: Path) -> DigitMLP:
        model = DigitMLP(config.hidden)
        model.load_state_dict(blob["state_dict"])
        return model

    def train() -> DigitMLP:
        torch.manual_seed(config.seed)
        model = DigitMLP(config.hidden)
        with torch_threads(1):
            fit(model, data.source_task().train, config.steps, config.lr)
        return model

    model = load_or_train(
        path, None, train, load=load, save=lambda model: {"state_dict": model.state_dict()}
    )
    return model.eval()


@dataclass(frozen=True)
class AdaptConfig:
    """One adaptation run of the pretrained MLP to the permuted task.

    ``method``: "randlora" (``rank`` = basis rank r, ``kind`` dense | sparse), "lora"
    (``rank`` = q), "full" (every parameter) or "none" (the pretrained model as it is).
    ``target``: "all" Linear layers, or only the "first" (the layer the permutation hits;
    with "full" that trains only the first layer too).
    """

    method: str = "randlora"
    rank: int = 8
    kind: str = "dense"
    target: str = "all"
    lr: float = 1e-2
    steps: int = 300
    seed: int = 0
    pretrain: PretrainConfig = PretrainConfig()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.target not in TARGETS:
            raise InputError(f"target must be one of {TARGETS}, got {self.target!r}")


@dataclass
class AdaptResult:
    """The adapted model (adapters still attached) and what the run measured."""

    model: nn.Module
    config: AdaptConfig
    trainable: int
    val_accuracy: float
    test_accuracy: float
    final_loss: float
    seconds: float


def prepare(config: AdaptConfig) -> nn.Module:
    """The pretrained MLP with the adapters of ``config`` attached (seeded), ready to train."""
    model = pretrained_mlp(config.pretrain)
    torch.manual_seed(config.seed)
    include = (lambda name, _layer: name == FIRST_LAYER) if config.target == "first" else None
    if config.method == "randlora":
        apply_randlora(model, rank=config.rank, kind=config.kind, seed=config.seed, include=include)
    elif config.method == "lora":
        apply_lora(model, rank=config.rank, include=include)
    elif config.method == "none" or config.target == "first":
        freeze(model)
        if config.method == "full":
            model.get_submodule(FIRST_LAYER).requires_grad_(True)
    return model


def adapt(config: AdaptConfig, task: data.Task | None = None) -> AdaptResult:
    """Adapt the pretrained MLP to ``task`` (default: the permuted digits) under ``config``."""
    task = task or data.permuted_task()
    model = prepare(config)
    started = time.perf_counter()
    with torch_threads(1):
        loss = fit(model, task.train, config.steps, config.lr)
    seconds = time.perf_counter() - started
    return AdaptResult(
        model.eval(),
        config,
        trainable_parameters(model),
        accuracy(model, task.val),
        accuracy(model, task.test),
        loss,
        seconds,
    )


@dataclass
class DeployResult:
    """The card's artifact: the merged adapted MLP's weights and its test accuracy."""

    state_dict: dict[str, torch.Tensor]
    config: AdaptConfig
    heldout_accuracy: float
    trainable: int
    seconds: float
    cached: bool = False
    path: Path | None = None

    def build(self) -> DigitMLP:
        """The merged MLP (a plain DigitMLP, eval mode)."""
        model = DigitMLP(self.config.pretrain.hidden)
        model.load_state_dict(self.state_dict)
        return model.eval()


def train_cached(
    config: AdaptConfig | None = None, progress: Progress | None = None
) -> DeployResult:
    """Adapt (about a second) and merge, or load the cached merged weights of ``config``."""
    config = config or AdaptConfig()
    path = cache_dir("randlora") / f"merged-{config.method}-{_key(config)}.pt"

    def load(blob: dict[str, Any], found: Path) -> DeployResult:
        meta = blob["meta"]
        return DeployResult(
            blob["state_dict"],
            config,
            meta["accuracy"],
            meta["trainable"],
            meta["seconds"],
            True,
            found,
        )

    def train() -> DeployResult:
        if progress:
            progress(0.0, f"adapting the pretrained MLP with {config.method}")
        result = adapt(config)
        merged = merge_adapters(result.model)
        state = {k: v.detach().clone() for k, v in merged.state_dict().items()}
        return DeployResult(
            state, config, result.test_accuracy, result.trainable, result.seconds, False, path
        )

    def save(result: DeployResult) -> dict[str, Any]:
        meta = {
            "accuracy": result.heldout_accuracy,
            "trainable": result.trainable,
            "seconds": result.seconds,
        }
        return {"state_dict": result.state_dict, "meta": meta}

    result = load_or_train(
        path,
        Path(__file__).parent / "weights",
        train,
        load=load,
        save=save,
        progress=progress,
    )
    if progress and not result.cached:
        progress(1.0, f"test accuracy {result.heldout_accuracy:.3f}")
    return result
