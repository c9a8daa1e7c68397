"""Offline multi-task data of mixed quality from the spread task (``env.py``).

Every episode is played by one behaviour policy, drawn per episode:

- "expert": optimal landmark assignment, then head for the assigned landmark (10 % random moves);
- "nearest": every agent heads for its own nearest landmark (they pile up; 10 % random moves);
- "random": uniform moves.

``collect`` returns per-task ``Transitions``: entity sets before and after each step, the
joint action and the team reward, all agents of one time step together (the value mixer
needs them side by side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.models.hissd.env import ACTIONS, Spread, check_agents, expert_actions, nearest_actions

BEHAVIOURS = ("expert", "nearest", "random")


@dataclass
class Transitions:
    """N team transitions of one task (n agents, E = 2 n entities).

    obs, next_obs (N, n, E, 5) float32; actions (N, n) int64; reward (N,) float32;
    behaviour (N,) int64 index into BEHAVIOURS.
    """

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    reward: np.ndarray
    behaviour: np.ndarray

    def __len__(self) -> int:
        return len(self.reward)

    @property
    def n(self) -> int:
        return self.obs.shape[1]


def behaviour_actions(
    kind: str, state: Spread, rng: np.random.Generator, noise: float = 0.1
) -> np.ndarray:
    """(B, n) actions of behaviour ``kind``; ``noise`` is the chance of a uniform move."""
    b, n = state.agents.shape[:2]
    uniform = rng.integers(0, ACTIONS, (b, n))
    if kind == "random":
        return uniform
    if kind == "expert":
        act = expert_actions(state)
    elif kind == "nearest":
        act = nearest_actions(state)
    else:
        raise InputError(f"behaviour must be one of {BEHAVIOURS}, got {kind!r}")
    return np.where(rng.random((b, n)) < noise, uniform, act)


def collect(
    n: int, episodes: int, horizon: int, mix: tuple[float, float, float], seed: int
) -> Transitions:
    """``episodes`` episodes of ``horizon`` steps with n agents; behaviour drawn per episode
    with probabilities ``mix`` (expert, nearest, random)."""
    n = check_agents(n)
    if len(mix) != len(BEHAVIOURS) or min(mix) < 0 or not np.isclose(sum(mix), 1.0):
        raise InputError(f"mix must be 3 probabilities (expert, nearest, random), got {mix}")
    if horizon < 1:
        raise InputError(f"horizon must be >= 1, got {horizon}")
    rng = np.random.default_rng([seed, n])
    kinds = rng.choice(len(BEHAVIOURS), size=episodes, p=np.asarray(mix))
    state = Spread.reset(episodes, n, rng)
    obs, nxt, acts, rews = [], [], [], []
    for _ in range(horizon):
        act = np.zeros((episodes, n), np.int64)
        for k, kind in enumerate(BEHAVIOURS):
            sel = kinds == k
            if sel.any():
                act[sel] = behaviour_actions(
                    kind, Spread(state.agents[sel], state.landmarks[sel]), rng
                )
        obs.append(state.observe())
        rews.append(state.step(act))
        nxt.append(state.observe())
        acts.append(act)
    return Transitions(
        np.concatenate(obs),
        np.concatenate(nxt),
        np.concatenate(acts).astype(np.int64),
        np.concatenate(rews).astype(np.float32),
        np.tile(kinds, horizon).astype(np.int64),
    )


def episode_returns(data: Transitions) -> dict[str, float]:
    """Mean per-step reward (progress) of each behaviour's transitions in ``data``."""
    out = {}
    for k, kind in enumerate(BEHAVIOURS):
        sel = data.behaviour == k
        out[kind] = float(data.reward[sel].mean()) if sel.any() else float("nan")
    return out
