"""DPO of the judge on contrastive judgment pairs against the frozen SFT reference, plus a small
SFT term on the chosen judgments (Con-J's training step).

loss = -log sigmoid(beta [(log pi(c) - log pi(r)) - (log ref(c) - log ref(r))])
       + sft_weight * (-log pi(c) / |c|)
with log pi(.) the summed log-probability of a judgment (EOS included) given the plain prompt.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from edgekit.errors import InputError
from edgekit.models.con_j.contrastive import ContrastivePair
from edgekit.models.con_j.generate import sequence_batch, sequence_log_probs
from edgekit.models.con_j.judge_format import pair_prompt
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.tinylm.model import TinyCausalLM

Progress = Callable[[float, str], None]


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """Mean DPO loss over (B,) summed log-probabilities of chosen / rejected judgments."""
    if beta <= 0:
        raise InputError(f"beta must be > 0, got {beta}")
    margin = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)  # (B,)
    return -F.logsigmoid(beta * margin).mean()


def _log_probs(
    model: TinyCausalLM, prompts: list[list[int]], judgments: list[list[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask, targets = sequence_batch(prompts, judgments)
    return sequence_log_probs(model, ids, mask, targets)


def reference_log_probs(
    reference: TinyCausalLM,
    pairs: Sequence[PrefPair],
    contrastive: Sequence[ContrastivePair],
    chunk: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen reference log-probabilities (N,) of every chosen and rejected judgment."""
    chosen, rejected = [], []
    with torch.inference_mode():
        for start in range(0, len(contrastive), chunk):
            part = contrastive[start : start + chunk]
            prompts = [pair_prompt(pairs[c.index]) for c in part]
            chosen.append(_log_probs(reference, prompts, [c.chosen for c in part])[0])
            rejected.append(_log_probs(reference, prompts, [c.rejected for c in part])[0])
    return torch.cat(chosen), torch.cat(rejected)


def fit_dpo(
    reference: TinyCausalLM,
    pairs: Sequence[PrefPair],
    contrastive: Sequence[ContrastivePair],
    steps: int,
    beta: float = 0.1,
    sft_weight: float = 0.1,
    batch_size: int = 16,
    lr: float = 3e-4,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[TinyCausalLM, dict[str, list[float]]]:
    """A copy of ``reference`` trained by DPO (+ SFT term); the reference stays untouched.

    Returns (policy in eval mode, log with per-step "loss", "dpo" and "pair_accuracy" (share of
    the batch whose implicit reward margin is > 0))."""
    if not contrastive:
        raise InputError("fit_dpo needs at least one contrastive pair")
    if steps < 1 or batch_size < 1:
        raise InputError(f"steps and batch_size must be >= 1, got {steps}, {batch_size}")
    ref_c, ref_r = reference_log_probs(reference, pairs, contrastive)
    policy = copy.deepcopy(reference).train()
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.1)
    rng = random.Random(seed)
    log: dict[str, list[float]] = {"loss": [], "dpo": [], "pair_accuracy": []}
    for step in range(steps):
        index = rng.sample(range(len(contrastive)), min(batch_size, len(contrastive)))
        part = [contrastive[i] for i in index]
        prompts = [pair_prompt(pairs[c.index]) for c in part]
        lp, count = _log_probs(
            policy, prompts + prompts, [c.chosen for c in part] + [c.rejected for c in part]
        )
        b = len(part)
        pol_c, pol_r = lp[:b], lp[b:]  # (b,) each
        idx = torch.tensor(index)
        dpo = dpo_loss(pol_c, pol_r, ref_c[idx], ref_r[idx], beta)
        sft = -(pol_c / count[:b]).mean()
        loss = dpo + sft_weight * sft
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        sched.step()
        margin = (pol_c - pol_r) - (ref_c[idx] - ref_r[idx])
        log["loss"].append(float(loss.detach()))
        log["dpo"].append(float(dpo.detach()))
        log["pair_accuracy"].append(float((margin > 0).float().mean()))
        if progress and (step + 1) % 25 == 0:
            progress((step + 1) / steps, f"dpo step {step + 1} loss {loss:.3f}")
    return policy.eval(), log
