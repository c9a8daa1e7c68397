"""Resumable training: the whole state of a training loop in one atomically written file.

A long recipe (sam2-edge's takes hours on a laptop CPU) must survive Ctrl-C, a reboot or a
session that ends: every few steps the loop writes its state next to where the finished weights
will go, and a later run of the same recipe continues from it. The state is everything that
decides the next step, so a resumed run ends with the same weights, bit for bit, as one that was
never interrupted: the network, the optimiser and learning-rate schedule, torch's global RNG and
the loop's numpy Generator, and the loop's own bookkeeping (step, losses, seconds so far).

A checkpoint written for another recipe cannot be mixed in: it records the recipe's cache key
and is ignored (and later overwritten) when the key differs; an unreadable file is ignored too.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import atomic_write_bytes


@dataclass
class LoopState:
    """The bookkeeping of a training loop: the next step to run and what it has logged."""

    step: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    ema: float | None = None


def checkpoint_path(weights: Path) -> Path:
    """Where the in-progress state of the weights ``weights`` (a .pt path) is kept."""
    return weights.with_name(f"{weights.stem}.partial.pt")


def save_checkpoint(
    path: Path,
    key: str,
    loop: LoopState,
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    rng: np.random.Generator,
) -> None:
    """Write the training state after ``loop.step`` steps to ``path`` atomically."""
    blob = {
        "key": key,
        "loop": {
            "step": loop.step,
            "seconds": loop.seconds,
            "losses": list(loop.losses),
            "ema": loop.ema,
        },
        "net": net.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": rng.bit_generator.state,
    }
    buffer = io.BytesIO()
    torch.save(blob, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(
    path: Path,
    key: str,
    net: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    rng: np.random.Generator,
) -> LoopState | None:
    """Restore the state saved at ``path`` for recipe ``key`` into the given objects and return
    the loop's bookkeeping; None (nothing touched) when there is no usable checkpoint."""
    if not path.is_file():
        return None
    before = [copy.deepcopy(part.state_dict()) for part in (net, optimizer, schedule)]
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if blob.get("key") != key:
            return None
        loop = LoopState(
            step=int(blob["loop"]["step"]),
            seconds=float(blob["loop"]["seconds"]),
            losses=[float(v) for v in blob["loop"]["losses"]],
            ema=None if blob["loop"]["ema"] is None else float(blob["loop"]["ema"]),
        )
        net.load_state_dict(blob["net"])
        optimizer.load_state_dict(blob["optimizer"])
        schedule.load_state_dict(blob["schedule"])
    except Exception:  # a corrupt, truncated or foreign file: start over and overwrite it
        for part, state in zip((net, optimizer, schedule), before, strict=True):
            part.load_state_dict(state)
        return None
    torch.set_rng_state(blob["torch_rng"])
    rng.bit_generator.state = blob["numpy_rng"]
    return loop
