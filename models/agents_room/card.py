"""agents-room card: the story LM every agent runs on, as one exportable graph.

Graph "lm": input_ids (B, S) int64 + attention_mask (B, S) int64, compact story-vocabulary ids
(``vocab.py``; WordPiece ids listed in the bundle's vocab.json) -> logits (B, S, K) float32
(full-sequence re-run, right padding; batch and sequence dynamic, S <= max_len). The host side
(``StoryLMBackend.from_runner``: decoding; agents, orchestrator, scratchpad and judge) runs
around the graph on torch or on any edgekit runtime.

``evaluate`` writes stories for ``eval_premises`` held-out premises greedily, as a room of
agents and end to end, and judges them pairwise; ``experiment`` runs the full study
(``edgekit eval agents-room``). Options are ``StoryLMConfig`` fields.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.agents_room import world
from edgekit.models.agents_room.train import StoryLMConfig, TrainedLM, story_pairs, train_cached
from edgekit.models.agents_room.vocab import CLS, EOS, SEP, story_vocab

GRAPH = "lm"


def _feeds(pairs: list[tuple[str, str]]) -> Feeds:
    """``[CLS] prompt [SEP] partial output`` rows, right-padded: ids/mask (B, S) int64."""
    from edgekit.models.tinylm.causal import pad

    v = story_vocab()
    return dict(
        zip(
            ("input_ids", "attention_mask"),
            pad([[CLS, *v.encode(p), SEP, *v.encode(o)] for p, o in pairs]),
            strict=True,
        )
    )


def _golden_pairs(config: StoryLMConfig, count: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, first words of the reference output) of test-premise stories, all three kinds."""
    import random

    rng = random.Random(seed)
    test = world.split_premises(config.test_premises, config.seed)[1]
    rows: list[tuple[str, str]] = []
    while len(rows) < count:
        premise = rng.choice(test)
        for prompt, output in story_pairs(premise, world.sample_plan(premise, rng), rng):
            rows.append((prompt, " ".join(output.split()[: rng.randrange(0, 6)])))
    return [rows[i] for i in np.linspace(0, len(rows) - 1, count).astype(int)]


class AgentsRoomCard(ModelCard):
    """Story LM (tinylm's TinyCausalLM on a compact WordPiece vocabulary) + Agents' Room."""

    name: ClassVar[str] = "agents-room"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "story-generation"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "Agents' Room: planning agents (conflict, character, setting, plot) and writing agents "
        "(five sections) on a scratchpad over one small LM, orchestrated; a pairwise criteria "
        "judge with position swap vs end-to-end generation"
    )
    primary_metric: ClassVar[str | None] = "agents_overall"
    int8_mode: ClassVar[str] = "dynamic"
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-3, rtol=1e-3),
        "fp16": Tolerance(atol=5e-2, rtol=1e-2),
        "int8": Tolerance(atol=1.0, rtol=0.2),
    }
    # greedy decoding is discrete: an fp32 graph must write the same stories (one flip in the
    # 2 x eval_premises stories at most, for a near-tie) and the same next tokens
    agreement_floors: ClassVar[dict[str, float]] = {
        "next_token_top1_agreement": 0.99,
        "max_logit_abs_error": 1e-2,
        "story_flip_rate": 0.07,
    }
    eval_premises: ClassVar[int] = 8

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.config = config_from_options("agents-room", StoryLMConfig, options)
        self._trained: TrainedLM | None = None
        self._results: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> TrainedLM:
        """The story LM from the cache, or trained now (a few minutes on one thread)."""
        if self._trained is None:
            self._trained = train_cached(self.config, progress)
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "lm": ids/mask (B, S) int64 -> logits (B, S, K) float32."""
        feeds = _feeds(_golden_pairs(self.config, 2, 0))
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                name=GRAPH,
                module=self.train().model,
                example_inputs={k: torch.from_numpy(v) for k, v in feeds.items()},
                output_names=["logits"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Four test-premise prompts (planning, writing, end to end) with partial outputs."""
        return {GRAPH: _feeds(_golden_pairs(self.config, 4, 1))}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single prompts (1, S) from test-premise stories, ``limit`` at most."""
        return {GRAPH: [_feeds([pair]) for pair in _golden_pairs(self.config, limit, 2)]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "tokenizer": "tokenizer.json",
            "library": "tokenizers",
            "lowercase": True,
            "vocab": "vocab.json: compact id i is WordPiece id wordpiece[i]; unknown pieces -> 1",
            "format": "[CLS] prompt [SEP] output [SEP]; generation continues after the first [SEP] and stops at the next",
            "special_ids": {"pad": 0, "unk": 1, "cls": CLS, "sep": SEP, "eos": EOS},
            "vocab_size": len(story_vocab()),
            "max_length": self.config.max_len,
            "padding": "right, id 0, attention_mask 0; read the logits at each row's last real token",
        }

    def assets(self) -> dict[str, str]:
        from edgekit.cache import atomic_write_text, cache_dir
        from edgekit.models.minilm.encoder import tokenizer_path

        vocab = cache_dir("agents-room") / "vocab.json"
        text = json.dumps({"wordpiece": story_vocab().wordpiece})
        if not vocab.is_file() or vocab.read_text() != text:
            atomic_write_text(vocab, text)
        return {"tokenizer.json": str(tokenizer_path()), "vocab.json": str(vocab)}

    # ---- measuring -------------------------------------------------------------------------
    def eval_premise_list(self) -> list[world.Premise]:
        return world.split_premises(self.config.test_premises, self.config.seed)[1][
            : self.eval_premises
        ]

    def _study(self, runner: Runner) -> dict[str, Any]:
        """Greedy agents and end-to-end stories through ``runner``, judged (remembered per runner)."""
        with contextlib.suppress(TypeError):
            if runner in self._results:
                return self._results[runner]
        from edgekit.models.agents_room.backend import StoryLMBackend
        from edgekit.models.agents_room.judge import (
            CriteriaJudge,
            judge_pair,
            story_scores,
            win_rate,
        )
        from edgekit.models.agents_room.orchestrator import end_to_end, run_agents_room

        premises = self.eval_premise_list()
        texts = [p.text() for p in premises]
        backend = StoryLMBackend.from_runner(runner, self.config.max_len)
        agents = [r.story for r in run_agents_room(texts, backend)]
        e2e = end_to_end(texts, backend)
        judge = CriteriaJudge()
        overall = {
            name: float(
                np.mean(
                    [
                        np.mean(list(story_scores(s, p).values()))
                        for s, p in zip(stories, premises, strict=True)
                    ]
                )
            )
            for name, stories in (("agents", agents), ("e2e", e2e))
        }
        pairs = [judge_pair(judge, p, a, b) for p, a, b in zip(premises, agents, e2e, strict=True)]
        study = {"agents": agents, "e2e": e2e, "overall": overall, "wins": win_rate(pairs)}
        with contextlib.suppress(TypeError):
            self._results[runner] = study
        return study

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Mean criteria score of greedy agents' and end-to-end stories, agents' win rate."""
        study = self._study(runners[GRAPH])
        return {
            "agents_overall": study["overall"]["agents"],
            "e2e_overall": study["overall"]["e2e"],
            "agents_win_rate": float(study["wins"]["win_rate"]),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 next token and max |logit difference| on the golden prompts; share of the
        evaluation stories (agents and end to end) whose greedy text changed."""
        feeds = self.golden_inputs()[GRAPH]
        mask = feeds["attention_mask"].astype(bool)
        ref = np.asarray(reference[GRAPH].run(feeds)["logits"])
        cand = np.asarray(candidate[GRAPH].run(feeds)["logits"])
        a, b = self._study(reference[GRAPH]), self._study(candidate[GRAPH])
        stories = [
            *zip(a["agents"], b["agents"], strict=True),
            *zip(a["e2e"], b["e2e"], strict=True),
        ]
        return {
            "next_token_top1_agreement": float((ref.argmax(-1) == cand.argmax(-1))[mask].mean()),
            "max_logit_abs_error": float(np.abs(ref - cand)[mask].max()),
            "story_flip_rate": float(np.mean([x != y for x, y in stories])),
        }
