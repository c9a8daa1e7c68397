"""The PS-Eval positive control: an SAE trained (by the card's code) on activations with
planted senses must score well above chance; broken variants must not."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgekit.models.sae_polysemy.control import PlantedConfig, planted_control, planted_data
from edgekit.models.sae_polysemy.train import SAEConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the card's recipe (TopK) made small: 384 latents, 150 steps, about 2 s on one thread
FAST = SAEConfig(expansion=1, k=8, steps=150, batch_size=128)
THRESHOLD = 0.8  # chance is 0.5 (balanced pairs)
NEAR_CHANCE = 0.65


def test_planted_pairs_are_balanced_and_seeded() -> None:
    data = planted_data(PlantedConfig())
    assert data.context1.shape == data.context2.shape == (160, 384)
    assert data.labels.mean() == 0.5
    again = planted_data(PlantedConfig())
    np.testing.assert_array_equal(data.context1, again.context1)
    broken = planted_data(PlantedConfig(identical_senses=True))
    np.testing.assert_array_equal(data.labels, broken.labels)


def test_pseval_scores_planted_senses_well_and_broken_variants_near_chance() -> None:
    scores = planted_control(FAST)
    assert scores["ps_eval_planted"] >= THRESHOLD, scores
    # both senses planted on one direction: nothing can tell them apart
    assert scores["ps_eval_planted_broken"] < NEAR_CHANCE, scores
    # the recipe's initialisation without a training step, and no SAE at all
    assert scores["ps_eval_planted_untrained"] < NEAR_CHANCE, scores
    assert scores["ps_eval_planted_raw"] < NEAR_CHANCE, scores


def test_the_control_needs_training() -> None:
    # a handful of steps does not find the planted senses: the control measures the SAE
    scores = planted_control(replace(FAST, steps=2))
    assert scores["ps_eval_planted"] < THRESHOLD, scores
