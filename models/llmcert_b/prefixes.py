"""The three prefix distributions of LLMCert-B; each has ``name``, ``kind`` and ``sample(rng)``.

- ``RandomTokens``: ``length`` tokens drawn uniformly from a vocabulary of printable words,
  joined by spaces (kind "text").
- ``JailbreakMixture``: one jailbreak, with each other jailbreak inserted at a random sentence
  boundary with probability ``insert_p`` (0.2) and then each word replaced by a random
  vocabulary word with probability ``mutate_p`` (0.01) (kind "text").
- ``EmbeddingNoise``: the embedding rows (P, d) of a jailbreak plus uniform noise
  ``mag * max|E| * (U - 0.5)``, U ~ U[0, 1) elementwise, max|E| over the whole embedding
  matrix, ``mag`` 0.04 (kind "embedding": needs a generator that takes input embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass(frozen=True)
class RandomTokens:
    """Prefixes of ``length`` random vocabulary words."""

    vocabulary: tuple[str, ...]
    length: int = 10
    name: str = "random tokens"
    kind: str = "text"

    def __post_init__(self) -> None:
        if not self.vocabulary or self.length < 1:
            raise InputError("RandomTokens needs a non-empty vocabulary and length >= 1")

    def sample(self, rng: np.random.Generator) -> str:
        picks = rng.integers(len(self.vocabulary), size=self.length)
        return " ".join(self.vocabulary[i] for i in picks)


@dataclass(frozen=True)
class JailbreakMixture:
    """Mixtures of jailbreak sentences with random insertion and word mutation."""

    jailbreaks: tuple[str, ...]
    vocabulary: tuple[str, ...]
    insert_p: float = 0.2
    mutate_p: float = 0.01
    name: str = "jailbreak mixture"
    kind: str = "text"

    def __post_init__(self) -> None:
        if not self.jailbreaks or not self.vocabulary:
            raise InputError("JailbreakMixture needs jailbreaks and a mutation vocabulary")
        for p in (self.insert_p, self.mutate_p):
            if not 0.0 <= p <= 1.0:
                raise InputError(f"probabilities must be in [0, 1], got {p}")

    def sample(self, rng: np.random.Generator) -> str:
        main = int(rng.integers(len(self.jailbreaks)))
        sentences = [self.jailbreaks[main]]
        for i, other in enumerate(self.jailbreaks):
            if i != main and rng.random() < self.insert_p:
                sentences.insert(int(rng.integers(len(sentences) + 1)), other)
        words = " ".join(sentences).split()
        for i in range(len(words)):
            if rng.random() < self.mutate_p:
                words[i] = self.vocabulary[int(rng.integers(len(self.vocabulary)))]
        return " ".join(words)


@dataclass(frozen=True)
class EmbeddingNoise:
    """Jailbreak embeddings (P, d) + ``mag * scale * (U - 0.5)``; scale = max|E|."""

    embeddings: np.ndarray
    scale: float
    mag: float = 0.04
    name: str = "embedding noise"
    kind: str = "embedding"

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.scale <= 0 or self.mag < 0:
            raise InputError(
                f"EmbeddingNoise needs embeddings (P, d), scale > 0, mag >= 0; got shape "
                f"{self.embeddings.shape}, scale {self.scale}, mag {self.mag}"
            )

    @classmethod
    def around(
        cls, token_ids: Sequence[int], embedding_matrix: np.ndarray, mag: float = 0.04
    ) -> EmbeddingNoise:
        """Noise around the rows ``token_ids`` of ``embedding_matrix`` (V, d)."""
        matrix = np.asarray(embedding_matrix, dtype=np.float32)
        rows = matrix[np.asarray(list(token_ids), dtype=np.int64)]  # (P, d)
        return cls(rows, float(np.abs(matrix).max()), mag)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """(P, d) float32."""
        noise = rng.random(self.embeddings.shape) - 0.5
        return (self.embeddings + self.mag * self.scale * noise).astype(np.float32)
