"""Texts in, moderation scores out, through any runner of the "scorer" graph.

Input rules (documented behaviour, never a crash):

- a text must be a non-empty ``str`` (or UTF-8 ``bytes``); empty or whitespace-only text and
  bytes that are not valid UTF-8 raise InputError naming the position;
- a text longer than the encoder's 128 tokens is truncated to its first 128 tokens, scored,
  and flagged in ``Scores.truncated`` (and counted in ``Scores.truncated_count``);
- with ``queries`` (one per text, "" for none) each text is encoded as the pair
  ``[CLS] query [SEP] response [SEP]``; a pair over 128 tokens is cut from its longer side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from edgekit.card import Runner
from edgekit.errors import InputError
from edgekit.models.minilm.encoder import MAX_LENGTH, tokenizer_path

GRAPH = "scorer"


@dataclass
class Scores:
    """Per text (N): P(unsafe), topic index (0-10), severity level (0-4) and the raw logits."""

    p_unsafe: np.ndarray  # (N,) float64
    safety_logits: np.ndarray  # (N, 2) float32
    topic_logits: np.ndarray  # (N, 11) float32
    severity_logits: np.ndarray  # (N, 5) float32
    truncated: np.ndarray  # (N,) bool: the text was cut to MAX_LENGTH tokens

    @property
    def topic(self) -> np.ndarray:
        return self.topic_logits.argmax(axis=1)

    @property
    def level(self) -> np.ndarray:
        return self.severity_logits.argmax(axis=1)

    @property
    def truncated_count(self) -> int:
        return int(self.truncated.sum())


def check_texts(texts: Sequence[str | bytes] | str) -> list[str]:
    """``texts`` as a list of non-empty strings; InputError for empty or non-UTF-8 input."""
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    out = []
    for i, text in enumerate(texts):
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"text {i} is not valid UTF-8 ({exc.reason} at byte {exc.start}); "
                    "decode it or replace the bad bytes first"
                ) from None
        if not isinstance(text, str):
            raise InputError(f"text {i} is a {type(text).__name__}, expected str")
        if not text.strip():
            raise InputError(f"text {i} is empty; the scorer needs at least one word")
        out.append(text)
    if not out:
        raise InputError("no texts to score")
    return out


@lru_cache(maxsize=1)
def _tokenizer():  # tokenizers.Tokenizer from the bundled tokenizer.json, truncating to 128
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_LENGTH)
    return tok


def encode_texts(
    texts: Sequence[str], queries: Sequence[str] | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(feeds, truncated): ids/mask (N, L) int64 padded to the longest text (<= 128 tokens),
    and (N,) bool flags for texts that were cut to 128 tokens (the device tokenises the same
    way, with the bundled tokenizer.json). With ``queries`` (N, "" = none) a text with a query
    is encoded as the pair (query, text)."""
    inputs: list[str | tuple[str, str]] = list(texts)
    if queries is not None:
        inputs = [(q, t) if q else t for q, t in zip(queries, texts, strict=True)]
    encodings = _tokenizer().encode_batch(inputs)
    truncated = np.array([bool(e.overflowing) for e in encodings], dtype=bool)
    longest = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), longest), dtype=np.int64)
    mask = np.zeros((len(encodings), longest), dtype=np.int64)
    for row, enc in enumerate(encodings):
        ids[row, : len(enc.ids)] = enc.ids
        mask[row, : len(enc.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask}, truncated


def softmax_unsafe(safety_logits: np.ndarray) -> np.ndarray:
    """P(unsafe) (N,) = p_unsafe / (p_safe + p_unsafe) from logits (N, 2), float64."""
    z = np.asarray(safety_logits, dtype=np.float64)
    return 1.0 / (1.0 + np.exp(z[:, 0] - z[:, 1]))


def score_texts(
    runner: Runner,
    texts: Sequence[str | bytes] | str,
    batch: int = 32,
    queries: Sequence[str] | None = None,
) -> Scores:
    """Score ``texts`` through ``runner`` (the scorer graph), in batches of ``batch``; with
    ``queries`` (one per text, "" for none), each text as the answer to its query.

    All batches are padded to the longest text of the whole list, so an artifact sees one
    sequence length.
    """
    from edgekit.models.bingoguard.queries import check_queries

    texts = check_texts(texts)
    if queries is not None:
        queries = check_queries(queries, len(texts))
    feeds, truncated = encode_texts(texts, queries)
    outs: dict[str, list[np.ndarray]] = {
        "safety_logits": [],
        "topic_logits": [],
        "severity_logits": [],
    }
    for start in range(0, len(truncated), batch):
        result = runner.run({k: v[start : start + batch] for k, v in feeds.items()})
        for name, parts in outs.items():
            parts.append(np.asarray(result[name], dtype=np.float32))
    safety, topic, severity = (np.concatenate(outs[k]) for k in outs)
    return Scores(softmax_unsafe(safety), safety, topic, severity, truncated)
