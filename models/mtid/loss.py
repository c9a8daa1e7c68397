"""The masked proximity loss and the x0-diffusion training loss of MTID.

Masked proximity loss: squared error on the action block of the plan tensor, weighted per step
by w_t, which is ``end_weight`` at the first and last steps and falls linearly to 1 in the middle
(the steps next to the observed start and goal frames are the ones the frames pin down), and
per action by ``mask_scale`` for actions of the sample's task (1 for the others), so errors on
task-relevant actions count more. The task and observation blocks carry no loss: the condition
projection writes them.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.errors import InputError
from edgekit.models.mtid.layout import Layout
from edgekit.models.mtid.schedule import Schedule


def proximity_weights(horizon: int, end_weight: float) -> np.ndarray:
    """(T,) float32 step weights: ``end_weight`` at both ends, linear down to 1 in the middle.

    T = 3 -> [w, 1, w]; T = 4 -> [w, 1, 1, w]; T = 5 -> [w, (w + 1) / 2, 1, (w + 1) / 2, w].
    """
    if horizon < 2:
        raise InputError(f"horizon must be >= 2, got {horizon}")
    if end_weight < 1:
        raise InputError(
            f"end_weight must be >= 1 (ends weigh at least the middle), got {end_weight}"
        )
    half = horizon // 2
    if horizon % 2 == 0:
        side = np.linspace(end_weight, 1.0, half)
        weights = np.concatenate([side, side[::-1]])
    else:
        side = np.linspace(end_weight, 1.0, half + 1)
        weights = np.concatenate([side, side[::-1][1:]])
    return weights.astype(np.float32)


def masked_proximity_weights(
    horizon: int, task_mask: torch.Tensor, end_weight: float, mask_scale: float
) -> torch.Tensor:
    """(B, T, A) loss weights: w_t * (mask_scale if the action is in the task's set else 1);
    ``task_mask`` (B, A) is 0/1."""
    steps = torch.from_numpy(proximity_weights(horizon, end_weight))  # (T,)
    scale = 1.0 + (mask_scale - 1.0) * task_mask  # (B, A)
    return steps[None, :, None] * scale[:, None, :]


def weighted_action_mse(
    pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor, layout: Layout
) -> torch.Tensor:
    """Scalar mean over (B, T, A) of weights * (pred - target)^2 on the action block of the
    plan tensors ``pred`` / ``target`` (B, T, D); ``weights`` (B, T, A) or broadcastable."""
    block = layout.action_slice
    return torch.mean(weights * (pred[:, :, block] - target[:, :, block]) ** 2)


def x0_loss(
    denoiser: torch.nn.Module,
    x0: torch.Tensor,
    task: torch.Tensor,
    start: torch.Tensor,
    goal: torch.Tensor,
    weights: torch.Tensor,
    schedule: Schedule,
    layout: Layout,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """x0-parameterised diffusion loss: noise the clean plan ``x0`` (B, T, D) to a random t,
    let ``denoiser`` predict x0 back (it projects the conditions itself), weighted action MSE."""
    ab = torch.tensor(schedule.alpha_bar(), dtype=torch.float32)
    t = torch.randint(0, schedule.steps, (x0.shape[0],), generator=generator)
    eps = torch.randn(x0.shape, generator=generator)
    a = ab[t][:, None, None]
    noisy = a.sqrt() * x0 + (1 - a).sqrt() * eps
    pred = denoiser(noisy, t.to(torch.float32), task, start, goal)
    return weighted_action_mse(pred, x0, weights, layout)
