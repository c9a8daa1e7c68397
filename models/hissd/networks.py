"""HiSSD networks: per-agent skill policy (what a device runs) and the attention-mixed value.

``SkillPolicy`` has three modes sharing one entity encoder:

- "hissd": a common-skill planner P(h) picks one of ``skills`` discrete common skills, each a
  learned embedding z_c; a task-specific skill z_s = S(h, sum of tokens) (unit norm); the
  controller maps [h, z_c, z_s] to action logits;
- "common": the same without the task-specific skill (ablation);
- "bc": the controller reads h alone (behaviour cloning).

Training also uses a skill posterior Q(o_t, o_t+1) over the same discrete skills, which
explains an observed transition, and a next-observation predictor D(token_j, z_c) -> per-entity
(dx, dy) change; neither is needed to act. Skills are discrete so that the advantage-weighted
planner picks a mode instead of averaging skill vectors. ``forward(entities)`` is the
execution path: entities (B, E, 5) float32, row 0 the agent itself, E any size -> logits
(B, 5) float32.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.hissd.attention import EntityEncoder

MODES = ("hissd", "common", "bc")
TASK_SCALE = 8.0  # sum of entity tokens / TASK_SCALE feeds the task skill


def mlp(inputs: int, outputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.GELU(), nn.Linear(hidden, outputs))


def unit(x: torch.Tensor) -> torch.Tensor:
    """Rows of x (..., D) scaled to unit L2 norm (export-friendly, no F.normalize)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + 1e-8)


class SkillPolicy(nn.Module):
    """Per-agent policy over an entity set; see the module docstring for the modes."""

    def __init__(
        self,
        mode: str,
        features: int,
        actions: int,
        dim: int = 32,
        heads: int = 2,
        skill: int = 8,
        task_dim: int = 8,
        skills: int = 8,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise InputError(f"policy mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.encoder = EntityEncoder(features, dim, heads)
        self.skill = 0 if mode == "bc" else skill
        self.task_dim = task_dim if mode == "hissd" else 0
        if self.skill:
            self.planner = mlp(dim, skills, dim)  # logits over the common skills
            self.change_embed = mlp(dim + 2, dim, dim)
            self.posterior = mlp(2 * dim, skills, dim)
            self.codebook = nn.Linear(skills, skill, bias=False)  # one-hot -> z_c
            self.predictor = mlp(dim + skill, 2, dim)
        if self.task_dim:
            self.task_skill = mlp(2 * dim, task_dim, dim)
        self.controller = mlp(dim + self.skill + self.task_dim, actions, dim)

    def task_embedding(self, tokens: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Task-specific skill z_s (N, task_dim), unit norm, from tokens (N, E, D) and h (N, D)."""
        return task_skill(self.task_skill, tokens, h)

    def act(
        self, h: torch.Tensor, common: torch.Tensor | None, task: torch.Tensor | None
    ) -> torch.Tensor:
        """Action logits (N, A) from h (N, D), the common skill (N, skill) (None for bc) and the
        task skill (N, task_dim) (None unless mode "hissd")."""
        parts = [h]
        if self.skill:
            assert common is not None
            parts.append(common)
        if self.task_dim:
            assert task is not None
            parts.append(task)
        return self.controller(torch.cat(parts, dim=-1))

    def predict_next(self, tokens: torch.Tensor, common: torch.Tensor) -> torch.Tensor:
        """Per-entity change of (dx, dy) in units of one move: tokens (N, E, D), common skill
        (N, skill) -> (N, E, 2)."""
        z = common[:, None, :].expand(-1, tokens.shape[1], -1)
        return self.predictor(torch.cat([tokens, z], dim=-1))

    def posterior_logits(
        self, tokens: torch.Tensor, h: torch.Tensor, change: torch.Tensor
    ) -> torch.Tensor:
        """Logits (N, K) of the skill explaining an observed transition: tokens (N, E, D) and
        h (N, D) of o_t, change (N, E, 2) the per-entity (dx, dy) change to o_t+1 in moves."""
        moved = self.change_embed(torch.cat([tokens, change], dim=-1)).mean(dim=1)  # (N, D)
        return self.posterior(torch.cat([h, moved], dim=-1))

    def plan(self, h: torch.Tensor) -> torch.Tensor:
        """The planner's most likely common skill as its embedding: h (N, D) -> z_c (N, skill)."""
        logits = self.planner(h)
        best = (logits == logits.max(dim=-1, keepdim=True).values).to(logits.dtype)
        return self.codebook(best)

    def forward(self, entities: torch.Tensor) -> torch.Tensor:
        """entities (B, E, 5) -> action logits (B, 5), acting with the planner's common skill."""
        tokens, h = self.encoder(entities)
        task = self.task_embedding(tokens, h) if self.task_dim else None
        return self.act(h, self.plan(h) if self.skill else None, task)


def task_skill(head: nn.Module, tokens: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """unit(head([h, sum_j token_j / TASK_SCALE])): tokens (N, E, D), h (N, D) -> (N, task_dim).

    The attention embedding h is blind to the entity count by design; the task skill reads a
    sum over tokens as well, so tasks (team sizes) can be told apart.
    """
    return unit(head(torch.cat([h, tokens.sum(dim=1) / TASK_SCALE], dim=-1)))


class MixedValue(nn.Module):
    """Team state value from the agents' embeddings, mixed by attention over the agents.

    h (B, n, D) -> (V_tot (B,), V_i (B, n)). V_tot = sum_i a_i V_i + b(s) with
    a = softmax_i(q(mean h) . k(h_i) / sqrt(D)) and b from mean h: defined for any n and
    invariant to the order of the agents.
    """

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.head = mlp(dim, 1, dim)
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.bias = mlp(dim, 1, dim)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        per_agent = self.head(h)[..., 0]  # (B, n)
        state = h.mean(dim=1)  # (B, D)
        scores = (self.key(h) @ self.query(state)[:, :, None])[..., 0] / h.shape[-1] ** 0.5
        mix = torch.softmax(scores, dim=1)  # (B, n)
        return (mix * per_agent).sum(dim=1) + self.bias(state)[:, 0], per_agent
