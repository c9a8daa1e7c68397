"""The two Con-J graphs as GraphSpecs, their feeds, and torch-runtime runners over them.

"judge": input_ids (B, S) int64, attention_mask (B, S) int64 (judge prompt + judgment so far,
right padding) -> next_logits (B, 30522) float32.
"reward": input_ids (B, S) int64, attention_mask (B, S) int64 (MiniLM tokens of "question
answer") -> reward (B,) float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, Runner
from edgekit.models.con_j.judge_format import pair_prompt
from edgekit.models.con_j.modules import JudgeNextToken, RewardHead, RewardModel
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.con_j.reward_model import answer_text
from edgekit.models.tinylm.causal import pad
from edgekit.models.tinylm.model import TinyCausalLM

AXES = {0: "batch", 1: "sequence"}


def judge_feeds(prompts: Sequence[Sequence[int]]) -> Feeds:
    """Right-padded judge feeds: input_ids / attention_mask (B, S) int64."""
    ids, mask = pad(prompts)
    return {"input_ids": ids, "attention_mask": mask}


def reward_feeds(texts: Sequence[str]) -> Feeds:
    """MiniLM feeds of ``texts``: input_ids / attention_mask (B, S) int64."""
    from edgekit.models.minilm.encoder import tokenize

    return tokenize(list(texts))


def pair_reward_feeds(pairs: Sequence[PrefPair]) -> tuple[Feeds, Feeds]:
    """(feeds of every answer a, feeds of every answer b) as the reward model reads them."""
    return (
        reward_feeds([answer_text(p.question, p.answer_a) for p in pairs]),
        reward_feeds([answer_text(p.question, p.answer_b) for p in pairs]),
    )


def reward_model(head: RewardHead) -> RewardModel:
    """MiniLM (pretrained, offline) + ``head`` as one eval-mode module."""
    from edgekit.models.minilm.encoder import MeanPoolEncoder, load_bert

    return RewardModel(MeanPoolEncoder(load_bert()), head).eval()


def conj_graphs(
    judge: TinyCausalLM, head: RewardHead, pairs: Sequence[PrefPair]
) -> list[GraphSpec]:
    """GraphSpecs "judge" and "reward" with the first two of ``pairs`` as example inputs."""
    jf = judge_feeds([pair_prompt(p) for p in pairs[:2]])
    rf = reward_feeds([answer_text(p.question, p.answer_a) for p in pairs[:2]])
    return [
        GraphSpec(
            "judge",
            JudgeNextToken(judge).eval(),
            {k: torch.from_numpy(v) for k, v in jf.items()},
            ["next_logits"],
            {"input_ids": AXES, "attention_mask": AXES, "next_logits": {0: "batch"}},
        ),
        GraphSpec(
            "reward",
            reward_model(head),
            {k: torch.from_numpy(v) for k, v in rf.items()},
            ["reward"],
            {"input_ids": AXES, "attention_mask": AXES, "reward": {0: "batch"}},
        ),
    ]


def rewards(runner: Runner, feeds: Feeds, chunk: int = 64) -> np.ndarray:
    """Rewards (N,) float64 of the rows of ``feeds`` through ``runner``, ``chunk`` rows a call."""
    n = len(feeds["input_ids"])
    out = [
        np.asarray(runner.run({k: v[s : s + chunk] for k, v in feeds.items()})["reward"])
        for s in range(0, n, chunk)
    ]
    return np.concatenate(out).astype(np.float64)
