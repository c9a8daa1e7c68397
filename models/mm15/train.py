"""Staged training of the tiny VLM, one cached checkpoint per stage.

``train_recipe(config, recipe)`` runs the recipe's stages in order (pre-train ->
continual pre-train -> SFT), each stage drawing fresh batches from its data mixture and
continuing from the previous stage's weights. Every stage's weights are cached under
``cache_dir("mm15")`` keyed by ``recipe_key("mm15", RECIPE_VERSION, ...)`` over the model
config and the stages up to it, so ablations that share a prefix of stages (same pre-training)
train it once; a stage's file shipped in ``weights/`` (same name) is loaded before the cache.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import recipe_key
from edgekit.errors import InputError
from edgekit.models.mm15 import splitting, tasks, vocab
from edgekit.models.mm15.mixture import DEFAULT_RECIPE, Recipe, Stage, batch_categories
from edgekit.models.mm15.model import VisionLanguageModel
from edgekit.models.mm15.splitting import image_tiles
from edgekit.models.mm15.tasks import Example, draw_examples

Progress = Callable[[float, str], None]
SHIPPED_WEIGHTS = Path(__file__).parent / "weights"  # stage weights a package ships, same names
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class MM15Config:
    """Image, model and optimisation sizes. ``split`` turns image splitting on (overview +
    grid of up to ``max_tiles`` tiles) or off (the overview alone)."""

    size: int = 32
    tile: int = 16
    max_tiles: int = 4
    split: bool = True
    patch: int = 4
    pool: int = 2
    dim: int = 64
    enc_depth: int = 0
    dec_depth: int = 2
    heads: int = 4
    bins: int = 16
    ocr_len: int = 3
    batch: int = 32
    seed: int = 0
    max_text: int = 48

    def __post_init__(self) -> None:
        if self.tile % self.patch or (self.tile // self.patch) % self.pool:
            raise InputError(
                f"tile {self.tile} must be a multiple of patch {self.patch}, and the patch grid "
                f"{self.tile // max(1, self.patch)} a multiple of pool {self.pool}"
            )
        if self.dim % self.heads or self.dim % 4:
            raise InputError(f"dim {self.dim} must be a multiple of 4 and of heads {self.heads}")
        if self.size < 16 or self.batch < 1:
            raise InputError(f"size must be >= 16 and batch >= 1, got {self.size}, {self.batch}")

    def grid(self) -> tuple[int, int] | None:
        """The sub-image grid (rows, cols) of the (size, size) images; None without splitting."""
        if not self.split:
            return None
        return splitting.select_grid(self.size, self.size, self.tile, self.max_tiles)

    def tiles(self) -> int:
        """Tiles per image: 1 + rows * cols when splitting, else 1."""
        grid = self.grid()
        return 1 if grid is None else 1 + grid[0] * grid[1]

    def build(self) -> VisionLanguageModel:
        return VisionLanguageModel(
            self.grid(),
            self.tile,
            self.patch,
            self.pool,
            self.dim,
            self.enc_depth,
            self.dec_depth,
            self.heads,
            vocab.VOCAB_SIZE,
            self.max_text,
        )

    def encode(self, images: list[np.ndarray]) -> np.ndarray:
        """Images (size, size) -> encoder input (B, T, 1, tile, tile) float32."""
        return np.stack([image_tiles(im, self.tile, self.max_tiles, self.split) for im in images])[
            :, :, None
        ]

    def examples(self, category: str, count: int, seed: int) -> list[Example]:
        """Held-out examples of ``category`` (seeded apart from the training stream)."""
        return tasks.make_examples(
            category, count, 10_000 + seed, self.size, self.bins, self.ocr_len
        )


@dataclass
class Trained:
    """An eval-mode model after the last stage, with per-stage seconds / cache hits / losses."""

    model: VisionLanguageModel
    config: MM15Config
    recipe: Recipe
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_cached: dict[str, bool] = field(default_factory=dict)
    stage_loss: dict[str, float] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class _StageRun:
    """One stage: its seconds and final loss, whether its weights were loaded, and their file."""

    seconds: float
    loss: float
    cached: bool
    path: Path


def _key(config: MM15Config, stages: tuple[Stage, ...]) -> str:
    """Cache key (16 hex chars): recipe_key over "mm15", RECIPE_VERSION, the stages (their
    mixtures, steps and learning rates) and the model config."""
    spec = Recipe(stages).to_dict() | {"config": asdict(config)}
    return recipe_key("mm15", RECIPE_VERSION, spec)


def stage_path(config: MM15Config, stages: tuple[Stage, ...]) -> Path:
    """Cache file of the weights after the last of ``stages``."""
    from edgekit.cache import cache_dir

    return cache_dir("mm15") / f"{stages[-1].name}-{_key(config, stages)}.pt"


def lr_at(step: int, steps: int, peak: float, warmup: int = 20) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay from ``peak`` to peak / 10."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def teacher_forcing_loss(
    net: VisionLanguageModel, tiles: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens (+ EOS): logits at i predict tokens[i + 1]."""
    logits = net(tiles, tokens)[:, :-1]  # (B, L-1, V)
    target = tokens[:, 1:]
    keep = mask[:, :-1]
    return torch.nn.functional.cross_entropy(logits[keep], target[keep])


def _batch(
    config: MM15Config, stage: Stage, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    examples: list[Example] = []
    for category in batch_categories(stage, config.batch, rng):
        examples += draw_examples(category, 1, rng, config.size, config.bins, config.ocr_len)
    tokens, mask = vocab.batch_sequences([e.prompt for e in examples], [e.answer for e in examples])
    tiles = torch.from_numpy(config.encode([e.image for e in examples]))
    return tiles, torch.from_numpy(tokens), torch.from_numpy(mask)


def run_stage(
    net: VisionLanguageModel,
    config: MM15Config,
    stage: Stage,
    seed: int,
    progress: Progress | None = None,
) -> float:
    """Train ``net`` in place on ``stage``; returns the mean loss of its last fifth of steps."""
    rng = np.random.default_rng([config.seed, seed])
    torch.manual_seed(config.seed + seed)
    opt = torch.optim.AdamW(net.parameters(), lr=stage.lr, weight_decay=0.01)
    net.train()
    losses = []
    for step in range(stage.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, stage.steps, stage.lr)
        loss = teacher_forcing_loss(net, *_batch(config, stage, rng))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress and step % 50 == 0:
            progress(step / stage.steps, f"{stage.name} step {step} loss {loss.item():.3f}")
    net.eval()
    return float(np.mean(losses[-max(1, stage.steps // 5) :]))


def train_recipe(
    config: MM15Config | None = None,
    recipe: Recipe | None = None,
    progress: Progress | None = None,
) -> Trained:
    """Run (or load from the cache) every stage of ``recipe``; returns the final model."""
    from edgekit.weights_cache import load_or_train

    config = config or MM15Config()
    recipe = recipe or DEFAULT_RECIPE
    torch.manual_seed(config.seed)
    net = config.build()
    trained = Trained(net, config, recipe)

    def load(blob: dict[str, Any], found: Path) -> _StageRun:
        seconds, loss = float(blob["seconds"]), float(blob["loss"])
        net.load_state_dict(blob["state"])
        return _StageRun(seconds, loss, True, found)

    for i, stage in enumerate(recipe.stages):
        path = stage_path(config, recipe.stages[: i + 1])

        def train(stage: Stage = stage, number: int = i + 1, path: Path = path) -> _StageRun:
            started = time.perf_counter()
            loss = run_stage(net, config, stage, number, progress)
            return _StageRun(time.perf_counter() - started, loss, False, path)

        run = load_or_train(
            path,
            SHIPPED_WEIGHTS,
            train,
            load=load,
            save=lambda run: {"state": net.state_dict(), "seconds": run.seconds, "loss": run.loss},
        )
        trained.stage_seconds[stage.name] = run.seconds
        trained.stage_cached[stage.name] = run.cached
        trained.stage_loss[stage.name] = run.loss
        trained.paths.append(run.path)
    net.eval()
    return trained
