"""Offline multi-task training of HiSSD and its baselines, cached under ``cache_dir("hissd")``.

One step draws ``batch`` team transitions from every training task (agent count) and sums:

- value: expectile (tau) regression of V_tot(s) on r + gamma V_tot'(s') (a Polyak target copy
  of the mixer; both read the policy's entity encoder, s' without gradient);
- common skills: the posterior Q(o_t, o_t+1) picks a discrete skill (straight-through
  Gumbel-softmax) whose embedding lets the predictor reconstruct the per-entity change of the
  observation; the planner P(h_t) learns, with advantage weights w = min(exp(beta * TD), cap)
  (self-normalised over the batch, TD = r + gamma V_tot'(s') - V_tot(s)), to predict the skill
  that explains the next observation: a weighted maximum likelihood that plans toward the
  transitions the value rates above expectation;
- controller: action cross-entropy given h, the posterior common skill and the task skill;
- task skills ("hissd" only): MoCo-style contrast (weight ``contrast``) of the task embedding
  against a momentum key encoder and a queue of keys labelled by task.

"bc" trains the encoder + controller by cross-entropy alone; "common" drops the task skill.
Runs are cached keyed by the config, the mode and ``RECIPE_VERSION``; policies shipped in the
package's ``weights/`` folder are found first.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from edgekit.errors import InputError
from edgekit.models.hissd import data, env, networks
from edgekit.models.hissd.data import Transitions, collect
from edgekit.models.hissd.env import ACTIONS, FEATURES, STEP
from edgekit.models.hissd.losses import advantage_weights, contrastive_loss, expectile_loss
from edgekit.models.hissd.networks import MODES, MixedValue, SkillPolicy

Progress = Callable[[float, str], None]

RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class HiSSDConfig:
    """Data, network and training sizes (defaults: under a minute per model on one thread)."""

    train_agents: tuple[int, ...] = (2, 3, 4)
    test_agents: tuple[int, ...] = (5, 6)
    episodes: int = 300  # per training task
    horizon: int = 25
    mix: tuple[float, float, float] = (0.2, 0.4, 0.4)  # expert, nearest, random
    seed: int = 0
    dim: int = 32
    heads: int = 2
    skill: int = 8  # common-skill embedding size
    skills: int = 8  # number of discrete common skills
    task_dim: int = 8
    steps: int = 1000
    batch: int = 32  # team transitions per task per step
    lr: float = 1e-3
    gamma: float = 0.95
    tau: float = 0.9
    beta: float = 10.0
    weight_cap: float = 100.0
    contrast: float = 0.05
    temperature: float = 0.1
    queue: int = 384
    momentum: float = 0.99
    polyak: float = 0.02

    def __post_init__(self) -> None:
        for n in (*self.train_agents, *self.test_agents):
            env.check_agents(n)
        if not self.train_agents:
            raise InputError("train_agents must name at least one agent count")
        if self.steps < 1 or self.batch < 2 or self.episodes < 1:
            raise InputError(f"steps >= 1, batch >= 2, episodes >= 1 needed, got {self}")

    def data(self) -> dict[int, Transitions]:
        """The offline data set of every training task, keyed by agent count."""
        return {
            n: collect(n, self.episodes, self.horizon, self.mix, self.seed)
            for n in self.train_agents
        }

    def policy(self, mode: str) -> SkillPolicy:
        return SkillPolicy(
            mode, FEATURES, ACTIONS, self.dim, self.heads, self.skill, self.task_dim, self.skills
        )


@dataclass
class Trained:
    """An eval-mode policy, its training seconds (0 when cached) and loss history."""

    mode: str
    policy: SkillPolicy
    seconds: float
    cached: bool
    history: dict[str, list[float]]
    path: Path | None = None
    weights: dict[str, float] | None = None  # mean advantage weight per behaviour (not bc)


def _key(config: HiSSDConfig, mode: str) -> str:
    """``recipe_key`` over "hissd", ``RECIPE_VERSION``, the config and the ``mode``."""
    from edgekit.cache import recipe_key

    return recipe_key("hissd", RECIPE_VERSION, asdict(config) | {"mode": mode})


def cache_path(config: HiSSDConfig, mode: str) -> Path:
    """Where the ``mode`` ("hissd" | "common" | "bc") run of ``config`` is cached."""
    from edgekit.cache import cache_dir

    return cache_dir("hissd") / f"{mode}-{_key(config, mode)}.pt"


class _Batches:
    """Torch views of every task's transitions and a seeded index sampler."""

    def __init__(self, sets: dict[int, Transitions], batch: int, seed: int) -> None:
        self.tasks = sorted(sets)
        self.sets = {
            n: {
                "obs": torch.from_numpy(t.obs),
                "next_obs": torch.from_numpy(t.next_obs),
                "actions": torch.from_numpy(t.actions),
                "reward": torch.from_numpy(t.reward),
            }
            for n, t in sets.items()
        }
        self.batch = batch
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, n: int) -> dict[str, torch.Tensor]:
        s = self.sets[n]
        idx = torch.randint(0, len(s["reward"]), (self.batch,), generator=self.gen)
        return {k: v[idx] for k, v in s.items()}


class _MoCo:
    """Momentum key encoder (encoder + task head) and a queue of (key, task label)."""

    def __init__(self, policy: SkillPolicy, size: int, dim: int, momentum: float) -> None:
        self.encoder = copy.deepcopy(policy.encoder).requires_grad_(False)
        self.head = copy.deepcopy(policy.task_skill).requires_grad_(False)
        self.keys = networks.unit(
            torch.randn(size, dim, generator=torch.Generator().manual_seed(7))
        )
        self.labels = torch.full((size,), -1, dtype=torch.long)  # empty slots match nothing
        self.pointer = 0
        self.momentum = momentum

    @torch.no_grad()
    def encode(self, entities: torch.Tensor) -> torch.Tensor:
        return networks.task_skill(self.head, *self.encoder(entities))

    @torch.no_grad()
    def update(self, policy: SkillPolicy, keys: torch.Tensor, labels: torch.Tensor) -> None:
        m = self.momentum
        pairs = (
            *zip(self.encoder.parameters(), policy.encoder.parameters(), strict=True),
            *zip(self.head.parameters(), policy.task_skill.parameters(), strict=True),
        )
        for mine, live in pairs:
            mine.mul_(m).add_(live.detach(), alpha=1 - m)
        at = (self.pointer + torch.arange(len(keys))) % len(self.keys)
        self.keys[at], self.labels[at] = keys, labels
        self.pointer = int(at[-1] + 1) % len(self.keys)


def fit(
    config: HiSSDConfig,
    mode: str,
    sets: dict[int, Transitions] | None = None,
    progress: Progress | None = None,
) -> Trained:
    """Train one ``mode`` policy on the offline data ``sets`` (default: ``config.data()``)."""
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    started = time.perf_counter()
    sets = sets if sets is not None else config.data()
    torch.manual_seed(config.seed)
    batches = _Batches(sets, config.batch, config.seed + 1)
    policy = config.policy(mode)
    params = list(policy.parameters())
    value = target = moco = None
    if mode != "bc":
        value = MixedValue(config.dim)
        target = copy.deepcopy(value).requires_grad_(False)
        params += list(value.parameters())
    if mode == "hissd":
        moco = _MoCo(policy, config.queue, config.task_dim, config.momentum)
    opt = torch.optim.Adam(params, lr=config.lr)
    history: dict[str, list[float]] = {
        k: [] for k in ("ce", "value", "plan", "recon", "contrast", "weight_max")
    }
    for step in range(config.steps):
        terms: dict[str, torch.Tensor] = {}
        queries, keys, labels = [], [], []
        for label, n in enumerate(batches.tasks):
            b = batches.draw(n)
            obs = b["obs"].flatten(0, 1)  # (B n, E, F)
            tokens, h = policy.encoder(obs)
            actions = b["actions"].flatten()  # (B n,)
            if mode == "bc":
                _add(terms, "ce", F.cross_entropy(policy.act(h, None, None), actions))
                continue
            assert value is not None and target is not None
            nxt = b["next_obs"].flatten(0, 1)
            v, _ = value(h.view(config.batch, n, -1))  # (B,)
            with torch.no_grad():
                _, h_next = policy.encoder(nxt)
                v_next, _ = target(h_next.view(config.batch, n, -1))
            td = b["reward"] + config.gamma * v_next - v  # (B,)
            _add(terms, "value", expectile_loss(td, config.tau))
            w = advantage_weights(td, config.beta, config.weight_cap)
            w = (w / w.mean()).repeat_interleave(n)  # (B n,), self-normalised
            change = (nxt[..., 3:] - obs[..., 3:]) / STEP  # (B n, E, 2), in moves
            post_logits = policy.posterior_logits(tokens, h, change)  # (B n, K)
            sample = F.gumbel_softmax(post_logits, hard=True)  # (B n, K) one-hot
            z_post = policy.codebook(sample)  # (B n, skill)
            recon = (policy.predict_next(tokens, z_post) - change).pow(2).mean(dim=(1, 2))
            chosen = sample.argmax(dim=-1).detach()  # the skill that explains o_t -> o_t+1
            plan = F.cross_entropy(policy.planner(h), chosen, reduction="none")
            _add(terms, "recon", recon.mean())
            _add(terms, "plan", (w * plan).mean())
            _add(terms, "weight_max", w.max().detach())
            task = policy.task_embedding(tokens, h) if moco is not None else None
            _add(terms, "ce", F.cross_entropy(policy.act(h, z_post, task), actions))
            if moco is not None:
                assert task is not None
                queries.append(task[::n])  # one agent per transition
                keys.append(moco.encode(batches.draw(n)["obs"][:, 0]))  # another sample, same task
                labels.append(torch.full((config.batch,), label, dtype=torch.long))
        loss = sum(v for k, v in terms.items() if k != "weight_max")
        if moco is not None:
            lab = torch.cat(labels)
            bank = torch.cat([torch.cat(keys), moco.keys])
            bank_labels = torch.cat([lab, moco.labels])
            c = contrastive_loss(torch.cat(queries), bank, lab, bank_labels, config.temperature)
            terms["contrast"] = c
            loss = loss + config.contrast * c
        opt.zero_grad()
        loss.backward()
        opt.step()
        if target is not None and value is not None:
            with torch.no_grad():
                for t, p in zip(target.parameters(), value.parameters(), strict=True):
                    t.lerp_(p, config.polyak)
        if moco is not None:
            moco.update(policy, torch.cat(keys), torch.cat(labels))
        if step % 20 == 0 or step == config.steps - 1:
            for k in history:
                if k in terms:
                    history[k].append(
                        float(terms[k].detach()) / (1 if k == "contrast" else len(batches.tasks))
                    )
        if progress and step % 100 == 0:
            progress(step / config.steps, f"{mode} step {step} loss {float(loss):.4f}")
    weights = None if value is None else behaviour_weights(config, policy, value, sets)
    return Trained(
        mode, policy.eval(), time.perf_counter() - started, False, history, None, weights
    )


@torch.no_grad()
def behaviour_weights(
    config: HiSSDConfig,
    policy: SkillPolicy,
    value: MixedValue,
    sets: dict[int, Transitions],
    per_task: int = 1500,
) -> dict[str, float]:
    """Mean advantage weight min(exp(beta TD), cap) of each behaviour's transitions, over the
    first ``per_task`` transitions of every task: does the value rank expert data highest?"""
    sums = np.zeros(len(data.BEHAVIOURS))
    counts = np.zeros(len(data.BEHAVIOURS))
    for n, t in sets.items():
        m = min(per_task, len(t))
        obs, nxt = (torch.from_numpy(a[:m]) for a in (t.obs, t.next_obs))
        v, _ = value(policy.encoder(obs.flatten(0, 1))[1].view(m, n, -1))
        v_next, _ = value(policy.encoder(nxt.flatten(0, 1))[1].view(m, n, -1))
        td = torch.from_numpy(t.reward[:m]) + config.gamma * v_next - v
        w = advantage_weights(td, config.beta, config.weight_cap).numpy()
        np.add.at(sums, t.behaviour[:m], w)
        np.add.at(counts, t.behaviour[:m], 1)
    return {k: float(sums[i] / max(counts[i], 1)) for i, k in enumerate(data.BEHAVIOURS)}


def _add(terms: dict[str, torch.Tensor], name: str, value: torch.Tensor) -> None:
    terms[name] = terms[name] + value if name in terms else value


def _blob(trained: Trained) -> dict[str, Any]:
    return {
        "policy": trained.policy.state_dict(),
        "seconds": trained.seconds,
        "history": trained.history,
        "weights": trained.weights,
    }


def _decode(config: HiSSDConfig, mode: str, blob: dict[str, Any], path: Path) -> Trained:
    policy = config.policy(mode)
    policy.load_state_dict(blob["policy"])
    return Trained(
        mode, policy.eval(), float(blob["seconds"]), True, blob["history"], path, blob["weights"]
    )


def train_policy(
    config: HiSSDConfig | None = None,
    mode: str = "hissd",
    progress: Progress | None = None,
    sets: dict[int, Transitions] | None = None,
) -> Trained:
    """The ``mode`` policy of ``config``, from the cache or trained now (then cached)."""
    from edgekit.weights_cache import load_or_train

    config = config or HiSSDConfig()
    path = cache_path(config, mode)

    def train() -> Trained:
        trained = fit(config, mode, sets, progress)
        trained.path = path
        return trained

    return load_or_train(
        path,
        Path(__file__).parent / "weights",
        train,
        load=lambda blob, found: _decode(config, mode, blob, found),
        save=_blob,
    )
