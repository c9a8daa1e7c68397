"""Text-generation backends: the one thing agents, orchestrators and judges call.

A ``TextBackend`` maps a batch of prompts to a batch of continuations (plain text). The
in-repo implementation, ``StoryLMBackend``, runs the story LM through tinylm's ``CausalLM``
interface, so the same decoding works over torch or over an exported graph in any edgekit
runtime Session (``from_runner``). ``hf_backend.TransformersBackend`` wraps a transformers
causal LM loaded from a local path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from edgekit.errors import InputError
from edgekit.models.agents_room.vocab import CLS, EOS, SEP, CompactVocab, story_vocab
from edgekit.models.tinylm.causal import CausalLM, runner_backend, torch_backend

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from edgekit.card import Runner


@runtime_checkable
class TextBackend(Protocol):
    """``generate(prompts, max_new_tokens) -> continuations``, one string per prompt."""

    name: str

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]: ...


class StoryLMBackend:
    """The story LM over ``CausalLM``: ``[CLS] prompt [SEP]`` then decode until [SEP].

    ``temperature`` 0 is greedy decoding; above 0, multinomial sampling at that temperature
    from a generator reseeded with ``reseed``. Counters: ``calls`` (generate calls),
    ``generated`` (tokens produced, EOS excluded), ``truncated`` (continuations that hit the
    token budget or the LM's context before EOS).
    """

    def __init__(
        self,
        lm: CausalLM,
        vocab: CompactVocab | None = None,
        temperature: float = 0.0,
        seed: int = 0,
        name: str = "story-lm",
    ) -> None:
        if temperature < 0:
            raise InputError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        self.lm, self.vocab, self.temperature, self.name = (
            lm,
            vocab or story_vocab(),
            temperature,
            name,
        )
        self.rng = np.random.default_rng(seed)
        self.calls = self.generated = self.truncated = 0

    @classmethod
    def from_module(cls, module: nn.Module, **kwargs: Any) -> StoryLMBackend:
        """Over a torch ``TinyCausalLM`` (its ``max_len`` is the context)."""
        return cls(CausalLM(torch_backend(module), int(module.max_len)), **kwargs)

    @classmethod
    def from_runner(cls, runner: Runner, max_len: int, **kwargs: Any) -> StoryLMBackend:
        """Over an edgekit runtime Session of the exported "lm" graph (feeds input_ids and
        attention_mask (B, S) int64, output logits (B, S, K))."""
        return cls(CausalLM(runner_backend(runner), max_len), **kwargs)

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def _choose(self, log_probs: np.ndarray) -> np.ndarray:
        """Next token per row of (B, K) log-probabilities."""
        if self.temperature == 0:
            return log_probs.argmax(axis=1)
        scaled = log_probs / self.temperature
        probs = np.exp(scaled - scaled.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        cumulative = probs.cumsum(axis=1)
        draws = self.rng.random(len(probs))[:, None] * cumulative[:, -1:]
        return np.minimum((cumulative < draws).sum(axis=1), probs.shape[1] - 1)

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Continuations of ``prompts`` (decoded together, one LM call per step)."""
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        prefixes = [[CLS, *self.vocab.encode(p), SEP] for p in prompts]
        for prompt, prefix in zip(prompts, prefixes, strict=True):
            if len(prefix) >= self.lm.max_len:
                raise InputError(
                    f"prompt of {len(prefix)} tokens leaves no room in the LM's context of "
                    f"{self.lm.max_len}: {prompt[:60]!r}..."
                )
        self.calls += 1
        outputs: list[list[int]] = [[] for _ in prompts]
        finished = [False] * len(prompts)
        live = list(range(len(prompts)))
        for _ in range(max_new_tokens):
            live = [i for i in live if len(prefixes[i]) + len(outputs[i]) < self.lm.max_len]
            if not live:
                break
            log_probs = self.lm.next_log_probs([prefixes[i] + outputs[i] for i in live])  # (n, K)
            for i, token in zip(live, self._choose(log_probs).tolist(), strict=True):
                if token == EOS:
                    finished[i] = True
                else:
                    outputs[i].append(int(token))
            live = [i for i in live if not finished[i]]
        self.truncated += finished.count(False)
        self.generated += sum(len(o) for o in outputs)
        return [self.vocab.decode(o) for o in outputs]
