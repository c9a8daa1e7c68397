"""The two deployable networks: the judge's next-token head and the Bradley-Terry reward model.

``JudgeNextToken``: input_ids (B, S) int64, attention_mask (B, S) int64 (right padding) ->
next_logits (B, 30522) float32, the logits of the token after each row's last real token (a
decoding step; the host loop appends the token and re-runs).
``RewardModel``: MiniLM tokens of "question answer" (B, S) int64 + mask -> reward (B,) float32,
a scalar score (the better answer of a pair scores higher).
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.tinylm.model import TinyCausalLM


class JudgeNextToken(nn.Module):
    """forward(input_ids (B, S), attention_mask (B, S)) -> next_logits (B, V)."""

    def __init__(self, lm: TinyCausalLM) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.lm.hidden(input_ids, attention_mask)  # (B, S, d)
        last = (attention_mask.sum(dim=1) - 1).clamp(min=0)  # (B,)
        index = last[:, None, None].expand(-1, 1, hidden.shape[-1])  # (B, 1, d)
        h = hidden.gather(1, index)[:, 0]  # (B, d)
        return h @ self.lm.tokens.weight.T  # (B, V)


class RewardHead(nn.Module):
    """Scalar reward of a sentence embedding: (B, 384) -> (B,), one tanh hidden layer."""

    def __init__(self, dim: int = 384, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, embedding: torch.Tensor) -> torch.Tensor:
        return self.net(embedding)[:, 0]


class RewardModel(nn.Module):
    """forward(input_ids (B, S), attention_mask (B, S)) -> reward (B,): MiniLM + RewardHead."""

    def __init__(self, encoder: nn.Module, head: RewardHead) -> None:
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(input_ids, attention_mask))  # (B,)
