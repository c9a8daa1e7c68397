"""mtid card: MTID procedure planner = task classifier + masked x0-diffusion denoiser, two graphs.

"task": start (B, O), goal (B, O) float32 -> logits (B, K) float32.
"denoiser": noisy (B, T, D), timestep (B,) float32 in [0, timesteps - 1], task (B, K) one-hot,
start (B, O), goal (B, O) float32 -> x0 (B, T, D) float32, the predicted clean plan tensor
(D = K + A + O: task one-hot | action scores | observation, see layout.py).
A plan is the argmax of the action block after DDIM (``sampling.plan``), a loop that runs over
any runners of these graphs (torch, ONNX Runtime, ...).

Options are ``MTIDConfig`` fields; training is cached under ``cache_dir("mtid")`` (under a minute
on one thread the first time). ``edgekit eval mtid`` runs the ablation study in experiment.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.mtid.graphs import mtid_graphs
from edgekit.models.mtid.layout import one_hot
from edgekit.models.mtid.metrics import plan_metrics
from edgekit.models.mtid.sampling import plan
from edgekit.models.mtid.tasks import Plans
from edgekit.models.mtid.train import MTIDConfig, Trained, train_mtid

EVAL_PLANS = 400  # test plans scored by evaluate / agreement


class MTIDCard(ModelCard):
    """MTID trained on the synthetic Markov-chain procedures; both graphs ship in one bundle."""

    name: ClassVar[str] = "mtid"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "procedure-planning"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "procedure planning by x0-diffusion over (task | action | observation) plan tensors: "
        "latent temporal interpolation of start/goal frames by cross-attention, action-aware "
        "task mask, masked proximity loss; DDIM in 10 steps"
    )
    primary_metric: ClassVar[str | None] = "success_rate"
    int8_budget: ClassVar[float] = 0.1
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.3, rtol=0.3),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "plan_agreement": 0.99,
        "task_agreement": 0.99,
        "x0_max_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.config = config_from_options("mtid", MTIDConfig, options)
        self._trained: Trained | None = None
        self._test: Plans | None = None

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """Task classifier + MTID denoiser, from the cache or trained now."""
        if self._trained is None:
            self._trained = train_mtid(self.config, progress)
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """ "task" and "denoiser" (see the module docstring), batch axis dynamic."""
        trained = self.train()
        test = self.test()
        return mtid_graphs(trained.classifier, trained.denoiser, test.start[:2], test.goal[:2])

    # ---- real data ---------------------------------------------------------------------------
    def test(self) -> Plans:
        """The first EVAL_PLANS test plans of the synthetic world."""
        if self._test is None:
            test = self.config.data()["test"]
            self._test = test.take(np.arange(min(EVAL_PLANS, len(test))))
        return self._test

    def _denoiser_feeds(self, plans: Plans, seed: int) -> Feeds:
        c = self.config
        rng = np.random.default_rng(seed)
        b = len(plans)
        return {
            "noisy": rng.standard_normal((b, c.horizon, c.layout().width)).astype(np.float32),
            "timestep": rng.integers(0, c.timesteps, b).astype(np.float32),
            "task": one_hot(plans.task, c.tasks),
            "start": plans.start,
            "goal": plans.goal,
        }

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four test plans for each graph (the denoiser at random noise levels)."""
        plans = self.test().take(np.arange(4))
        return {
            "task": {"start": plans.start, "goal": plans.goal},
            "denoiser": self._denoiser_feeds(plans, 0),
        }

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-plan feeds from the training plans."""
        train = self.config.data()["train"]
        plans = train.take(np.arange(0, len(train), max(1, len(train) // limit))[:limit])
        denoiser = self._denoiser_feeds(plans, 1)
        return {
            "task": [
                {"start": plans.start[i : i + 1], "goal": plans.goal[i : i + 1]}
                for i in range(len(plans))
            ],
            "denoiser": [{k: v[i : i + 1] for k, v in denoiser.items()} for i in range(len(plans))],
        }

    def preprocessing(self) -> dict[str, Any]:
        c = self.config
        return {
            "input": f"start and goal frames (B, {c.obs_dim}) float32",
            "plan_tensor": {
                "layout": "task one-hot | action scores | observation per step",
                "tasks": c.tasks,
                "actions": c.actions,
                "obs_dim": c.obs_dim,
                "horizon": c.horizon,
            },
            "sampling": {
                "method": "DDIM, x0-parameterised, condition projection after every step",
                "timesteps": c.timesteps,
                "steps": c.ddim_steps,
                "betas": "cosine (s = 0.008)",
                "eta": 0.0,
            },
            "output": "plan = argmax of the action block per step, (B, T) int",
        }

    # ---- measuring -------------------------------------------------------------------------
    def _plan(self, runners: Mapping[str, Runner], seed: int = 0):  # noqa: ANN202
        c, test = self.config, self.test()
        return plan(
            runners, test.start, test.goal, c.horizon, c.layout(), c.schedule(), c.ddim_steps, seed
        )

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """SR, mAcc, mIoU and task accuracy on EVAL_PLANS test plans (fixed noise)."""
        result, test = self._plan(runners), self.test()
        metrics = plan_metrics(result.actions, test.actions)
        return metrics | {"task_accuracy": float((result.task == test.task).mean())}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Same-plan rate, same-task rate and max |x0 difference| under the same noise."""
        ref, cand = self._plan(reference, seed=3), self._plan(candidate, seed=3)
        return {
            "plan_agreement": float(np.all(ref.actions == cand.actions, axis=1).mean()),
            "task_agreement": float((ref.task == cand.task).mean()),
            "x0_max_abs_error": float(np.abs(ref.x0 - cand.x0).max()),
        }
