"""Planning = task prediction + DDIM sampling of the plan tensor, on numpy through runners.

Runners are anything with ``run(feeds) -> outputs`` (a torch runtime session, an ONNX Runtime
session of an exported bundle, ...): "task" maps ``start``, ``goal`` (B, O) to ``logits``
(B, K); "denoiser" maps ``noisy`` (B, T, D), ``timestep`` (B,), ``task`` (B, K), ``start``,
``goal`` to ``x0`` (B, T, D). The loop applies the condition projection after every step, as
PDPP / MTID do, and reads the plan off the action block of the final x0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edgekit.card import Runner
from edgekit.errors import InputError
from edgekit.models.mtid.layout import Layout, decode_actions, one_hot, project
from edgekit.models.mtid.schedule import Schedule, ddim_timesteps


@dataclass(frozen=True)
class PlanResult:
    """``actions`` (B, T) int64, ``task`` (B,) int64 (the task the planner was given),
    ``x0`` (B, T, D) float32 (the final clean plan tensor)."""

    actions: np.ndarray
    task: np.ndarray
    x0: np.ndarray


def ddim_plan(
    denoiser: Runner,
    task: np.ndarray,
    start: np.ndarray,
    goal: np.ndarray,
    noise: np.ndarray,
    schedule: Schedule,
    layout: Layout,
    steps: int = 10,
) -> np.ndarray:
    """Deterministic DDIM (eta = 0) from ``noise`` (B, T, D) to a clean plan x0 (B, T, D) float32,
    conditioned on ``task`` (B, K) one-hot and the frames ``start`` / ``goal`` (B, O)."""
    layout.check(noise)
    ab = schedule.alpha_bar()
    times = ddim_timesteps(schedule, steps)
    cond = {
        "task": task.astype(np.float32),
        "start": start.astype(np.float32),
        "goal": goal.astype(np.float32),
    }
    x = project(noise, task, start, goal, layout).astype(np.float64)
    for i, t in enumerate(times):
        stamp = np.full(len(x), float(t), dtype=np.float32)
        x0 = denoiser.run({"noisy": x.astype(np.float32), "timestep": stamp, **cond})["x0"]
        x0 = np.asarray(x0, dtype=np.float64)
        if i == len(times) - 1:
            return x0.astype(np.float32)
        a_t, a_prev = ab[t], ab[times[i + 1]]
        eps = (x - np.sqrt(a_t) * x0) / np.sqrt(1 - a_t)
        x = np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps
        x = project(x, task, start, goal, layout).astype(np.float64)
    raise AssertionError("unreachable: the loop returns at t = 0")


def predict_task(runner: Runner, start: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """(B,) int64 argmax of the task classifier's logits."""
    logits = runner.run({"start": start.astype(np.float32), "goal": goal.astype(np.float32)})
    return np.argmax(np.asarray(logits["logits"]), axis=-1).astype(np.int64)


def plan(
    runners: Mapping[str, Runner],
    start: np.ndarray,
    goal: np.ndarray,
    horizon: int,
    layout: Layout,
    schedule: Schedule,
    steps: int = 10,
    seed: int = 0,
    task: np.ndarray | None = None,
) -> PlanResult:
    """Plans of ``horizon`` steps from frames ``start`` / ``goal`` (B, O): the "task" runner's
    prediction (or the given ``task`` (B,)) conditions DDIM from seeded Gaussian noise."""
    start, goal = np.asarray(start, np.float32), np.asarray(goal, np.float32)
    if start.ndim != 2 or start.shape != goal.shape or start.shape[1] != layout.obs_dim:
        raise InputError(
            f"start and goal must both be (B, {layout.obs_dim}), got {start.shape} and {goal.shape}"
        )
    if horizon < 2:
        raise InputError(f"horizon must be >= 2, got {horizon}")
    if task is None:
        task = predict_task(runners["task"], start, goal)
    task = np.asarray(task, dtype=np.int64)
    noise = np.random.default_rng(seed).standard_normal((len(start), horizon, layout.width))
    x0 = ddim_plan(
        runners["denoiser"],
        one_hot(task, layout.tasks),
        start,
        goal,
        noise,
        schedule,
        layout,
        steps,
    )
    return PlanResult(decode_actions(x0, layout), task, x0)
