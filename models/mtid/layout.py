"""The plan tensor x (N, T, K + A + O) and its condition projection (PDPP / MTID layout).

Each step t of a plan is one row [task one-hot (K) | action one-hot (A) | observation (O)]: the
task block repeats the task at every step, the observation block holds the start frame at
t = 0, the goal frame at t = T - 1 and zeros in between. Diffusion runs on the whole tensor,
but after every step the condition projection overwrites the task and observation blocks with
the known values, so only the action block is actually generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edgekit.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from edgekit.models.mtid.tasks import Plans


@dataclass(frozen=True)
class Layout:
    """Block sizes of one plan step: K tasks, A actions, O observation dims."""

    tasks: int
    actions: int
    obs_dim: int

    @property
    def width(self) -> int:
        """D = K + A + O."""
        return self.tasks + self.actions + self.obs_dim

    @property
    def action_slice(self) -> slice:
        return slice(self.tasks, self.tasks + self.actions)

    def check(self, x: np.ndarray) -> None:
        """Raise InputError unless ``x`` is (N, T >= 2, D)."""
        if x.ndim != 3 or x.shape[1] < 2 or x.shape[2] != self.width:
            raise InputError(f"plan tensor must be (N, T >= 2, {self.width}), got {x.shape}")


def one_hot(index: np.ndarray, size: int) -> np.ndarray:
    """float32 one-hot rows (..., size) of integer ``index`` (...)."""
    index = np.asarray(index)
    if index.size and (index.min() < 0 or index.max() >= size):
        raise InputError(f"indices must be in 0..{size - 1}, got {index.min()}..{index.max()}")
    return np.eye(size, dtype=np.float32)[index]


def project(
    x: np.ndarray, task: np.ndarray, start: np.ndarray, goal: np.ndarray, layout: Layout
) -> np.ndarray:
    """The condition projection on numpy: a copy of ``x`` (N, T, D) with the task block set to
    ``task`` (N, K) at every step, the observation block to ``start`` (N, O) at t = 0, ``goal``
    (N, O) at t = T - 1 and 0 in between; the action block is kept."""
    layout.check(x)
    out = np.array(x, dtype=np.float32, copy=True)
    k, a = layout.tasks, layout.tasks + layout.actions
    out[:, :, :k] = task[:, None, :]
    out[:, :, a:] = 0.0
    out[:, 0, a:] = start
    out[:, -1, a:] = goal
    return out


def encode_plans(plans: Plans, layout: Layout) -> np.ndarray:
    """The clean plan tensor x0 (N, T, D) float32 of ``plans`` (true task, one-hot actions)."""
    n, t = plans.actions.shape
    x = np.zeros((n, t, layout.width), dtype=np.float32)
    x[:, :, layout.action_slice] = one_hot(plans.actions, layout.actions)
    return project(x, one_hot(plans.task, layout.tasks), plans.start, plans.goal, layout)


def decode_actions(x: np.ndarray, layout: Layout) -> np.ndarray:
    """(N, T) int64: the argmax of each step's action block of ``x`` (N, T, D)."""
    layout.check(x)
    return np.argmax(x[:, :, layout.action_slice], axis=-1).astype(np.int64)


def project_torch(
    actions: torch.Tensor, task: torch.Tensor, start: torch.Tensor, goal: torch.Tensor
) -> torch.Tensor:
    """The condition projection in torch, built by concatenation (no in-place writes, so it
    traces to ONNX): actions (B, T, A), task (B, K), start / goal (B, O) -> x (B, T, K + A + O)."""
    import torch

    b, t, _ = actions.shape
    first = torch.zeros(t, dtype=actions.dtype)
    first[0] = 1.0
    last = torch.zeros(t, dtype=actions.dtype)
    last[-1] = 1.0
    obs = first[None, :, None] * start[:, None, :] + last[None, :, None] * goal[:, None, :]
    return torch.cat([task[:, None, :].expand(b, t, task.shape[-1]), actions, obs], dim=-1)
