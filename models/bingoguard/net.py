"""BingoGuardNet: the pretrained all-MiniLM-L6-v2 encoder with three moderation heads.

forward(input_ids (B, S) int64, attention_mask (B, S) int64) ->
    safety_logits (B, 2) [safe, unsafe], topic_logits (B, 11) [S1..S11],
    severity_logits (B, 5) [level 0..4], all float32.

P(unsafe) = p_unsafe / (p_safe + p_unsafe) = softmax(safety_logits)[:, 1], the same quantity a
BingoGuard LLM judge reads from its first generated token. Features: the mean over real tokens
(as sentence-transformers pools MiniLM) of each of the last ``pool_layers`` hidden states,
concatenated ((B, 768) for the default 2). On the generated validation split, the last two
layers gave severity macro-F1 0.92 where the last layer alone gave 0.82 (frozen encoder, same
heads). A LayerNorm and one shared hidden layer feed the three heads. The encoder stays frozen
in training (see train.py).

With ``pair=True`` (the query+response recipe) the input is ``[CLS] query [SEP] response [SEP]``
(or ``[CLS] response [SEP]`` when no query is given) and the features are the response's token
means followed by the query's (zeros without a query), each over the last ``pool_layers``
states: the response stays the thing classified, its tokens having attended to the query in
the encoder, and the heads still see the query itself. The segments are found inside the graph
from the [SEP] tokens, so the device feeds the same two inputs.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.bingoguard.taxonomy import NUM_LEVELS, NUM_TOPICS
from edgekit.models.minilm.encoder import EMBEDDING_DIM

OUTPUT_NAMES = ("safety_logits", "topic_logits", "severity_logits")
SEP_ID = 102  # [SEP] in MiniLM's (bert-base-uncased) vocabulary


class ModerationHeads(nn.Module):
    """pooled (B, dim) -> (safety (B, 2), topic (B, 11), severity (B, 5)) logits."""

    def __init__(self, dim: int = EMBEDDING_DIM, hidden: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.trunk = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout))
        self.safety = nn.Linear(hidden, 2)
        self.topic = nn.Linear(hidden, NUM_TOPICS)
        self.severity = nn.Linear(hidden, NUM_LEVELS)

    def forward(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.trunk(self.norm(pooled))  # (B, hidden)
        return self.safety(h), self.topic(h), self.severity(h)


class BingoGuardNet(nn.Module):
    """MiniLM (6-layer BERT, 22M parameters) + ModerationHeads (~100k parameters).

    Any transformers BERT works (the heads take its ``hidden_size``); token_type_ids are zeros
    built inside the graph (single-text input), as in the minilm card.
    """

    def __init__(
        self,
        bert: nn.Module,
        hidden: int = 256,
        dropout: float = 0.1,
        pool_layers: int = 2,
        pair: bool = False,
    ) -> None:
        super().__init__()
        layers = int(bert.config.num_hidden_layers)
        if not 1 <= pool_layers <= layers:
            raise ValueError(f"pool_layers must be in 1..{layers}, got {pool_layers}")
        self.bert = bert
        self.pool_layers = pool_layers
        self.pair = pair
        dim = int(bert.config.hidden_size) * pool_layers * (2 if pair else 1)
        self.heads = ModerationHeads(dim, hidden, dropout)
        for p in self.bert.parameters():  # the encoder is used frozen
            p.requires_grad_(False)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Masked token means of the last ``pool_layers`` hidden states, concatenated:
        (B, S) ids/mask -> (B, pool_layers * 384); with ``pair``, the response's means then the
        query's: (B, 2 * pool_layers * 384)."""
        token_type_ids = torch.zeros_like(input_ids)  # (B, S)
        states = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            output_hidden_states=True,
        ).hidden_states  # embeddings + one per layer, each (B, S, 384)
        if not self.pair:
            return _masked_means(states[-self.pool_layers :], attention_mask)
        response, query = pair_masks(input_ids, attention_mask)
        last = states[-self.pool_layers :]
        return torch.cat([_masked_means(last, response), _masked_means(last, query)], dim=-1)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.heads(self.pooled(input_ids, attention_mask))


def pair_masks(
    input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(response, query) token masks (B, S) int64 of ``[CLS] query [SEP] response [SEP]`` rows;
    a row with one [SEP] is a response alone (empty query mask). Each [SEP] belongs to the
    segment it closes."""
    sep = (input_ids == SEP_ID).to(attention_mask.dtype) * attention_mask  # (B, S)
    segment = torch.cumsum(sep, dim=1) - sep  # 0 up to the first [SEP], then 1, ...
    paired = (sep.sum(dim=1, keepdim=True) >= 2).to(attention_mask.dtype)  # (B, 1)
    first = (segment == 0).to(attention_mask.dtype) * attention_mask
    second = (segment == 1).to(attention_mask.dtype) * attention_mask
    response = paired * second + (1 - paired) * first
    return response, paired * first


def _masked_means(states: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
    """Means over the tokens of ``mask`` (B, S) of each state (B, S, D), concatenated:
    (B, len(states) * D); zeros for a row with no token."""
    weights = mask.unsqueeze(-1).to(states[-1].dtype)  # (B, S, 1)
    count = weights.sum(dim=1).clamp(min=1.0)  # (B, 1)
    return torch.cat([(h * weights).sum(dim=1) / count for h in states], dim=-1)


def unsafe_probability(safety_logits: torch.Tensor) -> torch.Tensor:
    """P(unsafe) (B,) = p_unsafe / (p_safe + p_unsafe) from safety logits (B, 2)."""
    return torch.softmax(safety_logits.float(), dim=-1)[:, 1]
