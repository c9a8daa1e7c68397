"""Synthetic procedure-planning data: tasks as Markov chains over action subsets, noisy frames.

A world has K tasks and A actions. Task k uses a subset of ``per_task`` actions (subsets overlap:
an action can belong to several tasks), draws its first action from ``initial[k]`` and each next
action from ``transition[k, previous]`` (no repeats of the previous action). The scene is a vector
in R^O: it starts at ``base[k]`` and every action a adds ``effect[a]``. The start frame shows the
scene before the first action plus a cue of that action (``pre[a_1]``, the tools laid out); the
goal frame shows the scene after the last one. Both frames carry Gaussian noise of std ``noise``
per dimension, so the task, the first and last actions and the actions in between must all be
inferred from two noisy frames and the chain's structure, as in instructional-video planning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass(frozen=True)
class World:
    """The generative model of one synthetic planning domain.

    ``members`` (K, A) bool: action a belongs to task k. ``initial`` (K, A) and ``transition``
    (K, A, A) are probabilities, zero outside the task's actions (rows of non-member actions are
    zero). ``base`` (K, O), ``pre`` (A, O), ``effect`` (A, O) float64 scene vectors.
    """

    members: np.ndarray
    initial: np.ndarray
    transition: np.ndarray
    base: np.ndarray
    pre: np.ndarray
    effect: np.ndarray
    noise: float

    @property
    def tasks(self) -> int:
        return int(self.members.shape[0])

    @property
    def actions(self) -> int:
        return int(self.members.shape[1])

    @property
    def obs_dim(self) -> int:
        return int(self.base.shape[1])


@dataclass(frozen=True)
class Plans:
    """A batch of N procedures of horizon T.

    ``task`` (N,) int64, ``actions`` (N, T) int64, ``start`` / ``goal`` (N, O) float32 frames.
    """

    task: np.ndarray
    actions: np.ndarray
    start: np.ndarray
    goal: np.ndarray

    def __len__(self) -> int:
        return len(self.task)

    @property
    def horizon(self) -> int:
        return int(self.actions.shape[1])

    def take(self, index: np.ndarray) -> Plans:
        """The plans at ``index`` (any numpy index)."""
        return Plans(self.task[index], self.actions[index], self.start[index], self.goal[index])


def make_world(
    tasks: int = 8,
    actions: int = 32,
    per_task: int = 6,
    obs_dim: int = 24,
    noise: float = 0.8,
    concentration: float = 0.4,
    seed: int = 0,
) -> World:
    """A random world; ``concentration`` is the Dirichlet parameter of the chain's rows (small:
    nearly deterministic procedures, large: close to uniform)."""
    if tasks < 1 or obs_dim < 1:
        raise InputError(f"tasks and obs_dim must be >= 1, got {tasks} and {obs_dim}")
    if not 2 <= per_task <= actions:
        raise InputError(f"per_task must be in 2..actions ({actions}), got {per_task}")
    if noise < 0 or concentration <= 0:
        raise InputError(f"noise must be >= 0 and concentration > 0, got {noise}, {concentration}")
    rng = np.random.default_rng(seed)
    members = np.zeros((tasks, actions), dtype=bool)
    initial = np.zeros((tasks, actions))
    transition = np.zeros((tasks, actions, actions))
    for k in range(tasks):
        own = rng.choice(actions, per_task, replace=False)
        members[k, own] = True
        initial[k, own] = rng.dirichlet(np.full(per_task, concentration))
        for a in own:
            others = own[own != a]
            transition[k, a, others] = rng.dirichlet(np.full(per_task - 1, concentration))
    return World(
        members=members,
        initial=initial,
        transition=transition,
        base=rng.standard_normal((tasks, obs_dim)),
        pre=rng.standard_normal((actions, obs_dim)),
        effect=rng.standard_normal((actions, obs_dim)),
        noise=float(noise),
    )


def sample_plans(world: World, count: int, horizon: int, seed: int) -> Plans:
    """``count`` procedures of ``horizon`` steps, tasks uniform, frames noisy (see module doc)."""
    if count < 1:
        raise InputError(f"count must be >= 1, got {count}")
    if horizon < 2:
        raise InputError(f"horizon must be >= 2 (a start and a goal step), got {horizon}")
    rng = np.random.default_rng(seed)
    task = rng.integers(0, world.tasks, count)
    actions = np.zeros((count, horizon), dtype=np.int64)
    for i, k in enumerate(task):
        actions[i, 0] = rng.choice(world.actions, p=world.initial[k])
        for t in range(1, horizon):
            actions[i, t] = rng.choice(world.actions, p=world.transition[k, actions[i, t - 1]])
    scene = world.base[task]  # (N, O)
    start = scene + world.pre[actions[:, 0]]
    goal = scene + world.effect[actions].sum(axis=1)  # (N, O): the scene after every action
    start = start + world.noise * rng.standard_normal(start.shape)
    goal = goal + world.noise * rng.standard_normal(goal.shape)
    return Plans(task.astype(np.int64), actions, start.astype(np.float32), goal.astype(np.float32))


def task_action_table(plans: Plans, tasks: int, actions: int) -> np.ndarray:
    """(K, A) float32 0/1: action a was seen in a training plan of task k (the action-aware mask
    is built from training data, as MTID builds it from the dataset's task-to-actions map)."""
    table = np.zeros((tasks, actions), dtype=np.float32)
    table[np.repeat(plans.task, plans.horizon), plans.actions.ravel()] = 1.0
    return table
