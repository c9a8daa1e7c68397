"""hissd card: HiSSD's per-agent policy (entity attention, common-skill planner, task skill,
controller) trained offline on mixed-quality multi-task spread data; one graph.

"policy": entities (B, E, 5) float32, one row per entity (row 0 the agent itself, then the
other agents, then the landmarks: ``[is_self, is_ally, is_landmark, dx, dy]``), E dynamic
(E = 2 n for n agents) -> logits (B, 5) float32; the action is the argmax. Every agent of a
team runs the same graph on its own entity set, for any team size.

Options are ``HiSSDConfig`` fields; training is cached under ``cache_dir("hissd")`` (one to
three minutes on one thread the first time). ``edgekit eval hissd`` runs the study in experiment.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.errors import InputError
from edgekit.models.hissd.env import ACTIONS, Spread
from edgekit.models.hissd.evaluate import rollout, runner_policy
from edgekit.models.hissd.graphs import GRAPH, policy_graph
from edgekit.models.hissd.train import HiSSDConfig, Trained, train_policy

EVAL_EPISODES = 64  # episodes per unseen agent count scored by evaluate
AGREEMENT_COUNTS = (2, 3, 4, 5, 6)


class HiSSDCard(ModelCard):
    """HiSSD trained on agent counts ``train_agents``, scored zero-shot on ``test_agents``."""

    name: ClassVar[str] = "hissd"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "offline-multi-task-marl"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "offline multi-task MARL with common skills (advantage-weighted planner, expectile "
        "value through an attention mixer) and contrastive task skills; entity-attention "
        "per-agent policy for any agent count (multi-agent particle spread task)"
    )
    primary_metric: ClassVar[str | None] = "coverage"
    int8_budget: ClassVar[float] = 0.1
    int8_mode: ClassVar[str] = "dynamic"
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.5, rtol=0.2),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "action_agreement": 0.99,
        "max_logit_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for key in ("train_agents", "test_agents", "mix"):
            if key in options:
                options[key] = tuple(options[key])
        self.config = config_from_options("hissd", HiSSDConfig, options)
        self._trained: Trained | None = None

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """The HiSSD policy, from the cache or trained now."""
        if self._trained is None:
            self._trained = train_policy(self.config, "hissd", progress)
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "policy": entities (B, E, 5) -> logits (B, 5), batch and E dynamic."""
        return [policy_graph(self.train().policy, self._entities(3, 1, seed=5))]

    # ---- real data ---------------------------------------------------------------------------
    def _entities(self, n: int, episodes: int, seed: int) -> np.ndarray:
        """(episodes * n, 2 n, 5) entity sets of every agent in fresh spread episodes."""
        obs = Spread.reset(episodes, n, np.random.default_rng([seed, n])).observe()
        return obs.reshape(episodes * n, 2 * n, obs.shape[-1])

    def golden_inputs(self) -> dict[str, Feeds]:
        """The five agents of one unseen-size team (5, 10, 5): E is not a training size."""
        return {GRAPH: {"entities": self._entities(5, 1, seed=11)}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-agent entity sets (1, E, 5) from the training tasks' offline data."""
        sets = self.config.data()
        feeds = []
        for i in range(limit):
            t = sets[self.config.train_agents[i % len(sets)]]
            row = t.obs[(i * 97) % len(t), i % t.n]
            feeds.append({"entities": np.ascontiguousarray(row[None])})
        return {GRAPH: feeds}

    def preprocessing(self) -> dict[str, Any]:
        c = self.config
        return {
            "input": "entities (B, E, 5): [is_self, is_ally, is_landmark, dx, dy]; row 0 the "
            "agent (absolute x, y), then other agents and landmarks relative to it",
            "task": f"spread: n agents cover n landmarks in [-1, 1]^2, {c.horizon} steps",
            "trained_agent_counts": list(c.train_agents),
            "output": {"name": "logits", "postprocess": "argmax: stay, +x, -x, +y, -y"},
        }

    def labels(self) -> list[str]:
        return ["stay", "+x", "-x", "+y", "-y"]

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Zero-shot final coverage (an agent within env.COVER_RADIUS of a landmark) and mean
        team distance over ``test_agents`` (EVAL_EPISODES episodes each, greedy actions)."""
        act = runner_policy(runners[GRAPH])
        scores = [
            rollout(act, n, EVAL_EPISODES, self.config.horizon, seed=100)
            for n in self.config.test_agents
        ]
        return {
            "coverage": float(np.mean([s["coverage"] for s in scores])),
            "distance": float(np.mean([s["distance"] for s in scores])),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Argmax agreement and max |logit difference| on entity sets of 2..6-agent teams."""
        agree, worst = [], 0.0
        for n in AGREEMENT_COUNTS:
            x = self._entities(n, 16, seed=21)
            ref = np.asarray(reference[GRAPH].run({"entities": x})["logits"], np.float64)
            cand = np.asarray(candidate[GRAPH].run({"entities": x})["logits"], np.float64)
            if ref.shape != (len(x), ACTIONS) or cand.shape != ref.shape:
                raise InputError(
                    f"policy logits must be ({len(x)}, {ACTIONS}), got {ref.shape}, {cand.shape}"
                )
            agree.append(ref.argmax(axis=1) == cand.argmax(axis=1))
            worst = max(worst, float(np.abs(ref - cand).max()))
        return {
            "action_agreement": float(np.concatenate(agree).mean()),
            "max_logit_abs_error": worst,
        }
