"""Training recipe for PhotoNet, with the result cached under ``cache_dir("photo-cnn")``.

The cache key is ``recipe_key("photo-cnn", RECIPE_VERSION, config)``: a changed config or a
bumped RECIPE_VERSION retrains, editing the source alone does not. Weights shipped in the package
(``weights/``, same file names) are loaded before the cache. Weights are written atomically; a
concurrent trainer racing for the same key leaves one complete file. Training is seeded and
single-process; the same config on the same machine and thread count gives the same weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.cache import cache_dir, recipe_key
from edgekit.errors import InputError
from edgekit.models.photo_cnn import data, net
from edgekit.weights_cache import load_or_train, load_weights

Progress = Callable[[float, str], None]
NetworkFactory = Callable[[], nn.Module]
SHIPPED_WEIGHTS = Path(__file__).parent / "weights"  # weights a package ships, cache file names


class Recipe(Protocol):
    """What ``train_model`` reads from a config; TrainConfig is one, other cards bring their own.

    ``key()`` names the cached weights and must change with anything that changes them.
    """

    steps: int
    batch_size: int
    lr: float
    weight_decay: float
    label_smoothing: float
    seed: int
    threads: int

    def key(self) -> str: ...


RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights."""

    steps: int = 320
    batch_size: int = 96
    lr: float = 4e-3
    weight_decay: float = 5e-4
    label_smoothing: float = 0.05
    width: int = 24
    seed: int = 0
    threads: int = 2
    extreme_fraction: float = 0.0  # sensor-aware: add this share of each batch as extreme captures
    render_crops: int = 0  # sensor-rendered: crops per batch rendered as a camera would ...
    renders: int = 4  # ... this many times each (data.camera_renders)
    rank_weight: float = 0.0  # weight of the correctness-ranking term over each crop's renders
    render_weight: float = 1.0  # weight of the renders' rows in the cross-entropy

    def key(self) -> str:
        """Cache key (16 hex chars): recipe_key over "photo-cnn", RECIPE_VERSION and this config."""
        return recipe_key("photo-cnn", RECIPE_VERSION, self)


@dataclass
class TrainResult:
    """Trained weights with what it took: seconds, final loss, held-out top-1 accuracy."""

    state_dict: dict[str, torch.Tensor]
    config: Recipe
    seconds: float
    final_loss: float
    heldout_accuracy: float
    cached: bool = False
    path: Path | None = None

    def build(self, network: NetworkFactory | None = None) -> nn.Module:
        """The network (default: PhotoNet at the config width) with these weights, in eval mode."""
        model = network() if network else photonet_factory(self.config)()
        model.load_state_dict(self.state_dict)
        return model.eval()


def photonet_factory(config: Recipe) -> NetworkFactory:
    """The default network: a fresh PhotoNet at ``config.width``."""
    return lambda: net.PhotoNet(len(data.PHOTOS), width=config.width)  # type: ignore[attr-defined]


# Named recipes (card option ``recipe=NAME``): "default" is the config's defaults; "sensor-aware"
# trains twice as long with extreme captures added (half of each batch), so the model's own
# confidence tracks how much of a capture survived the sensor: what Lens's VisiT relies on.
# "sensor-rendered" adds camera renders of some crops (several each, near a good exposure, with
# the noise, blur and exposure differences of a camera's candidate settings), so VisiT also tells
# apart good exposures of one scene, where Lens competes with a good fixed setting. The
# ``rank_weight`` option adds a term ranking each crop's right renders above its wrong ones by
# confidence (measured in the README: it lowered accuracy under the lamps; off by default).
RECIPES: dict[str, dict[str, float]] = {
    "default": {},
    "sensor-aware": {"steps_factor": 2.0, "extreme_fraction": 0.5},
    "sensor-rendered": {"steps_factor": 2.0, "extreme_fraction": 0.5, "render_crops": 24},
}
RANK_MARGIN = 0.1  # confidence a right render should hold over a wrong render of the same crop


def recipe_from_options(config_class: type, options: Mapping[str, Any]) -> Any:
    """``config_class``'s defaults, then the preset named by ``options["recipe"]`` (RECIPES),
    then every option named like a field of ``config_class`` (explicit options win)."""
    name = str(options.get("recipe", "default"))
    if name not in RECIPES:
        raise InputError(f"unknown recipe '{name}'; expected one of {', '.join(RECIPES)}")
    base = config_class()
    preset = dict(RECIPES[name])
    fields = config_class.__dataclass_fields__
    values: dict[str, Any] = {}
    if "steps_factor" in preset:
        values["steps"] = int(round(base.steps * preset.pop("steps_factor")))
    values.update(preset)
    values.update({k: v for k, v in options.items() if k in fields})
    return replace(base, **values)


def weights_path(config: TrainConfig) -> Path:
    """Where the weights for ``config`` are (or will be) cached."""
    return cache_dir("photo-cnn") / f"photonet-{config.key()}.pt"


@torch.inference_mode()
def heldout_accuracy(model: torch.nn.Module, batch: int = 160) -> float:
    """Top-1 accuracy of ``model`` on the fixed held-out crops."""
    images, labels = data.heldout_set()
    model.eval()
    correct = 0
    for start in range(0, len(labels), batch):
        logits = model(images[start : start + batch])
        correct += int((logits.argmax(dim=1) == labels[start : start + batch]).sum())
    return correct / len(labels)


def smoothed_targets(labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """Labels (N,) int64 as label-smoothed one-hot targets (N, classes) float32."""
    classes = len(data.PHOTOS)
    return F.one_hot(labels, classes).float() * (1 - label_smoothing) + label_smoothing / classes


def with_extreme_captures(
    images: torch.Tensor,
    labels: torch.Tensor,
    fraction: float,
    label_smoothing: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch (B, 3, 64, 64) plus int(fraction * B) extreme captures of its first crops
    (data.extreme_captures), with soft targets (B + k, classes): the smoothed one-hot label,
    mixed towards uniform by the share of information each extreme capture lost, so the
    trained model's confidence (VisiT) falls as a capture's information does."""
    classes = len(data.PHOTOS)
    targets = smoothed_targets(labels, label_smoothing)
    k = int(images.shape[0] * fraction)
    captured, lost = data.extreme_captures(images[:k], generator)
    soft = targets[:k] * (1 - lost[:, None]) + lost[:, None] / classes
    return torch.cat([images, captured]), torch.cat([targets, soft])


def ranking_loss(
    logits: torch.Tensor, labels: torch.Tensor, renders: int, margin: float = RANK_MARGIN
) -> torch.Tensor:
    """Correctness ranking of top-1 confidence within groups of ``renders`` rows of one crop.

    logits (G * renders, classes), labels (G * renders,). For every pair of one crop's renders
    where one is classified right and the other wrong, a hinge max(0, margin - (conf_right -
    conf_wrong)) on the top-1 softmax probabilities; the mean over such pairs (0 when none).
    Which render is right is read from the logits and not differentiated.
    """
    probs = logits.softmax(dim=-1)
    confidence = probs.max(dim=-1).values.view(-1, renders)  # (G, R)
    right = (logits.detach().argmax(dim=-1) == labels).view(-1, renders)  # (G, R)
    ordered = right[:, :, None] & ~right[:, None, :]  # (G, R, R): i right, j wrong
    gap = confidence[:, :, None] - confidence[:, None, :]  # (G, R, R): conf_i - conf_j
    hinge = F.relu(margin - gap)[ordered]
    return hinge.mean() if hinge.numel() else confidence.sum() * 0.0


def camera_render_batch(
    config: Recipe, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``config.render_crops`` clean training crops, each rendered ``config.renders`` times
    (data.camera_renders): (images (G * R, 3, 64, 64), labels (G * R,)), grouped by crop."""
    renders = int(getattr(config, "renders", 4))
    clean, labels = data.train_batch(int(getattr(config, "render_crops", 0)), generator, False)
    return data.camera_renders(clean, renders, generator), labels.repeat_interleave(renders)


def train_model(
    config: Recipe, progress: Progress | None = None, network: NetworkFactory | None = None
) -> TrainResult:
    """Train ``network()`` (default PhotoNet) from scratch under ``config`` (no cache involved).

    AdamW with a one-cycle schedule on a fresh stream of augmented, class-balanced crops;
    gradients are clipped to norm ``config.grad_clip`` when the config has one (> 0).
    """
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        model = (network or photonet_factory(config))()
        grad_clip = float(getattr(config, "grad_clip", 0.0))
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.lr, total_steps=config.steps, pct_start=0.2
        )
        started = time.perf_counter()
        loss_ema = None
        model.train()
        extreme = float(getattr(config, "extreme_fraction", 0.0))
        rank = float(getattr(config, "rank_weight", 0.0))
        renders = int(getattr(config, "renders", 4))
        rendering = int(getattr(config, "render_crops", 0)) > 0
        for step in range(config.steps):
            images, labels = data.train_batch(config.batch_size, generator)
            targets = None
            if extreme > 0:
                images, targets = with_extreme_captures(
                    images, labels, extreme, config.label_smoothing, generator
                )
            if rendering:
                rendered, render_labels = camera_render_batch(config, generator)
                if targets is None:
                    targets = smoothed_targets(labels, config.label_smoothing)
                rows = len(images)
                images = torch.cat([images, rendered])
                targets = torch.cat(
                    [targets, smoothed_targets(render_labels, config.label_smoothing)]
                )
            logits = model(images)
            if targets is None:
                loss = F.cross_entropy(logits, labels, label_smoothing=config.label_smoothing)
            elif not rendering:
                loss = F.cross_entropy(logits, targets)
            else:
                weights = torch.ones(len(images))
                weights[rows:] = float(getattr(config, "render_weight", 1.0))
                per_row = F.cross_entropy(logits, targets, reduction="none")
                loss = (per_row * weights).sum() / weights.sum()
                tail = logits[rows:]
                loss = loss + rank * ranking_loss(tail, render_labels, renders)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            schedule.step()
            value = float(loss.detach())
            loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
            if progress and (step % 10 == 0 or step == config.steps - 1):
                progress(
                    (step + 1) / config.steps, f"step {step + 1}/{config.steps} loss {value:.3f}"
                )
        seconds = time.perf_counter() - started
        model.eval()
        accuracy = heldout_accuracy(model)
    finally:
        torch.set_num_threads(previous_threads)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return TrainResult(state, config, seconds, float(loss_ema or 0.0), accuracy)


def _blob(result: TrainResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "config": asdict(result.config),
        "seconds": result.seconds,
        "final_loss": result.final_loss,
        "heldout_accuracy": result.heldout_accuracy,
        "torch": str(torch.__version__),
    }
    return {"state_dict": result.state_dict, "meta": meta}


def _decode(config: Recipe, blob: dict[str, Any], path: Path) -> TrainResult:
    meta = blob["meta"]
    return TrainResult(
        blob["state_dict"],
        config,
        float(meta["seconds"]),
        float(meta["final_loss"]),
        float(meta["heldout_accuracy"]),
        cached=True,
        path=path,
    )


def load_cached(config: Recipe, path: Path | None = None) -> TrainResult | None:
    """The cached weights at ``path`` (default ``weights_path(config)``), or None when absent
    or unreadable."""
    path = path or weights_path(config)  # type: ignore[arg-type]
    return load_weights(path, None, lambda blob, found: _decode(config, blob, found))


def train_cached(
    config: Recipe | None = None,
    progress: Progress | None = None,
    force: bool = False,
    *,
    network: NetworkFactory | None = None,
    path: Path | None = None,
    shipped: Path | None = SHIPPED_WEIGHTS,
) -> TrainResult:
    """Cached weights for ``config`` (default recipe), training and caching them if needed.

    Another architecture passes its own ``network`` factory, cache ``path`` (which should
    contain ``config.key()``) and ``shipped`` folder; the defaults are PhotoNet under
    ``weights_path(config)``. A file of the same name in ``shipped`` is loaded first.
    """
    config = config or TrainConfig()
    path = path or weights_path(config)  # type: ignore[arg-type]

    def train() -> TrainResult:
        result = train_model(config, progress, network)
        result.path = path
        return result

    return load_or_train(
        path,
        shipped,
        train,
        load=lambda blob, found: _decode(config, blob, found),
        save=_blob,
        force=force,
        progress=progress,
    )
