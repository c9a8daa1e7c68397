"""The sdlg card's model options: another causal LM and an NLI model from local folders.

Options (``edgekit ... --option KEY=VALUE``), besides ``LMConfig``'s (lm.py):

- ``lm=FOLDER``: a Hugging Face causal LM with its own fast tokenizer (``LocalCausalLM``:
  ``AutoModelForCausalLM`` + ``AutoTokenizer``, ``local_files_only``; nothing is downloaded)
  instead of the in-repo tiny LM. With it, ``prompt`` (a template holding ``{question}``,
  default ``DEFAULT_PROMPT``) and ``stop`` ("newline": EOS or a newline ends an answer; "eos")
  shape its prompt and answers (vocab.TokenizerVocabulary); ``max_len`` caps its context
  (default: its position table); ``people`` and ``seed`` still choose the corpus; the tiny
  LM's network and training options (``TINY_LM_OPTIONS``) are InputErrors.
- ``nli=FOLDER``: a local NLI classifier with its own tokenizer as the equivalence model
  (text_equivalence.NLIReader) instead of the calibrated MiniLM cosine, for either LM.

``source_key`` names a non-default source in tuning cache keys; the default (neither option)
keeps the in-repo LM's key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgekit.cache import recipe_key
from edgekit.errors import InputError
from edgekit.models.sdlg.lm import LMConfig
from edgekit.models.sdlg.vocab import DEFAULT_PROMPT, TokenizerVocabulary

TINY_LM_OPTIONS = ("dim", "layers", "heads", "steps", "batch_size", "lr", "weight_decay", "threads")
SOURCE_VERSION = 1  # bump when what a source key covers changes
FALLBACK_CONTEXT = 2048  # tokens, for a config that names no position limit


@dataclass(frozen=True)
class ModelOptions:
    """Which LM and equivalence model the card runs (module doc); "" = the default."""

    lm: str = ""
    nli: str = ""
    prompt: str = DEFAULT_PROMPT
    stop: str = "newline"


def split_options(options: Mapping[str, Any]) -> tuple[ModelOptions, dict[str, Any]]:
    """(model options, the ``LMConfig`` options) of the card's ``options``; InputError for an
    unknown name or a combination that does nothing (module doc)."""
    source = {f.name for f in fields(ModelOptions)}
    config = {f.name for f in fields(LMConfig)}
    unknown = sorted(set(options) - source - config)
    if unknown:
        raise InputError(
            f"sdlg options {unknown} are unknown; expected some of {sorted(source | config)}"
        )
    chosen = {k: v for k, v in options.items() if k in source}
    for name in ("prompt", "stop"):
        if name in chosen and not isinstance(chosen[name], str):
            raise InputError(f"sdlg option {name} must be text, got {chosen[name]!r}")
    model = ModelOptions(**chosen)
    if not model.lm:
        given = sorted({"prompt", "stop"} & set(chosen))
        if given:
            raise InputError(
                f"sdlg options {given} shape another LM's prompt and need lm=FOLDER; the "
                "in-repo LM's format is fixed ([CLS] question [SEP])"
            )
    else:
        given = sorted(set(TINY_LM_OPTIONS) & set(options))
        if given:
            raise InputError(
                f"sdlg options {given} set the in-repo tiny LM's network and training; with "
                f"lm={model.lm!r} they do nothing: drop them"
            )
    return model, {k: v for k, v in options.items() if k in config}


class LogitsGraph(nn.Module):
    """forward(input_ids (B, S) int64, attention_mask (B, S) int64) -> logits (B, S, V)
    float32 of a transformers causal LM, full-sequence re-run, right padding, no KV cache."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.logits.float()


class LocalCausalLM:
    """A Hugging Face causal LM and its fast tokenizer from the local ``folder`` (option lm),
    checked on construction; the network loads on first use (``module``)."""

    def __init__(
        self, folder: str, prompt: str = DEFAULT_PROMPT, stop: str = "newline", max_len: int = 0
    ) -> None:
        from transformers import AutoConfig

        from edgekit.models.hf_local import folder_fingerprint, load_fast_tokenizer, model_folder

        option = "sdlg option lm"
        self.folder: Path = model_folder(folder, option)
        self.fingerprint = folder_fingerprint(self.folder)
        self.tokenizer = load_fast_tokenizer(self.folder, option)
        self.vocab = TokenizerVocabulary(self.tokenizer, prompt, stop)
        config = AutoConfig.from_pretrained(str(self.folder), local_files_only=True)
        limit = next(
            (
                int(getattr(config, name))
                for name in ("n_positions", "max_position_embeddings")
                if isinstance(getattr(config, name, None), int)
            ),
            FALLBACK_CONTEXT,
        )
        self.max_len = min(limit, max_len) if max_len else limit
        self.vocab_size = int(getattr(config, "vocab_size", 0) or len(self.tokenizer))

    @cached_property
    def module(self) -> LogitsGraph:
        """The network as an (ids, mask) -> logits module (float32, eval mode)."""
        from edgekit.models.hf_local import load_model

        return LogitsGraph(load_model(self.folder, "sdlg option lm")).eval()

    def tokenizer_file(self, spare: Path) -> Path:
        """The folder's tokenizer.json, else the tokenizer written to ``spare``."""
        found = self.folder / "tokenizer.json"
        if found.is_file():
            return found
        self.tokenizer.backend_tokenizer.save(str(spare))
        return spare


def source_key(model: ModelOptions, lm_key: str, lm: LocalCausalLM | None, nli: str) -> str:
    """Cache-key part (16 hex) naming the LM and the equivalence model: the in-repo LM's key
    ``lm_key`` or the folder's fingerprint with its prompt, stop and context; the NLI folder's
    fingerprint ``nli`` ("" = the MiniLM cosine)."""
    if lm is None:
        described: dict[str, Any] = {"lm": lm_key}
    else:
        described = {
            "lm": lm.fingerprint,
            "prompt": model.prompt,
            "stop": model.stop,
            "max_len": lm.max_len,
        }
    return recipe_key("sdlg-source", SOURCE_VERSION, {**described, "nli": nli})
