"""Cooperative navigation ("spread"), a multi-agent particle task in vectorised numpy.

``n`` agents and ``n`` landmarks in the square [-1, 1]^2; every agent picks one of five moves
(stay, +x, -x, +y, -y) of length ``STEP`` per time step. The team distance D is the mean over
landmarks of the distance to the nearest agent; the shared reward is the progress
``(D_t - D_t+1) / STEP``, so the team has to spread out and cover every landmark. A task is
the agent count: the same network has to act for 2 agents and, zero-shot, for 6.

Each agent sees a set of entities (``observe``): itself, every other agent, every landmark, one
row each ``[is_self, is_ally, is_landmark, dx, dy]`` (offsets relative to the agent; the self row
holds the absolute position). The row count ``2 n`` grows with the task, which is why the
policy attends over entities instead of reading a fixed vector.

Everything runs over a leading batch of episodes: agents (B, n, 2), landmarks (B, n, 2).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError

STEP = 0.1
MOVES = np.array([[0.0, 0.0], [STEP, 0.0], [-STEP, 0.0], [0.0, STEP], [0.0, -STEP]])
ACTIONS = len(MOVES)
FEATURES = 5  # [is_self, is_ally, is_landmark, dx, dy]
COVER_RADIUS = 0.15
MAX_AGENTS = 8


def check_agents(n: int) -> int:
    """``n`` as an int, or InputError unless 2 <= n <= MAX_AGENTS."""
    if not isinstance(n, int | np.integer) or not 2 <= int(n) <= MAX_AGENTS:
        raise InputError(f"agent count must be an int in [2, {MAX_AGENTS}], got {n!r}")
    return int(n)


@dataclass
class Spread:
    """A batch of episodes: agents (B, n, 2) and landmarks (B, n, 2) float64."""

    agents: np.ndarray
    landmarks: np.ndarray

    @property
    def n(self) -> int:
        return self.agents.shape[1]

    @classmethod
    def reset(cls, episodes: int, n: int, rng: np.random.Generator) -> Spread:
        """Agents uniform in [-1, 1]^2, landmarks uniform in [-0.8, 0.8]^2."""
        n = check_agents(n)
        if episodes < 1:
            raise InputError(f"episodes must be >= 1, got {episodes}")
        return cls(rng.uniform(-1, 1, (episodes, n, 2)), rng.uniform(-0.8, 0.8, (episodes, n, 2)))

    def step(self, actions: np.ndarray) -> np.ndarray:
        """Move every agent by ``actions`` (B, n) int in [0, 5); returns the reward (B,), the
        team-distance progress ``(D_t - D_t+1) / STEP``."""
        actions = np.asarray(actions)
        if actions.shape != self.agents.shape[:2]:
            raise InputError(
                f"actions must have shape {self.agents.shape[:2]}, got {actions.shape}"
            )
        if actions.min() < 0 or actions.max() >= ACTIONS:
            raise InputError(
                f"actions must be ints in [0, {ACTIONS}), got {actions.min()}..{actions.max()}"
            )
        before = self.distance()
        self.agents = np.clip(self.agents + MOVES[actions], -1.0, 1.0)
        return (before - self.distance()) / STEP

    def distance(self) -> np.ndarray:
        """(B,) team distance D: mean over landmarks of the nearest-agent distance."""
        return team_distance(self.agents, self.landmarks)

    def observe(self) -> np.ndarray:
        """Entity sets (B, n, 2n, 5) float32, see ``observe``."""
        return observe(self.agents, self.landmarks)

    def coverage(self) -> np.ndarray:
        """(B,) fraction of landmarks with an agent within COVER_RADIUS."""
        return (landmark_distance(self.agents, self.landmarks) < COVER_RADIUS).mean(axis=1)


def landmark_distance(agents: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """(B, n_landmarks) distance from each landmark to its nearest agent."""
    d = np.linalg.norm(landmarks[:, :, None, :] - agents[:, None, :, :], axis=-1)  # (B, L, n)
    return d.min(axis=2)


def team_distance(agents: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """(B,) the mean over landmarks of the distance to the nearest agent."""
    return landmark_distance(agents, landmarks).mean(axis=1)


def observe(agents: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """Each agent's entity set: agents (B, n, 2), landmarks (B, m, 2) -> (B, n, n + m, 5).

    Row 0 is the agent itself ``[1, 0, 0, x, y]``; rows 1..n-1 the other agents in index order
    ``[0, 1, 0, x_j - x, y_j - y]``; the last m rows the landmarks ``[0, 0, 1, l_x - x, l_y - y]``.
    """
    b, n, _ = agents.shape
    m = landmarks.shape[1]
    out = np.zeros((b, n, n + m, FEATURES), np.float32)
    rel_agents = agents[:, None, :, :] - agents[:, :, None, :]  # (B, i, j, 2): j seen from i
    others = np.array([[j for j in range(n) if j != i] for i in range(n)], dtype=np.int64)
    idx = np.arange(n)[:, None]
    out[:, :, 0, 0] = 1.0
    out[:, :, 0, 3:] = agents
    out[:, :, 1:n, 1] = 1.0
    out[:, :, 1:n, 3:] = rel_agents[:, idx, others]  # (B, n, n-1, 2)
    out[:, :, n:, 2] = 1.0
    out[:, :, n:, 3:] = landmarks[:, None, :, :] - agents[:, :, None, :]
    return out


def toward(agents: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """(B, n) the move that best closes the gap to ``targets`` (B, n, 2): along the longer
    axis, or stay when already within half a step on both axes."""
    gap = targets - agents  # (B, n, 2)
    axis = np.abs(gap).argmax(axis=-1)  # (B, n)
    along = np.take_along_axis(gap, axis[..., None], -1)[..., 0]
    move = 1 + 2 * axis + (along < 0)  # +x 1, -x 2, +y 3, -y 4
    return np.where(np.abs(along) < STEP / 2, 0, move)


def optimal_assignment(agents: np.ndarray, landmarks: np.ndarray) -> np.ndarray:
    """(B, n) landmark index of each agent under the assignment with the least total distance
    (exhaustive over the n! permutations; n <= MAX_AGENTS)."""
    n = agents.shape[1]
    perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)  # (P, n)
    d = np.linalg.norm(agents[:, :, None, :] - landmarks[:, None, :, :], axis=-1)  # (B, n, n)
    cost = d[:, np.arange(n)[None, :], perms].sum(axis=-1)  # (B, P)
    return perms[cost.argmin(axis=1)]


def expert_actions(state: Spread) -> np.ndarray:
    """(B, n) every agent heads for its landmark in the optimal assignment."""
    target = optimal_assignment(state.agents, state.landmarks)
    return toward(state.agents, np.take_along_axis(state.landmarks, target[..., None], 1))


def nearest_actions(state: Spread) -> np.ndarray:
    """(B, n) every agent heads for its own nearest landmark (agents often pile up on one)."""
    d = np.linalg.norm(state.agents[:, :, None, :] - state.landmarks[:, None, :, :], axis=-1)
    target = d.argmin(axis=2)
    return toward(state.agents, np.take_along_axis(state.landmarks, target[..., None], 1))
