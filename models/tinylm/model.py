"""The tiny causal LM network and the training batches of its sequence format.

``TinyCausalLM.forward(input_ids (B, S) int64, attention_mask (B, S) int64) -> logits
(B, S, vocab) float32``; right padding (mask 0) is ignored by attention. Pre-norm transformer
blocks written with plain ops (one ONNX graph with dynamic batch and sequence), learnt
positions, output projection tied to the token embedding. The default vocabulary is MiniLM's
WordPiece (``tokens.py``); a model may build it over a smaller one.

``RECIPE_VERSION`` versions the network, the tokenizer and the sequence format: every training
of this LM folds it into its cache key (the sdlg LM's key folds no other version, so it also
covers that training).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from edgekit.models.tinylm.tokens import EOS_ID, PAD_ID, VOCAB_SIZE, encode, prompt_ids

RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it


class Block(nn.Module):
    """Pre-norm causal self-attention + MLP on (B, S, d)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)  # (B, S, d) each
        shape = (b, s, self.heads, d // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))  # (B, H, S, d/H)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias  # (B, H, S, S)
        attended = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class TinyCausalLM(nn.Module):
    """forward(input_ids (B, S) int64, attention_mask (B, S) int64) -> logits (B, S, V)."""

    def __init__(
        self,
        vocab: int = VOCAB_SIZE,
        dim: int = 128,
        layers: int = 2,
        heads: int = 4,
        max_len: int = 48,
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} must be a multiple of heads {heads}")
        self.max_len = max_len
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final hidden states (B, S, d)."""
        s = input_ids.shape[1]
        positions = torch.arange(s, device=input_ids.device)  # (S,)
        x = self.tokens(input_ids) + self.positions(positions)[None]  # (B, S, d)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()  # (S, S)
        allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]  # (B, 1, S, S)
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~allowed, -1e4)  # finite: padded query rows stay NaN-free
        for block in self.blocks:
            x = block(x, bias)
        return self.norm(x)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hidden(input_ids, attention_mask) @ self.tokens.weight.T  # (B, S, V)


def answer_batch(pairs: Sequence[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    """(ids (B, S), mask (B, S), targets (B, S)) int64 of ``[CLS] prompt [SEP] answer [SEP]``
    rows, right-padded; targets hold the next token at the answer and EOS predictions, -100
    elsewhere (the prompt is context)."""
    rows, targets = [], []
    for prompt, answer in pairs:
        head, tail = prompt_ids(prompt), encode(answer) + [EOS_ID]
        rows.append(head + tail)
        # position i predicts ids[i + 1]; supervise predictions of the answer tokens and EOS
        targets.append([-100] * (len(head) - 1) + tail + [-100])
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), PAD_ID, dtype=torch.long)
    mask, target = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (row, tgt) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
        target[i, : len(tgt)] = torch.tensor(tgt)
    return ids, mask, target
