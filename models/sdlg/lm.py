"""A small causal LM over MiniLM's WordPiece vocabulary, trained in-repo and cached.

Sequence format: ``[CLS] question [SEP] answer [SEP]``; the LM continues after the first
[SEP] and stops at the next one (EOS). The token ids are MiniLM's (30522 WordPiece tokens,
lower-cased), so an answer's tokens are directly the tokens the MiniLM equivalence model reads
and the embedding rows its attribution gradients are compared with.

``TinyCausalLM.forward(input_ids (B, S) int64, attention_mask (B, S) int64) -> logits
(B, S, 30522) float32``; right padding (mask 0) is ignored by attention. Pre-norm transformer
blocks written with plain ops (one ONNX graph with dynamic batch and sequence), learnt
positions, output projection tied to the token embedding.

Training (``train_lm``) minimises the cross-entropy of the answer tokens and EOS only (the
question is context), AdamW, seeded, one thread by default; weights are cached under
``cache_dir("sdlg")`` by ``recipe_key("sdlg-lm", RECIPE_VERSION, config)``; a copy shipped in
this package's ``weights/`` folder is used first.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.cache import atomic_write_bytes, cache_dir, find_weights, recipe_key

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 100, 101, 102, 103
EOS_ID = SEP_ID
SPECIAL_IDS = frozenset((PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID))
VOCAB_SIZE = 30522
Progress = Callable[[float, str], None]


@lru_cache(maxsize=1)
def _wordpiece():  # tokenizers.Tokenizer of MiniLM, no special tokens added, no truncation
    from tokenizers import Tokenizer

    from edgekit.models.minilm.encoder import tokenizer_path

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.no_padding()
    tok.no_truncation()
    return tok


def encode(text: str) -> list[int]:
    """WordPiece ids of ``text`` (lower-cased, no [CLS]/[SEP])."""
    return list(_wordpiece().encode(text, add_special_tokens=False).ids)


def decode(ids: Sequence[int]) -> str:
    """Text of WordPiece ``ids`` (special tokens dropped, "##" pieces joined)."""
    return str(_wordpiece().decode([int(i) for i in ids if int(i) not in SPECIAL_IDS]))


def token_strings(ids: Sequence[int]) -> list[str]:
    """The WordPiece string of each id, e.g. ["ham", "##ster"]."""
    return [str(_wordpiece().id_to_token(int(i))) for i in ids]


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


RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it


@dataclass(frozen=True)
class LMConfig:
    """Everything that determines the trained LM (corpus included)."""

    people: int = 56
    dim: int = 128
    layers: int = 2
    heads: int = 4
    max_len: int = 48
    steps: int = 1200
    batch_size: int = 48
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0
    threads: int = 1

    def build(self) -> TinyCausalLM:
        return TinyCausalLM(VOCAB_SIZE, self.dim, self.layers, self.heads, self.max_len)

    def key(self) -> str:
        """Cache key (16 hex): ``recipe_key`` over "sdlg-lm", ``RECIPE_VERSION`` and this config."""
        return recipe_key("sdlg-lm", RECIPE_VERSION, self)


def prompt_ids(question: str) -> list[int]:
    """``[CLS] question [SEP]`` ids: the prefix the LM answers from."""
    return [CLS_ID, *encode(question), SEP_ID]


def _batch(pairs: Sequence[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    """(ids (B, S), mask (B, S), targets (B, S) with -100 outside answer+EOS) for pairs."""
    rows, targets = [], []
    for question, answer in pairs:
        prompt, answer_ids = prompt_ids(question), encode(answer) + [EOS_ID]
        ids = prompt + answer_ids
        rows.append(ids)
        # position i predicts ids[i + 1]; supervise predictions of the answer tokens and EOS
        targets.append([-100] * (len(prompt) - 1) + answer_ids + [-100])
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), PAD_ID, dtype=torch.long)
    mask = torch.zeros_like(ids)
    target = torch.full_like(ids, -100)
    for i, (row, tgt) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        target[i, : len(tgt)] = torch.tensor(tgt)
    return ids, mask, target


def train_lm(config: LMConfig, progress: Progress | None = None) -> tuple[TinyCausalLM, dict]:
    """Train the LM on the corpus of ``config``; returns (model in eval mode, training log)."""
    from edgekit.models.sdlg.corpus import build_facts, training_pairs

    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        pairs = training_pairs(build_facts(config.people, config.seed), config.seed)
        model = config.build()
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, config.lr, total_steps=config.steps)
        gen = torch.Generator().manual_seed(config.seed)
        start, losses = time.perf_counter(), []
        model.train()
        for step in range(config.steps):
            index = torch.randint(len(pairs), (config.batch_size,), generator=gen).tolist()
            ids, mask, target = _batch([pairs[i] for i in index])
            h = model.hidden(ids, mask)  # (B, S, d)
            rows = target != -100  # only answer positions go through the 30522-way softmax
            logits = h[rows] @ model.tokens.weight.T  # (N, V)
            loss = F.cross_entropy(logits, target[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress and (step + 1) % 50 == 0:
                progress((step + 1) / config.steps, f"step {step + 1} loss {loss:.3f}")
        model.eval()
        log = {
            "train_pairs": len(pairs),
            "final_loss": sum(losses[-50:]) / min(50, len(losses)),
            "seconds": time.perf_counter() - start,
        }
        return model, log
    finally:
        torch.set_num_threads(threads)


def train_cached(
    config: LMConfig | None = None, progress: Progress | None = None
) -> tuple[TinyCausalLM, dict]:
    """The trained LM of ``config``: the copy shipped in ``weights/``, else the one in
    ``cache_dir("sdlg")``, training (and caching) it on a miss."""
    config = config or LMConfig()
    folder = cache_dir("sdlg")
    weights, meta = folder / f"lm-{config.key()}.pt", folder / f"lm-{config.key()}.json"
    for found in find_weights(weights, Path(__file__).parent / "weights"):
        if found.exists() and found.with_suffix(".json").exists():
            model = config.build()
            model.load_state_dict(torch.load(found, map_location="cpu", weights_only=True))
            return model.eval(), json.loads(found.with_suffix(".json").read_text())
    model, log = train_lm(config, progress)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    atomic_write_bytes(weights, buffer.getvalue())
    atomic_write_bytes(meta, json.dumps({**log, "config": asdict(config)}, indent=1).encode())
    return model, log
