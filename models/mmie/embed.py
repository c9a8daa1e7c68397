"""Text embeddings for the judge: pretrained all-MiniLM-L6-v2 (frozen) or a hashing stand-in.

"minilm" runs the packaged sentence-transformers model offline (``edgekit.models.minilm``):
384-d mean-pooled, unit-norm vectors. "hashing" is a bag of words and word bigrams hashed
into 384 signed buckets, unit norm: no weights, instant, used by the tests. Embeddings of a
text set are cached under ``cache_dir("mmie")`` keyed by the texts and the embedder.
"""

from __future__ import annotations

import hashlib
import io
import re
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from edgekit.errors import InputError

DIM = 384
EMBEDDERS = ("minilm", "hashing")
Progress = Callable[[float, str], None]


def hashing_embed(texts: Sequence[str]) -> np.ndarray:
    """(N, 384) float32 unit-norm hashed bag of words + bigrams (zero vector for no words)."""
    out = np.zeros((len(texts), DIM), np.float32)
    for row, text in enumerate(texts):
        words = re.findall(r"[a-z]+|\d+", text.lower())
        for token in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
            h = zlib.crc32(token.encode())
            out[row, h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-12)


def minilm_embed(
    texts: Sequence[str], batch: int = 64, progress: Progress | None = None
) -> np.ndarray:
    """(N, 384) float32 all-MiniLM-L6-v2 sentence embeddings (unit norm), computed offline."""
    import torch

    from edgekit.models.minilm.encoder import MeanPoolEncoder, load_bert, tokenize

    encoder = MeanPoolEncoder(load_bert()).eval()
    order = np.argsort([len(t) for t in texts])  # similar lengths share a batch: less padding
    out = np.zeros((len(texts), DIM), np.float32)
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            idx = order[start : start + batch]
            feeds = tokenize([texts[i] for i in idx])
            out[idx] = encoder(
                torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
            ).numpy()
            if progress:
                progress(min(1.0, (start + batch) / len(texts)), f"embedded {start + len(idx)}")
    return out


def embed_texts(
    texts: Sequence[str], embedder: str = "minilm", progress: Progress | None = None
) -> dict[str, np.ndarray]:
    """{text: (384,) float32 embedding} for the distinct ``texts``; MiniLM results are cached."""
    if embedder not in EMBEDDERS:
        raise InputError(f"unknown text embedder {embedder!r}; expected one of {EMBEDDERS}")
    unique = sorted(set(texts))
    if embedder == "hashing":
        return dict(zip(unique, hashing_embed(unique), strict=True))
    from edgekit.cache import atomic_write_bytes, cache_dir

    key = hashlib.sha256("\n".join([embedder, *unique]).encode()).hexdigest()[:16]
    path = cache_dir("mmie") / f"text-{embedder}-{key}.npy"
    vectors = None
    if path.is_file():
        try:
            vectors = np.load(path)
        except (OSError, ValueError):  # a corrupt file: embed again and overwrite it
            vectors = None
    if vectors is None or vectors.shape != (len(unique), DIM):
        vectors = minilm_embed(unique, progress=progress)
        buffer = io.BytesIO()
        np.save(buffer, vectors)
        atomic_write_bytes(path, buffer.getvalue())
    return dict(zip(unique, vectors, strict=True))
