"""Rollouts of a per-agent policy graph in the spread task, for any runner (torch, ONNX...).

Every agent runs the same graph on its own entity set; actions are the argmax of the logits.
Metrics per agent count: "distance", the team distance D (mean over landmarks of the
nearest-agent distance) averaged over the steps of an episode (lower is better), and
"coverage", the final fraction of landmarks with an agent within COVER_RADIUS.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from edgekit.card import Runner
from edgekit.errors import InputError
from edgekit.models.hissd.data import behaviour_actions
from edgekit.models.hissd.env import ACTIONS, Spread

PolicyFn = Callable[[np.ndarray], np.ndarray]  # entities (M, E, 5) -> logits (M, 5)


def runner_policy(runner: Runner) -> PolicyFn:
    """The policy of a graph runner with input "entities" and output "logits"."""

    def act(entities: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"entities": entities})["logits"])

    return act


def rollout(
    policy: PolicyFn | str, n: int, episodes: int, horizon: int, seed: int
) -> dict[str, float]:
    """Play ``episodes`` episodes with n agents; ``policy`` is a PolicyFn or a behaviour name
    ("expert", "nearest", "random"). Returns {"distance", "coverage"} averaged over episodes."""
    if episodes < 1 or horizon < 1:
        raise InputError(f"episodes and horizon must be >= 1, got {episodes}, {horizon}")
    rng = np.random.default_rng([seed, n, 1])
    state = Spread.reset(episodes, n, rng)
    total = np.zeros(episodes)
    for _ in range(horizon):
        if isinstance(policy, str):
            act = behaviour_actions(policy, state, rng, noise=0.0)
        else:
            entities = state.observe()  # (B, n, E, 5)
            logits = policy(entities.reshape(episodes * n, *entities.shape[2:]))
            if logits.shape != (episodes * n, ACTIONS):
                raise InputError(
                    f"policy logits must be ({episodes * n}, {ACTIONS}), got {logits.shape}"
                )
            act = logits.argmax(axis=1).reshape(episodes, n)
        state.step(act)
        total += state.distance()
    return {"distance": float(total.mean() / horizon), "coverage": float(state.coverage().mean())}
