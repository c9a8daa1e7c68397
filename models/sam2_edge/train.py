"""Training recipe of sam2-edge, with the weights cached under ``cache_dir("sam2-edge")``.

Every step tracks a fresh batch of synthetic training clips (``clips.make_clip("train", i)``)
with the streaming recipe of ``rollout.py``: frame 0 prompted (click, clicks, box or mask),
later frames from memory. AdamW with a one-cycle schedule, gradient clipping, seeded: the same
config on the same machine and thread count gives the same weights. The cache key is
``recipe_key("sam2-edge", RECIPE_VERSION, config)`` (the config holds the architecture and every
earlier stage), so a changed config or a bumped RECIPE_VERSION retrains, editing the source alone
does not.

A recipe can have stages: ``TrainConfig.init`` names the recipe whose weights a stage starts
from (trained first, or loaded from the cache), ``clip_offset`` moves the stage onto training
clips the earlier stage never saw, and ``case_weights`` draws the clips' motion cases with
other odds than the uniform cycle (the default recipe's second stage doubles crossing,
occlusion and exit clips: the cases where a tracker switches identity or fails to re-acquire).
``wise`` < 1 interpolates a stage's trained weights with those it started from (WiSE-FT,
``blend``): the same config with ``wise=1`` is trained (or loaded) first, then blended.

Torch runs on one thread by default while a helper thread renders the next step's clips on the
second core: on a 2-core machine shared with other work, a 2-thread torch step was measured 5-8x
slower than a 1-thread one (its threads wait on each other whenever one is descheduled).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import cache_dir, recipe_key
from edgekit.models.sam2_edge import clips, rollout
from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.model import EdgeSAM2
from edgekit.progress import step_progress
from edgekit.train_checkpoint import LoopState, checkpoint_path, load_checkpoint, save_checkpoint
from edgekit.weights_cache import load_or_train, load_weights

Progress = Callable[[float, str], None]
CACHE_NAME = "sam2-edge"
PROGRESS_EVERY = 10  # training steps per tick of the progress bar
CHECKPOINT_EVERY = 20  # training steps between two resumable checkpoints (train_cached)
MAX_STRIDE = 3  # training windows take every 1st, 2nd or 3rd frame of a long clip
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights."""

    steps: int = 2000
    clips_per_step: int = 4
    frames: int = 8  # frames per clip: the prompted one + 7 tracked, so every memory slot is used
    max_items: int = 8  # (clip, object) pairs per step
    source_frames: int = 24  # render training clips this long and take `frames` of them
    lr: float = 2e-3
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 1  # torch threads; the clip generator for the next step runs beside them
    arch: EdgeConfig = field(default_factory=EdgeConfig)
    clip_offset: int = 0  # step s trains on clips clip_offset + s * clips_per_step + ...
    case_weights: tuple[float, ...] | None = None  # odds per clips.CASES; None: cycle them
    init: TrainConfig | None = None  # start from this recipe's weights (None: from scratch)
    recolour: float = 0.0  # share of training clips recoloured as a whole (see ``recolour``)
    split: str = "train"  # clips' split: "train" or "train-wide" (more photos, turned; clips.py)
    mix_split: str = ""  # a second training split ("" = none) ...
    mix_share: float = 0.0  # ... drawing this share of the clips (seeded per clip)
    wise: float = 1.0  # the stage's weights: (1 - wise) * init's + wise * trained (WiSE-FT)

    def key(self) -> str:
        """Cache key (16 hex chars): recipe_key over "sam2-edge", RECIPE_VERSION and this config,
        its architecture and ``init`` stages included (``KEY_OPTIONAL`` fields only when set)."""
        return recipe_key("sam2-edge", RECIPE_VERSION, self, optional=KEY_OPTIONAL)


#: fields that enter the cache key only when set away from their defaults
KEY_OPTIONAL = {"mix_split": "", "mix_share": 0.0, "wise": 1.0}


@dataclass
class TrainResult:
    """Trained weights and what it took: seconds, final (smoothed) loss, loss history."""

    state_dict: dict[str, torch.Tensor]
    config: TrainConfig
    seconds: float
    final_loss: float
    losses: list[float]
    cached: bool = False
    path: Path | None = None

    def build(self) -> EdgeSAM2:
        """The network with these weights, in eval mode."""
        net = EdgeSAM2(self.config.arch)
        net.load_state_dict(self.state_dict)
        return net.eval()


def weights_path(config: TrainConfig) -> Path:
    """Where the weights for ``config`` are (or will be) cached."""
    return cache_dir(CACHE_NAME) / f"sam2-edge-{config.key()}.pt"


def clip_case(config: TrainConfig, index: int) -> str | None:
    """The motion case of training clip ``index`` under ``config`` (None: clips' own cycle).

    With ``case_weights`` the case is drawn with those odds, seeded by (seed, index).
    """
    if config.case_weights is None:
        return None
    if len(config.case_weights) != len(clips.CASES) or min(config.case_weights) < 0:
        raise ValueError(
            f"case_weights must be {len(clips.CASES)} non-negative odds, one per case "
            f"{clips.CASES}; got {config.case_weights}"
        )
    odds = np.asarray(config.case_weights, dtype=np.float64)
    rng = np.random.default_rng([config.seed, index, 7])
    return clips.CASES[int(rng.choice(len(odds), p=odds / odds.sum()))]


def clip_split(config: TrainConfig, index: int) -> str:
    """The split training clip ``index`` is drawn from: ``mix_split`` with odds ``mix_share``
    (seeded by (seed, index)), else ``split``."""
    if not config.mix_split or config.mix_share <= 0.0:
        return config.split
    rng = np.random.default_rng([config.seed, index, 13])
    return config.mix_split if rng.random() < config.mix_share else config.split


def recolour(frames: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One random photometric change applied alike to every frame of a clip (T, H, W, 3) uint8:
    the colour channels shuffled, then with some odds inverted or made grey, then a random
    gamma, contrast and brightness. The masks stay exact; the backgrounds and textures then
    look less like the twelve training photos (the held-out photos are other kinds of
    images: a micrograph, a retina, a printed page, a street scene)."""
    x = frames.astype(np.float32)[..., rng.permutation(3)] / 255.0
    if rng.random() < 0.3:
        x = 1.0 - x
    if rng.random() < 0.3:
        x = np.repeat(x.mean(axis=-1, keepdims=True), 3, axis=-1)
    x = x ** np.exp(rng.uniform(-0.7, 0.7))
    x = (x - 0.5) * rng.uniform(0.6, 1.4) + 0.5 + rng.uniform(-0.15, 0.15)
    return (np.clip(x, 0.0, 1.0) * 255.0).round().astype(np.uint8)


def training_batch(config: TrainConfig, step: int) -> rollout.Batch:
    """The clips of one step: training clips clip_offset + step * clips_per_step ... (deterministic).

    With ``source_frames`` > ``frames`` each clip is rendered that long and ``frames`` frames
    are taken from it at a seeded start with a seeded stride (1, 2 or 3, as far as it fits):
    stride 1 has the per-frame motion of long clips, larger strides contain whole events
    (an object hidden and back, two objects crossing) in one training window. Objects not
    visible on the first frame taken are skipped.
    """
    first = config.clip_offset + step * config.clips_per_step
    length = max(config.frames, config.source_frames)
    batch = []
    for i in range(config.clips_per_step):
        case = clip_case(config, first + i)
        clip = clips.make_clip(
            clip_split(config, first + i),
            first + i,
            frames=length,
            size=config.arch.image_size,
            case=case,
        )
        if length > config.frames:
            rng = np.random.default_rng([config.seed, first + i])
            widest = min(MAX_STRIDE, (length - 1) // (config.frames - 1))
            stride = int(rng.integers(1, widest + 1))
            span = (config.frames - 1) * stride + 1
            start = int(rng.integers(0, length - span + 1))
            taken = slice(start, start + span, stride)
            clip = replace(clip, frames=clip.frames[taken], masks=clip.masks[taken])
        rng = np.random.default_rng([config.seed, first + i, 11])
        if rng.random() < config.recolour:
            clip = replace(clip, frames=recolour(clip.frames, rng))
        batch.append(clip)
    return rollout.make_batch(batch, config.max_items)


def blend(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], wise: float
) -> dict[str, torch.Tensor]:
    """(1 - wise) * start + wise * tuned for every floating-point tensor (the same keys and
    shapes), ``tuned``'s own value for any other (counters); a mismatch is a ValueError."""
    if set(start) != set(tuned) or any(start[k].shape != tuned[k].shape for k in tuned):
        raise ValueError("blended weights must have the same keys and shapes")
    return {
        k: ((1.0 - wise) * start[k].float() + wise * v.float()).to(v.dtype)
        if v.is_floating_point()
        else v.clone()
        for k, v in tuned.items()
    }


def load_init(net: EdgeSAM2, weights: dict[str, torch.Tensor]) -> list[str]:
    """Start ``net`` from ``weights``, the same architecture or one with fewer memory layers.

    Memory-attention layers the weights lack are added as no-ops (MemoryLayer.start_as_identity),
    so the grown network computes what the trained one did and a stage can fine-tune the new
    capacity from there. Any other missing key, an unexpected key or a shape mismatch is a
    ValueError naming them. Returns the keys that started fresh.
    """
    own = net.state_dict()
    layers = net.memory_attention.layers
    new_layers = [
        i
        for i in range(len(layers))
        if f"memory_attention.layers.{i}.norms.0.weight" not in weights
    ]
    grown = tuple(f"memory_attention.layers.{i}." for i in new_layers)
    missing = [k for k in own if k not in weights]
    problems = [k for k in missing if not k.startswith(grown)] if grown else missing
    problems += [k for k in weights if k not in own]
    problems += [k for k in weights if k in own and own[k].shape != weights[k].shape]
    if problems:
        raise ValueError(
            f"init weights do not fit this architecture (only added memory layers may be "
            f"missing): {', '.join(problems[:8])}{' ...' if len(problems) > 8 else ''}"
        )
    net.load_state_dict(weights, strict=False)
    for i in new_layers:
        layers[i].start_as_identity()
    return missing


def train_model(
    config: TrainConfig,
    progress: Progress | None = None,
    show_progress: bool = False,
    init_weights: dict[str, torch.Tensor] | None = None,
    checkpoint: Path | None = None,
) -> TrainResult:
    """Train EdgeSAM2 under ``config`` from scratch or from ``init_weights`` (no cache involved).

    ``progress(fraction, message)`` is called every few steps; ``show_progress`` draws a bar on
    stderr (edgekit.progress) advancing every PROGRESS_EVERY steps. With ``checkpoint`` the
    whole training state is written there every CHECKPOINT_EVERY steps and a run that finds one
    of the same recipe continues from it (edgekit.train_checkpoint): an interrupted run resumed
    ends with the same weights as an uninterrupted one.
    """
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    chunks = -(-config.steps // PROGRESS_EVERY)
    try:
        with step_progress("train sam2-edge", chunks, show_progress) as bar:
            torch.manual_seed(config.seed)
            rng = np.random.default_rng(config.seed)
            net = EdgeSAM2(config.arch)
            if init_weights is not None:
                load_init(net, init_weights)
            optimizer = torch.optim.AdamW(
                net.parameters(), lr=config.lr, weight_decay=config.weight_decay
            )
            schedule = torch.optim.lr_scheduler.OneCycleLR(
                optimizer, max_lr=config.lr, total_steps=config.steps, pct_start=0.1
            )
            loop = LoopState()
            if checkpoint is not None:
                resumed = load_checkpoint(checkpoint, config.key(), net, optimizer, schedule, rng)
                if resumed is not None:
                    loop = resumed
                    for _ in range(loop.step // PROGRESS_EVERY):
                        bar(f"resumed at step {loop.step}/{config.steps}")
            started = time.perf_counter() - loop.seconds
            net.train()
            prefetch = ThreadPoolExecutor(max_workers=1)  # makes the next step's clips
            upcoming = prefetch.submit(training_batch, config, loop.step)
            for step in range(loop.step, config.steps):
                batch = upcoming.result()
                if step + 1 < config.steps:
                    upcoming = prefetch.submit(training_batch, config, step + 1)
                loss, parts = rollout.rollout_loss(net, batch, rng)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
                optimizer.step()
                schedule.step()
                value = float(loss.detach())
                loop.losses.append(value)
                loop.ema = value if loop.ema is None else 0.95 * loop.ema + 0.05 * value
                message = (
                    f"step {step + 1}/{config.steps} loss {loop.ema:.3f} "
                    f"(prompted {parts['prompted']:.2f}, tracked {parts['tracked']:.2f})"
                )
                if step % PROGRESS_EVERY == 0:
                    bar(message)
                if progress and (step % 5 == 0 or step == config.steps - 1):
                    progress((step + 1) / config.steps, message)
                loop.step = step + 1
                due = loop.step % CHECKPOINT_EVERY == 0 and loop.step < config.steps
                if checkpoint is not None and due:
                    loop.seconds = time.perf_counter() - started
                    save_checkpoint(checkpoint, config.key(), loop, net, optimizer, schedule, rng)
            seconds = time.perf_counter() - started
            prefetch.shutdown()
    finally:
        torch.set_num_threads(previous_threads)
    net.eval()
    state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    return TrainResult(state, config, seconds, float(loop.ema or 0.0), loop.losses)


def _blob(result: TrainResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "config": asdict(result.config),
        "seconds": result.seconds,
        "final_loss": result.final_loss,
        "losses": result.losses,
        "torch": str(torch.__version__),
    }
    return {"state_dict": result.state_dict, "meta": meta}


def _decode(config: TrainConfig, blob: dict[str, Any], path: Path) -> TrainResult:
    meta = blob["meta"]
    return TrainResult(
        blob["state_dict"],
        config,
        float(meta["seconds"]),
        float(meta["final_loss"]),
        [float(v) for v in meta["losses"]],
        cached=True,
        path=path,
    )


def load_cached(config: TrainConfig, path: Path | None = None) -> TrainResult | None:
    """The cached weights of ``config`` (or at ``path``), or None when absent or unreadable."""
    path = path or weights_path(config)
    return load_weights(path, None, lambda blob, found: _decode(config, blob, found))


def train_cached(
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    force: bool = False,
    show_progress: bool = True,
    shipped: Path | None = None,
) -> TrainResult:
    """Load the weights of ``config`` or train them (and cache them atomically).

    Weights are looked up in the folder ``shipped`` (a package's bundled weights, same file
    names) first, then in the cache. A staged recipe first loads or trains its ``init`` recipe
    the same way (``force`` only retrains the last stage). Training writes a resumable
    checkpoint next to the weights' path (``<name>.partial.pt``, removed when the weights are
    saved); an interrupted run continues from it unless ``force`` starts over.
    """
    config = config or TrainConfig()
    path = weights_path(config)
    partial = checkpoint_path(path)

    def train() -> TrainResult:
        if config.wise != 1.0:
            if config.init is None or not 0.0 < config.wise < 1.0:
                raise ValueError(f"wise must be in (0, 1) on a stage with an init, got {config}")
            tuned = train_cached(replace(config, wise=1.0), progress, force, show_progress, shipped)
            start_weights = train_cached(config.init, progress, False, show_progress, shipped)
            state = blend(start_weights.state_dict, tuned.state_dict, config.wise)
            return TrainResult(
                state, config, tuned.seconds, tuned.final_loss, tuned.losses, path=path
            )
        start = None
        if config.init is not None:
            start = train_cached(config.init, progress, False, show_progress, shipped).state_dict
        if force:
            partial.unlink(missing_ok=True)
        result = train_model(
            config, progress, show_progress, init_weights=start, checkpoint=partial
        )
        result.path = path
        return result

    result = load_or_train(
        path,
        shipped,
        train,
        load=lambda blob, found: _decode(config, blob, found),
        save=_blob,
        force=force,
    )
    if not result.cached:
        partial.unlink(missing_ok=True)
    return result
