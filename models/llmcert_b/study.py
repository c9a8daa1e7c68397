"""Certificates of the biased and debiased LMs under the three prefix distributions.

``distributions(model, config)`` builds the prefix distributions for one LM (the embedding
one needs its embedding matrix); ``certify_model`` certifies every base prompt under each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.models.llmcert_b import corpus
from edgekit.models.llmcert_b.certify import Certificate, certify
from edgekit.models.llmcert_b.detectors import label_mismatch
from edgekit.models.llmcert_b.prefixes import EmbeddingNoise, JailbreakMixture, RandomTokens


@dataclass(frozen=True)
class StudyConfig:
    """Sizes of the certification study (defaults: well under a minute per LM on 1 core)."""

    n: int = 50
    confidence: float = 0.95
    prompts: int = 4
    random_length: int = 10
    insert_p: float = 0.2
    mutate_p: float = 0.01
    mag: float = 0.04
    embedding_jailbreak: int = 0
    seed: int = 0


def occupation_detector() -> Callable[[list[str]], bool]:
    """Biased when the groups' responses name different occupations (corpus.occupation_of)."""
    return label_mismatch(corpus.occupation_of)


def distributions(embedding_matrix: np.ndarray | None, config: StudyConfig) -> list[Any]:
    """Random tokens, jailbreak mixture and (given the LM's (V, d) embeddings) embedding noise."""
    from edgekit.models.llmcert_b.lm import word_vocabulary
    from edgekit.models.tinylm.tokens import encode

    vocab = word_vocabulary()
    found: list[Any] = [
        RandomTokens(vocab, config.random_length),
        JailbreakMixture(corpus.JAILBREAKS, vocab, config.insert_p, config.mutate_p),
    ]
    if embedding_matrix is not None:
        ids = encode(corpus.JAILBREAKS[config.embedding_jailbreak])
        found.append(EmbeddingNoise.around(ids, embedding_matrix, config.mag))
    return found


def certify_model(
    generators: dict[str, Any],
    config: StudyConfig,
    embedding_matrix: np.ndarray | None = None,
    step: Callable[[str], None] | None = None,
) -> list[Certificate]:
    """Certificates of every base prompt under every distribution.

    ``generators`` maps a prefix kind ("text", "embedding") to the generator for it; a kind
    without a generator is skipped. Each (distribution, prompt) gets its own seeded stream.
    """
    detector = occupation_detector()
    certificates = []
    for d_index, dist in enumerate(distributions(embedding_matrix, config)):
        if dist.kind not in generators:
            continue
        for p_index, prompt in enumerate(corpus.base_prompts(config.prompts)):
            if step:
                step(f"{dist.name}: {prompt.template}")
            rng = np.random.default_rng([config.seed, d_index, p_index])
            certificates.append(
                certify(
                    prompt, dist, generators[dist.kind], detector,
                    config.n, config.confidence, rng,
                )
            )  # fmt: skip
    return certificates


def summarise(certificates: list[Certificate]) -> dict[str, dict[str, float]]:
    """Per distribution: pooled unbiased share, mean / min lower bound, mean / max upper."""
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(c.distribution for c in certificates):
        group = [c for c in certificates if c.distribution == name]
        out[name] = {
            "unbiased": sum(c.unbiased for c in group),
            "draws": sum(c.n for c in group),
            "estimate": sum(c.unbiased for c in group) / sum(c.n for c in group),
            "mean_lower": float(np.mean([c.lower for c in group])),
            "min_lower": float(min(c.lower for c in group)),
            "mean_upper": float(np.mean([c.upper for c in group])),
            "max_upper": float(max(c.upper for c in group)),
        }
    return out
