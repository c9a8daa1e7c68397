"""The sdlg LM: ``TinyCausalLM`` (edgekit.models.tinylm) trained on the fact corpus's QA pairs.

Sequence format and tokenizer are tinylm's: ``[CLS] question [SEP] answer [SEP]``, MiniLM
WordPiece ids. Training (``train_lm``) minimises the cross-entropy of the answer tokens and EOS
only (the question is context), AdamW, seeded, one thread by default; weights are cached under
``cache_dir("sdlg")`` by ``recipe_key("sdlg-lm", RECIPE_VERSION, config)`` with tinylm's
``RECIPE_VERSION``; a copy shipped in this package's ``weights/`` folder is used first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from edgekit.cache import cache_dir, recipe_key
from edgekit.models.tinylm.cache import cached_lm
from edgekit.models.tinylm.model import RECIPE_VERSION, TinyCausalLM, answer_batch
from edgekit.models.tinylm.tokens import VOCAB_SIZE

Progress = Callable[[float, str], None]


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
            ids, mask, target = answer_batch([pairs[i] for i in index])
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
    return cached_lm(
        config,
        cache_dir("sdlg"),
        Path(__file__).parent / "weights",
        lambda: train_lm(config, progress),
    )
