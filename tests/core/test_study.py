"""Studies live beside their cards (``edgekit.models.NAME.experiment``), found by
``edgekit.study.study_for``; cards themselves carry no research hooks."""

from __future__ import annotations

import inspect

from edgekit.card import ModelCard
from edgekit.registry import card_class, names
from edgekit.study import study_for

WITH_STUDY = {
    "agents-room", "certified-unlearning", "con-j", "d3u", "hissd", "llmcert-b", "mm15",
    "mmie-score", "mtid", "omniedit", "poison-audit", "randlora", "sae-polysemy", "sdlg",
    "spectral-reg", "wlks",
}  # fmt: skip


def test_cards_carry_no_experiment_hook() -> None:
    assert not hasattr(ModelCard, "experiment")
    for name in names():
        assert not hasattr(card_class(name), "experiment"), name


def test_study_for_finds_each_models_study_and_only_those() -> None:
    found = set()
    for name in names():
        card = card_class(name).__new__(card_class(name))  # no training or weights loaded
        study = study_for(card)
        if study is None:
            continue
        found.add(name)
        params = list(inspect.signature(study).parameters)
        assert params[:3] == ["card", "out", "show_progress"], (name, params)
    assert found == WITH_STUDY


def test_a_card_outside_the_zoo_has_no_study() -> None:
    class Plain(ModelCard):
        name = "plain-test"

    assert study_for(Plain.__new__(Plain)) is None
