"""The story LM: tinylm's ``TinyCausalLM`` over the compact story vocabulary, trained and cached.

One LM serves every role, so agents and end-to-end generation are compared on the same
weights. Its training pairs, per training story (premise + a random plan):

- 4 planning pairs: ``planning_prompt`` -> the plan entry; the other planning entries on the
  pad are a random subset (so any orchestrator order gives prompts seen in training);
- 5 writing pairs: ``writing_prompt`` with the full plan -> section;
- 1 end-to-end pair: ``end_to_end_prompt`` -> the whole five-section story.

Sequences are ``[CLS] prompt [SEP] output [SEP]`` in compact ids; the loss is the
cross-entropy of the output tokens and the final [SEP] only. Each batch holds pairs of one
kind (planning, writing or end to end, drawn in proportion to their counts) so little of it
is padding. Weights are cached under ``cache_dir("agents-room")`` keyed by
``recipe_key("agents-room-story-lm", RECIPE_VERSION, ...)`` over the config and tinylm's
recipe version; a copy shipped in this package's ``weights/`` folder is used first.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from edgekit.cache import recipe_key
from edgekit.errors import InputError
from edgekit.models.agents_room import scratchpad, world
from edgekit.models.agents_room.scratchpad import Scratchpad
from edgekit.models.agents_room.vocab import CLS, EOS, PAD, SEP, story_vocab
from edgekit.models.tinylm.model import RECIPE_VERSION as TINYLM_VERSION
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.weights_cache import load_or_train

Progress = Callable[[float, str], None]
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it


@dataclass(frozen=True)
class StoryLMConfig:
    """Corpus, network and optimiser sizes (defaults: about three and a half CPU minutes on one thread)."""

    stories: int = 3000
    test_premises: int = 64
    dim: int = 128
    layers: int = 2
    heads: int = 4
    max_len: int = 160
    steps: int = 2400
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    seed: int = 0
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("stories", "test_premises", "dim", "layers", "heads", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"StoryLMConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise InputError(
                f"StoryLMConfig.dim {self.dim} must be a multiple of heads {self.heads}"
            )
        if self.max_len < 150:
            raise InputError(
                f"StoryLMConfig.max_len must be >= 150 (a whole story), got {self.max_len}"
            )

    def build(self) -> TinyCausalLM:
        return TinyCausalLM(len(story_vocab()), self.dim, self.layers, self.heads, self.max_len)

    def key(self) -> str:
        """Cache key (16 hex): ``recipe_key`` over "agents-room-story-lm", ``RECIPE_VERSION``,
        this config and the version of tinylm, whose network it trains."""
        config = asdict(self) | {"sdlg_lm": TINYLM_VERSION}
        return recipe_key("agents-room-story-lm", RECIPE_VERSION, config)


def story_pairs(
    premise: world.Premise, plan: world.Plan, rng: random.Random
) -> list[tuple[str, str]]:
    """The 10 (prompt, output) training pairs of one story (see the module docstring)."""
    pairs = []
    for kind in world.PLANNING:
        pad = Scratchpad(premise.text())
        for other in world.PLANNING:
            if other != kind and rng.random() < 0.5:
                pad.write(other, world.plan_entry(other, premise, plan))
        pairs.append((scratchpad.planning_prompt(pad, kind), world.plan_entry(kind, premise, plan)))
    pad = Scratchpad(premise.text())
    for kind in world.PLANNING:
        pad.write(kind, world.plan_entry(kind, premise, plan))
    for section in world.SECTIONS:
        text = world.section_text(section, premise, plan)
        pairs.append((scratchpad.writing_prompt(pad, section), text))
        pad.write(section, text)
    pairs.append(
        (scratchpad.end_to_end_prompt(premise.text()), world.reference_story(premise, plan))
    )
    return pairs


def training_pairs(config: StoryLMConfig) -> list[tuple[str, str]]:
    """All pairs of ``config.stories`` stories on the training premises (seeded)."""
    train, _ = world.split_premises(config.test_premises, config.seed)
    rng = random.Random(config.seed)
    pairs = []
    for _ in range(config.stories):
        premise = rng.choice(train)
        pairs += story_pairs(premise, world.sample_plan(premise, rng), rng)
    return pairs


def encode_pair(prompt: str, output: str) -> tuple[list[int], list[int]]:
    """(ids, targets): ``[CLS] prompt [SEP] output [SEP]`` and, per position, the next token
    to predict (-100 where the next token is part of the prompt)."""
    v = story_vocab()
    head, tail = [CLS, *v.encode(prompt), SEP], [*v.encode(output), EOS]
    ids = head + tail
    return ids, [-100] * (len(head) - 1) + tail + [-100]


def collate(pairs: Sequence[tuple[str, str]], max_len: int) -> tuple[torch.Tensor, ...]:
    """(ids (B, S), mask (B, S), targets (B, S)) int64, right-padded."""
    rows = [encode_pair(p, o) for p, o in pairs]
    length = max(len(ids) for ids, _ in rows)
    if length > max_len:
        raise InputError(f"a training sequence has {length} tokens, more than max_len {max_len}")
    ids = torch.full((len(rows), length), PAD, dtype=torch.long)
    mask, targets = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (row, target) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        targets[i, : len(target)] = torch.tensor(target)
    return ids, mask, targets


@dataclass
class TrainedLM:
    """The eval-mode story LM and its training facts (seconds = 0 when loaded from cache)."""

    model: TinyCausalLM
    final_loss: float
    train_pairs: int
    seconds: float
    cached: bool
    path: Path | None = None


def train_story_lm(config: StoryLMConfig, progress: Progress | None = None) -> TrainedLM:
    """Train the story LM for ``config.steps`` AdamW steps (one-cycle learning rate)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        pairs = training_pairs(config)
        model = config.build()
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, config.lr, total_steps=config.steps)
        gen = torch.Generator().manual_seed(config.seed)
        started, losses = time.perf_counter(), []
        model.train()
        n_plan, per_story = len(world.PLANNING), len(world.PLANNING) + len(world.SECTIONS) + 1
        kinds = [
            [i for i in range(len(pairs)) if lo <= i % per_story < hi]
            for lo, hi in ((0, n_plan), (n_plan, per_story - 1), (per_story - 1, per_story))
        ]
        weights = torch.tensor([len(k) for k in kinds], dtype=torch.float)
        for step in range(config.steps):
            group = kinds[int(torch.multinomial(weights, 1, generator=gen))]
            picks = torch.randint(len(group), (config.batch_size,), generator=gen).tolist()
            index = [group[i] for i in picks]
            ids, mask, targets = collate([pairs[i] for i in index], config.max_len)
            logits = model(ids, mask)  # (B, S, K)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress and (step + 1) % 50 == 0:
                progress((step + 1) / config.steps, f"step {step + 1} loss {loss.item():.3f}")
        tail = losses[-50:]
        return TrainedLM(
            model.eval(), sum(tail) / len(tail), len(pairs), time.perf_counter() - started, False
        )
    finally:
        torch.set_num_threads(threads)


def cache_path(config: StoryLMConfig) -> Path:
    from edgekit.cache import cache_dir

    return cache_dir("agents-room") / f"story-lm-{config.key()}.pt"


def train_cached(
    config: StoryLMConfig | None = None, progress: Progress | None = None
) -> TrainedLM:
    """The story LM of ``config``: the copy shipped in ``weights/``, else the cached one, or
    trained now and cached."""
    config = config or StoryLMConfig()
    path = cache_path(config)

    def load(blob: dict[str, Any], found: Path) -> TrainedLM:
        model = config.build()
        model.load_state_dict(blob["state"])
        return TrainedLM(
            model.eval(), float(blob["final_loss"]), int(blob["train_pairs"]), 0.0, True, found
        )

    def train() -> TrainedLM:
        trained = train_story_lm(config, progress)
        trained.path = path
        return trained

    def save(trained: TrainedLM) -> dict[str, Any]:
        return {
            "state": trained.model.state_dict(),
            "final_loss": trained.final_loss,
            "train_pairs": trained.train_pairs,
        }

    return load_or_train(path, Path(__file__).parent / "weights", train, load=load, save=save)
