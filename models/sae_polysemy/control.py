"""A positive control for PS-Eval: SAEs trained on synthetic activations with planted senses.

Every MiniLM SAE scores at chance on the WiC pairs, which says nothing unless PS-Eval can
succeed at all. Here the answer is known by construction. In d dimensions (the card's model's
width: 384 for MiniLM):

- each of ``polysemous`` words has a word direction u_w and two sense directions s_w0, s_w1;
  each of ``monosemous`` words has u_w and one sense s_w0 (random unit vectors, nearly
  orthogonal at this width);
- one "target-token activation" of word w in sense j is
  ``sense_scale * (1 + 0.1 g) * s_wj + word_scale * u_w + context + noise``: ``context_active``
  of ``context_atoms`` shared context directions at magnitudes U(0.5, 1.5) * context_scale,
  and Gaussian noise of ``noise`` per dimension;
- the SAE is trained by the card's code (``train.train_sae`` with the card's ``SAEConfig``) on
  ``train_samples`` such activations of random words and senses;
- the PS-Eval pairs are fresh activations (never trained on): per polysemous word one
  same-sense pair and two different-sense pairs, per monosemous word one same pair (balanced:
  chance is 0.5), scored exactly as the card scores WiC (``pseval.pseval_sae``: argmax latent
  of each context, "same meaning" when they share it).

Broken variants, which must score near chance: ``identical_senses`` (both senses of a
polysemous word planted on the same direction, so nothing can tell them apart) and the
untrained SAE (the card's initialisation, no training steps). ``planted_control`` returns the
four accuracies: the trained SAE, the two broken variants and raw activations (argmax of the
d dimensions, no SAE).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from edgekit.models.sae_polysemy.activations import D_MODEL
from edgekit.models.sae_polysemy.pseval import pseval_features, pseval_sae
from edgekit.models.sae_polysemy.sae import SparseAutoencoder
from edgekit.models.sae_polysemy.train import SAEConfig, train_sae


@dataclass(frozen=True)
class PlantedConfig:
    """The synthetic activations of the control (module doc)."""

    polysemous: int = 40
    monosemous: int = 40
    train_samples: int = 8192
    heldout_samples: int = 1024
    sense_scale: float = 3.0
    word_scale: float = 1.0
    context_atoms: int = 1024
    context_active: int = 16
    context_scale: float = 0.7
    noise: float = 0.05
    identical_senses: bool = False  # the broken control: one direction for both senses
    seed: int = 0


@dataclass(frozen=True)
class PlantedData:
    """Training / held-out activations (N, d), PS-Eval contexts (P, d) each and labels (P,)."""

    train: np.ndarray
    heldout: np.ndarray
    context1: np.ndarray
    context2: np.ndarray
    labels: np.ndarray


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.standard_normal((n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def planted_data(config: PlantedConfig, d: int = D_MODEL) -> PlantedData:
    """The control's activations, seeded (module doc)."""
    rng = np.random.default_rng(config.seed)
    words = config.polysemous + config.monosemous
    word_dirs = _unit(rng, words, d)  # (W, d)
    sense_dirs = _unit(rng, 2 * words, d).reshape(words, 2, d)  # (W, 2, d)
    if config.identical_senses:
        sense_dirs[:, 1] = sense_dirs[:, 0]
    atoms = _unit(rng, config.context_atoms, d)  # (A, d)
    senses = np.where(np.arange(words) < config.polysemous, 2, 1)  # (W,)

    def sample(word: np.ndarray, sense: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        n = len(word)
        size = config.sense_scale * (1 + 0.1 * gen.standard_normal(n))  # (n,)
        x = size[:, None] * sense_dirs[word, sense] + config.word_scale * word_dirs[word]
        for _ in range(config.context_active):
            pick = gen.integers(config.context_atoms, size=n)
            x += config.context_scale * gen.uniform(0.5, 1.5, size=(n, 1)) * atoms[pick]
        x += config.noise * gen.standard_normal((n, d))
        return x.astype(np.float32)  # (n, d)

    def random_senses(n: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        word = gen.integers(words, size=n)
        return word, (gen.random(n) * senses[word]).astype(np.int64)

    train = sample(*random_senses(config.train_samples, rng), rng)
    heldout = sample(*random_senses(config.heldout_samples, rng), rng)
    first_word, first_sense, second_sense, labels = [], [], [], []
    for w in range(words):
        if senses[w] == 2:
            for a, b in ((0, 0) if rng.random() < 0.5 else (1, 1), (0, 1), (1, 0)):
                first_word.append(w), first_sense.append(a), second_sense.append(b)
                labels.append(int(a == b))
        else:
            first_word.append(w), first_sense.append(0), second_sense.append(0)
            labels.append(1)
    word = np.array(first_word)
    return PlantedData(
        train,
        heldout,
        sample(word, np.array(first_sense), rng),
        sample(word, np.array(second_sense), rng),
        np.array(labels),
    )


def control_config(config: SAEConfig) -> SAEConfig:
    """The card's SAE recipe as the control trains it (two threads at most are no faster)."""
    return replace(config, threads=1)


def _accuracy(model: SparseAutoencoder, data: PlantedData) -> float:
    return float(pseval_sae(model, data.context1, data.context2, data.labels)["accuracy"])


@lru_cache(maxsize=8)
def planted_control(
    config: SAEConfig | None = None, planted: PlantedConfig | None = None
) -> dict[str, float]:
    """PS-Eval accuracy on the planted pairs (chance 0.5): ``ps_eval_planted`` (an SAE of the
    card's recipe ``config`` trained on the planted activations), ``ps_eval_planted_broken``
    (the same, senses planted on one direction), ``ps_eval_planted_untrained`` (the recipe's
    initialisation, zero steps), ``ps_eval_planted_raw`` (argmax of the raw activations).
    The activations are as wide as the recipe's model (``config.d_model``). Seconds on one
    thread for the card's default recipe; remembered per (config, planted)."""
    config = control_config(config or SAEConfig())
    planted = planted or PlantedConfig()
    good = planted_data(planted, config.d_model)
    broken = planted_data(replace(planted, identical_senses=True), config.d_model)
    trained = train_sae(config, good.train, good.heldout)
    untrained = train_sae(replace(config, steps=0), good.train, good.heldout)
    raw = pseval_features(good.context1.argmax(-1), good.context2.argmax(-1), good.labels)
    return {
        "ps_eval_planted": _accuracy(trained.build(), good),
        "ps_eval_planted_broken": _accuracy(
            train_sae(config, broken.train, broken.heldout).build(), broken
        ),
        "ps_eval_planted_untrained": _accuracy(untrained.build(), good),
        "ps_eval_planted_raw": float(raw["accuracy"]),
        "ps_eval_planted_pairs": float(len(good.labels)),
    }
