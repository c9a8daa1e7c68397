"""Training MTID (and its ablations) on the synthetic planning world, cached under
``cache_dir("mtid")``.

``train_mtid(config)`` fits the task classifier (cross-entropy on the two frames; shared by every
ablation of the same data) and the x0-denoiser with the masked proximity loss, conditioned on
the true task as PDPP / MTID train it. Weights are cached keyed by the config and
``RECIPE_VERSION``; weights shipped in the package's ``weights/`` folder are found first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.errors import InputError
from edgekit.models.mtid.classifier import TaskClassifier
from edgekit.models.mtid.denoiser import PlanDenoiser
from edgekit.models.mtid.layout import Layout, encode_plans, one_hot
from edgekit.models.mtid.loss import masked_proximity_weights, x0_loss
from edgekit.models.mtid.schedule import Schedule
from edgekit.models.mtid.tasks import Plans, World, make_world, sample_plans, task_action_table

Progress = Callable[[float, str], None]

# bump when what training does changes (data, loss, networks, schedule; classifier or planner)
RECIPE_VERSION = 1

# fields that change the data or the classifier (the classifier cache is keyed by these only)
DATA_FIELDS = (
    "tasks", "actions", "per_task", "obs_dim", "noise", "concentration", "horizon",
    "train_plans", "test_plans", "seed", "classifier_steps", "batch", "lr",
)  # fmt: skip


@dataclass(frozen=True)
class MTIDConfig:
    """World, network, training sizes and the three MTID components (all on by default).

    ``interpolation``: latent interpolation module + cross-attention; ``action_mask``: the
    action-aware mask on the denoiser's output; ``proximity_loss``: the masked proximity loss
    (``end_weight`` at the first / last step, ``mask_scale`` on the task's actions) instead of a
    plain MSE on the action block.
    """

    tasks: int = 8
    actions: int = 32
    per_task: int = 6
    obs_dim: int = 24
    noise: float = 1.0
    concentration: float = 0.5
    horizon: int = 3
    train_plans: int = 4000
    test_plans: int = 1000
    seed: int = 0
    dim: int = 64
    depth: int = 2
    heads: int = 4
    timesteps: int = 100
    ddim_steps: int = 10
    end_weight: float = 10.0
    mask_scale: float = 2.0
    steps: int = 1000
    classifier_steps: int = 600
    batch: int = 128
    lr: float = 2e-3
    interpolation: bool = True
    action_mask: bool = True
    proximity_loss: bool = True

    def __post_init__(self) -> None:
        for name in ("tasks", "actions", "obs_dim", "train_plans", "test_plans", "dim", "depth"):
            if getattr(self, name) < 1:
                raise InputError(f"MTIDConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("steps", "classifier_steps", "batch", "heads"):
            if getattr(self, name) < 1:
                raise InputError(f"MTIDConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.horizon < 2:
            raise InputError(f"MTIDConfig.horizon must be >= 2, got {self.horizon}")
        if not 2 <= self.ddim_steps <= self.timesteps:
            raise InputError(
                f"MTIDConfig.ddim_steps must be in 2..timesteps ({self.timesteps}), "
                f"got {self.ddim_steps}"
            )
        if self.end_weight < 1 or self.mask_scale < 1:
            raise InputError(
                f"MTIDConfig.end_weight and mask_scale must be >= 1, got {self.end_weight}, "
                f"{self.mask_scale}"
            )
        if self.lr <= 0:
            raise InputError(f"MTIDConfig.lr must be > 0, got {self.lr}")

    def world(self) -> World:
        return make_world(
            self.tasks, self.actions, self.per_task, self.obs_dim, self.noise,
            self.concentration, self.seed,
        )  # fmt: skip

    def data(self) -> dict[str, Plans]:
        """{"train", "test"} plans of one world (independent draws)."""
        world = self.world()
        return {
            "train": sample_plans(world, self.train_plans, self.horizon, self.seed + 1),
            "test": sample_plans(world, self.test_plans, self.horizon, self.seed + 2),
        }

    def layout(self) -> Layout:
        return Layout(self.tasks, self.actions, self.obs_dim)

    def schedule(self) -> Schedule:
        return Schedule(self.timesteps)

    def variant(self, **changes: Any) -> MTIDConfig:
        """This config with some fields changed (an ablation)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise InputError(f"{unknown} are not MTIDConfig fields")
        return replace(self, **changes)

    def denoiser(self, table: np.ndarray | None) -> PlanDenoiser:
        return PlanDenoiser(
            self.layout(), self.horizon, table if self.action_mask else None,
            self.dim, self.depth, self.heads, self.interpolation,
        )  # fmt: skip


@dataclass
class Trained:
    """Eval-mode networks of one run, the task -> actions table and training seconds (0 for a
    part loaded from the cache)."""

    classifier: TaskClassifier
    denoiser: PlanDenoiser
    table: np.ndarray
    seconds: float
    cached: bool
    path: Path | None = None


def _key(payload: dict[str, Any]) -> str:
    """``recipe_key`` over "mtid", ``RECIPE_VERSION`` and ``payload`` (config fields + kind)."""
    from edgekit.cache import recipe_key

    return recipe_key("mtid", RECIPE_VERSION, payload)


def cache_path(config: MTIDConfig, kind: str) -> Path:
    """Where the ``kind`` ("classifier" | "planner") weights of ``config`` are cached."""
    from edgekit.cache import cache_dir

    payload = asdict(config) if kind == "planner" else {f: getattr(config, f) for f in DATA_FIELDS}
    return cache_dir("mtid") / f"{kind}-{_key(payload | {'kind': kind})}.pt"


def _batches(count: int, batch: int, steps: int, generator: torch.Generator):
    for _ in range(steps):
        yield torch.randint(0, count, (batch,), generator=generator)


def fit_classifier(
    config: MTIDConfig, train: Plans, progress: Progress | None = None
) -> TaskClassifier:
    """The task classifier trained with cross-entropy for ``config.classifier_steps`` steps."""
    gen = torch.Generator().manual_seed(config.seed + 10)
    torch.manual_seed(config.seed + 10)
    model = TaskClassifier(config.obs_dim, config.tasks)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-3)
    start, goal = torch.from_numpy(train.start), torch.from_numpy(train.goal)
    label = torch.from_numpy(train.task)
    for step, idx in enumerate(_batches(len(train), config.batch, config.classifier_steps, gen)):
        ce = torch.nn.functional.cross_entropy(model(start[idx], goal[idx]), label[idx])
        opt.zero_grad()
        ce.backward()
        opt.step()
        if progress and step % 200 == 0:
            progress(step / config.classifier_steps, f"classifier step {step} ce {ce.item():.3f}")
    return model.eval()


def fit_denoiser(
    config: MTIDConfig, train: Plans, table: np.ndarray, progress: Progress | None = None
) -> PlanDenoiser:
    """The denoiser trained with the x0 loss (masked proximity or plain MSE on actions)."""
    gen = torch.Generator().manual_seed(config.seed + 20)
    torch.manual_seed(config.seed + 20)
    model = config.denoiser(table)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.steps)
    lay = config.layout()
    x0 = torch.from_numpy(encode_plans(train, lay))  # (N, T, D)
    task = torch.from_numpy(one_hot(train.task, config.tasks))  # (N, K)
    start, goal = torch.from_numpy(train.start), torch.from_numpy(train.goal)
    task_mask = torch.from_numpy(table[train.task])  # (N, A)
    for step, idx in enumerate(_batches(len(train), config.batch, config.steps, gen)):
        if config.proximity_loss:
            weights = masked_proximity_weights(
                config.horizon, task_mask[idx], config.end_weight, config.mask_scale
            )
        else:
            weights = torch.ones(1, 1, 1)
        value = x0_loss(
            model, x0[idx], task[idx], start[idx], goal[idx], weights, config.schedule(), lay, gen
        )
        opt.zero_grad()
        value.backward()
        opt.step()
        sched.step()
        if progress and step % 250 == 0:
            progress(step / config.steps, f"denoiser step {step} loss {value.item():.4f}")
    return model.eval()


def _cached_module(
    path: Path, module: torch.nn.Module, fit: Callable[[], torch.nn.Module]
) -> tuple[Any, float, bool]:
    """(model, training seconds, loaded): ``module`` with the weights of ``path``'s shipped copy
    (package ``weights/``) or of ``path`` (eval mode), else ``fit()`` trained now and cached."""
    from edgekit.weights_cache import load_or_train

    def load(blob: dict[str, Any], found: Path) -> tuple[Any, float, bool]:
        module.load_state_dict(blob["state"])
        return module.eval(), float(blob["seconds"]), True

    def train() -> tuple[Any, float, bool]:
        started = time.perf_counter()
        model = fit()
        return model, time.perf_counter() - started, False

    return load_or_train(
        path,
        Path(__file__).parent / "weights",
        train,
        load=load,
        save=lambda run: {"state": run[0].state_dict(), "seconds": run[1]},
    )


def train_classifier(
    config: MTIDConfig, progress: Progress | None = None
) -> tuple[TaskClassifier, float, bool]:
    """(classifier, training seconds, loaded from cache) for ``config``'s data."""
    path = cache_path(config, "classifier")
    model = TaskClassifier(config.obs_dim, config.tasks)
    return _cached_module(
        path, model, lambda: fit_classifier(config, config.data()["train"], progress)
    )


@contextmanager
def _one_thread() -> Iterator[None]:
    """Train on one intra-op thread (these networks are tiny: more threads only add
    synchronisation, which is very slow on a loaded machine); restore the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_mtid(config: MTIDConfig | None = None, progress: Progress | None = None) -> Trained:
    """Task classifier + MTID denoiser for ``config`` (each from the cache or trained now)."""
    with _one_thread():
        return _train_mtid(config or MTIDConfig(), progress)


def _train_mtid(config: MTIDConfig, progress: Progress | None) -> Trained:
    train = config.data()["train"]
    table = task_action_table(train, config.tasks, config.actions)
    clf, clf_seconds, clf_cached = train_classifier(config, progress)
    path = cache_path(config, "planner")
    model, seconds, cached = _cached_module(
        path, config.denoiser(table), lambda: fit_denoiser(config, train, table, progress)
    )
    return Trained(clf, model, table, seconds + clf_seconds, clf_cached and cached, path)
