"""Supervised fine-tuning of the judge LM: gold judgments of the seed preference pairs (plain
prompts and prompts with the right answer as a hint), mixed with replayed QA pairs of the corpus
so the LM keeps the facts it was pre-trained on. Loss: mean NLL of judgment / answer tokens
(EOS included)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

from edgekit.errors import InputError
from edgekit.models.con_j.generate import sequence_batch, sequence_log_probs
from edgekit.models.con_j.judge_format import gold_judgment, pair_prompt
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.models.tinylm.tokens import EOS_ID, encode
from edgekit.models.tinylm.tokens import prompt_ids as qa_prompt_ids

Example = tuple[list[int], list[int]]  # (prompt ids, target ids ending with EOS)
Progress = Callable[[float, str], None]


def judgment_examples(pairs: Sequence[PrefPair], with_hints: bool = True) -> list[Example]:
    """(plain prompt, gold judgment) per pair, plus (hinted prompt, gold judgment) if asked."""
    out = [(pair_prompt(p), gold_judgment(p)) for p in pairs]
    if with_hints:
        out += [(pair_prompt(p, p.better), gold_judgment(p)) for p in pairs]
    return out


def qa_examples(qa_pairs: Sequence[tuple[str, str]]) -> list[Example]:
    """The LM's pre-training format: ([CLS] question [SEP], answer [SEP])."""
    return [(qa_prompt_ids(q), [*encode(a), EOS_ID]) for q, a in qa_pairs]


def nll(model: TinyCausalLM, batch: Sequence[Example]) -> torch.Tensor:
    """Mean NLL per target token over ``batch`` (a scalar tensor)."""
    ids, mask, targets = sequence_batch([e[0] for e in batch], [e[1] for e in batch])
    total, count = sequence_log_probs(model, ids, mask, targets)
    return -total.sum() / count.sum()


def fit_sft(
    model: TinyCausalLM,
    judgments: Sequence[Example],
    replay: Sequence[Example],
    steps: int,
    batch_size: int = 32,
    replay_share: float = 0.25,
    lr: float = 1e-3,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[TinyCausalLM, list[float]]:
    """Fine-tune ``model`` in place for ``steps`` AdamW steps (cosine schedule); each batch has
    ``round(replay_share * batch_size)`` replayed QA rows. Returns (model in eval mode, losses)."""
    if not judgments or steps < 1 or batch_size < 2:
        raise InputError("fit_sft needs judgment examples, steps >= 1 and batch_size >= 2")
    if not 0.0 <= replay_share < 1.0:
        raise InputError(f"replay_share must be in [0, 1), got {replay_share}")
    rng = random.Random(seed)
    n_replay = round(replay_share * batch_size) if replay else 0
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    model.train()
    losses = []
    for step in range(steps):
        batch = rng.choices(list(judgments), k=batch_size - n_replay)
        batch += rng.choices(list(replay), k=n_replay) if n_replay else []
        loss = nll(model, batch)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress and (step + 1) % 50 == 0:
            progress((step + 1) / steps, f"sft step {step + 1} loss {loss:.3f}")
    return model.eval(), losses
