"""Character vocabulary of the tiny decoder: PAD, BOS, SEP (prompt/answer), EOS, then characters.

A text sequence is ``[BOS] prompt [SEP] answer [EOS]``, right-padded with PAD.
"""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError

PAD, BOS, SEP, EOS = 0, 1, 2, 3
CHARS = " 0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz<>/,"
VOCAB_SIZE = 4 + len(CHARS)
_INDEX = {c: i + 4 for i, c in enumerate(CHARS)}


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (one per character); InputError on a character not in CHARS."""
    bad = sorted({c for c in text if c not in _INDEX})
    if bad:
        raise InputError(f"characters {bad} are not in the mm15 vocabulary {CHARS!r}")
    return [_INDEX[c] for c in text]


def decode(ids: list[int] | np.ndarray) -> str:
    """Characters of ``ids`` up to the first EOS; special tokens are skipped."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i >= 4:
            out.append(CHARS[i - 4])
    return "".join(out)


def prompt_ids(prompt: str) -> list[int]:
    """``[BOS] prompt [SEP]``: what the decoder sees before it answers."""
    return [BOS, *encode(prompt), SEP]


def batch_sequences(prompts: list[str], answers: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens (B, L) int64, loss mask (B, L) bool) for teacher forcing.

    ``mask[b, i]`` is True where position i predicts an answer token or the EOS, i.e. where
    ``tokens[b, i + 1]`` belongs to ``answer [EOS]``.
    """
    seqs = [prompt_ids(p) + encode(a) + [EOS] for p, a in zip(prompts, answers, strict=True)]
    length = max(len(s) for s in seqs)
    tokens = np.full((len(seqs), length), PAD, np.int64)
    mask = np.zeros((len(seqs), length), bool)
    for b, (seq, prompt) in enumerate(zip(seqs, prompts, strict=True)):
        tokens[b, : len(seq)] = seq
        start = len(prompt) + 1  # index of SEP: it predicts the first answer token
        mask[b, start : len(seq) - 1] = True
    return tokens, mask
