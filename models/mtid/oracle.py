"""The Bayes-optimal planner of a synthetic world: the exact MAP plan given the two frames.

It knows the generative model (tasks.World): the posterior of (task k, a_1..a_T) given the start
and goal frames is, up to a constant, p(k) initial[k, a_1] prod_t transition[k, a_t, a_t+1]
N(V_s; base_k + pre[a_1], noise^2 I) N(V_g; base_k + sum_t effect[a_t], noise^2 I). Enumerating
every plan with nonzero prior gives the exact MAP plan, which maximises the expected success
rate, so its SR is the ceiling any learned planner can reach on that world.
"""

from __future__ import annotations

import itertools

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mtid.tasks import World

MAX_CANDIDATES = 200_000


def candidate_plans(world: World, horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (task, plan) with nonzero prior: task (M,), actions (M, T), log prior (M,)."""
    tasks, plans, logp = [], [], []
    for k in range(world.tasks):
        own = np.flatnonzero(world.members[k])
        for seq in itertools.product(own, repeat=horizon):
            p = world.initial[k, seq[0]] / world.tasks
            for a, b in itertools.pairwise(seq):
                p *= world.transition[k, a, b]
            if p > 0:
                tasks.append(k)
                plans.append(seq)
                logp.append(np.log(p))
            if len(plans) > MAX_CANDIDATES:
                raise InputError(
                    f"too many candidate plans (> {MAX_CANDIDATES}) to enumerate; "
                    "use a shorter horizon or fewer actions per task"
                )
    return np.array(tasks), np.array(plans, dtype=np.int64), np.array(logp)


def map_plans(
    world: World, start: np.ndarray, goal: np.ndarray, horizon: int, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """MAP (task (B,), actions (B, T)) for frames ``start`` / ``goal`` (B, O)."""
    if world.noise <= 0:
        raise InputError("the Bayes-optimal planner needs noise > 0 (a proper likelihood)")
    task, actions, logp = candidate_plans(world, horizon)
    mean_start = world.base[task] + world.pre[actions[:, 0]]  # (M, O)
    mean_goal = world.base[task] + world.effect[actions].sum(axis=1)  # (M, O)
    best = np.zeros(len(start), dtype=np.int64)
    for lo in range(0, len(start), chunk):
        s, g = start[lo : lo + chunk, None, :], goal[lo : lo + chunk, None, :]  # (b, 1, O)
        sq = ((s - mean_start[None]) ** 2).sum(-1) + ((g - mean_goal[None]) ** 2).sum(-1)
        best[lo : lo + chunk] = np.argmax(logp[None] - sq / (2 * world.noise**2), axis=1)
    return task[best], actions[best]
