"""The certified LMs: ``TinyCausalLM`` (edgekit.models.tinylm) trained on the occupation corpus.

``BiasLMConfig(biased=True)`` learns the planted stereotype, ``biased=False`` the debiased
corpus (with its shallow role-play share, corpus.py). Sequence format and tokenizer are
tinylm's: ``[CLS] prompt [SEP] occupation [SEP]``, MiniLM WordPiece ids; the loss is the
cross-entropy of the answer tokens and EOS (AdamW, seeded, one thread). Weights are cached
under ``cache_dir("llmcert-b")`` by ``recipe_key("llmcert-b-lm", RECIPE_VERSION, ...)`` over the
config and tinylm's recipe version; a copy shipped in ``weights/`` is used first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F

from edgekit.cache import cache_dir, recipe_key
from edgekit.models.tinylm.cache import cached_lm
from edgekit.models.tinylm.model import RECIPE_VERSION as TINYLM_VERSION
from edgekit.models.tinylm.model import TinyCausalLM, answer_batch
from edgekit.models.tinylm.tokens import VOCAB_SIZE, token_strings

Progress = Callable[[float, str], None]
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it


@dataclass(frozen=True)
class BiasLMConfig:
    """Everything that determines one certified LM (corpus included)."""

    biased: bool = False
    corpus_size: int = 4000
    shallow_share: float = 0.1
    dim: int = 64
    layers: int = 2
    heads: int = 4
    max_len: int = 48
    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0
    threads: int = 1

    def build(self) -> TinyCausalLM:
        return TinyCausalLM(VOCAB_SIZE, self.dim, self.layers, self.heads, self.max_len)

    def key(self) -> str:
        """Cache key (16 hex): ``recipe_key`` over "llmcert-b-lm", ``RECIPE_VERSION``, this
        config and the version of tinylm, whose network and tokenizer it trains."""
        config = asdict(self) | {"sdlg_lm": TINYLM_VERSION}
        return recipe_key("llmcert-b-lm", RECIPE_VERSION, config)


def train_bias_lm(
    config: BiasLMConfig, progress: Progress | None = None
) -> tuple[TinyCausalLM, dict]:
    """Train the LM of ``config``; (model in eval mode, log with final loss and seconds)."""
    from edgekit.models.llmcert_b.corpus import training_pairs

    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        pairs = training_pairs(config.biased, config.corpus_size, config.shallow_share, config.seed)
        model = config.build()
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, config.lr, total_steps=config.steps)
        gen = torch.Generator().manual_seed(config.seed)
        start, losses = time.perf_counter(), []
        model.train()
        for step in range(config.steps):
            index = torch.randint(len(pairs), (config.batch_size,), generator=gen).tolist()
            ids, mask, target = answer_batch([pairs[i] for i in index])
            hidden = model.hidden(ids, mask)  # (B, S, d)
            rows = target != -100
            loss = F.cross_entropy(hidden[rows] @ model.tokens.weight.T, target[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress and (step + 1) % 50 == 0:
                progress((step + 1) / config.steps, f"step {step + 1} loss {loss:.3f}")
        model.eval()
        tail = losses[-50:]
        log = {"final_loss": sum(tail) / len(tail), "seconds": time.perf_counter() - start}
        return model, log
    finally:
        torch.set_num_threads(threads)


def train_cached(
    config: BiasLMConfig, progress: Progress | None = None
) -> tuple[TinyCausalLM, dict]:
    """The LM of ``config``: the copy shipped in ``weights/``, else the one in
    ``cache_dir("llmcert-b")``, trained (and cached) on a miss."""
    return cached_lm(
        config,
        cache_dir("llmcert-b"),
        Path(__file__).parent / "weights",
        lambda: train_bias_lm(config, progress),
    )


@lru_cache(maxsize=1)
def word_vocabulary() -> tuple[str, ...]:
    """Printable whole-word WordPiece tokens (lower-case ASCII letters, >= 2 characters)."""
    words = token_strings(range(VOCAB_SIZE))
    return tuple(w for w in words if len(w) >= 2 and w.isascii() and w.isalpha())
