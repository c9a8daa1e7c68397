"""SDLG is tuned on facts disjoint from the ones it is evaluated on (issue 34)."""

from __future__ import annotations

from collections import Counter

import pytest

from edgekit.models.sdlg.corpus import TIERS, build_facts, split_facts
from edgekit.models.sdlg.sdlg import SDLGConfig
from edgekit.models.sdlg.study import calibration_pairs
from edgekit.models.sdlg.tuning import tuning_key


def test_tuning_and_evaluated_facts_are_disjoint_and_cover_the_corpus() -> None:
    facts = build_facts()
    tuning, evaluated = split_facts(facts)
    assert not set(tuning) & set(evaluated)
    # disjoint by fact: no (person, attribute) is both tuned on and evaluated
    assert not {(f.name, f.attribute) for f in tuning} & {(f.name, f.attribute) for f in evaluated}
    assert sorted(tuning + evaluated, key=facts.index) == facts
    assert (tuning, evaluated) == split_facts(build_facts())  # deterministic
    assert 0.3 < len(tuning) / len(facts) < 0.37
    per_tier = Counter(f.tier for f in tuning)
    assert all(per_tier[t] > 0 for t in TIERS)  # both right and wrong answers to tune on


def test_the_card_tunes_calibrates_and_evaluates_on_disjoint_facts() -> None:
    from edgekit.models.tinylm.tokens import encode
    from edgekit.registry import get_card

    card = get_card("sdlg")
    tuning, evaluated = card.tuning_facts(), card.eval_facts()
    assert len(evaluated) == card.eval_questions
    assert not set(tuning) & set(evaluated)
    assert set(evaluated) <= set(split_facts(build_facts())[1])
    # the equivalence threshold's answer pairs ask only about tuning facts
    triples, labels = calibration_pairs(tuning)
    assert len(triples) == len(labels) == 12 * len(tuning)
    asked = {tuple(q) for q, _, _ in triples}
    assert asked <= {tuple(encode(f.question(v))) for f in tuning for v in (0, 1)}
    all_evaluated = split_facts(build_facts())[1]
    assert not asked & {tuple(encode(f.question(v))) for f in all_evaluated for v in (0, 1)}
    # int8 calibration prompts are tuning questions too
    from edgekit.models.tinylm.tokens import prompt_ids

    prompts = card.calibration_data(limit=4)["lm"]
    for feeds, fact in zip(prompts, tuning[:4], strict=True):
        assert feeds["input_ids"][0].tolist() == prompt_ids(fact.question(1))


def test_tuning_cache_key_follows_the_tuning_facts() -> None:
    tuning, evaluated = split_facts(build_facts())
    key = tuning_key("lm", SDLGConfig(), (1, 2, 5), 10, tuning)
    assert key == tuning_key("lm", SDLGConfig(), (1, 2, 5), 10, list(tuning))
    assert key != tuning_key("lm", SDLGConfig(), (1, 2, 5), 10, tuning[:-1])
    assert key != tuning_key("lm", SDLGConfig(), (1, 2, 5), 10, evaluated)


def test_split_rejects_bad_shares() -> None:
    with pytest.raises(ValueError):
        split_facts(build_facts(), share=1.0)
