"""Preference pairs over the SDLG fact corpus: (question, answer a, answer b, which is better).

The better answer states the fact's value; the worse one is subtly wrong: the same attribute with
another value, e.g. "where does anna live?" with "in paris" vs "anna lives in rome". Answers
are written short (bare value or short phrase) or long (the sentence "anna lives in rome").

Facts are split three ways (seeded): ``seed`` facts get gold judgments for the judge's SFT,
``train`` facts only preference labels (what Con-J and the reward model learn from, together with
the seed pairs), ``test`` facts are held out. Held-out pairs are also drawn for the training
facts with wrong values no training pair of that fact used ("new pairs, seen facts").

Dataset bias: in the preference pairs of the train facts the better answer is the long one with
probability ``long_better_share`` (0.8 by default; every pair has one long and one short
answer), in the seed pairs (the judge's demonstrations) and in held-out pairs with probability
0.5, so a judge that learnt "longer is better" from the labels loses on held-out pairs where the
worse answer is the long one. Positions are balanced: answer a is the better one in
exactly half of each fact's pairs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from edgekit.errors import InputError
from edgekit.models.sdlg.corpus import ATTRIBUTES, Fact, build_facts

LONG_FORM = 2  # "{name} lives in {value}"
SHORT_FORMS = (0, 1)  # "{value}", "in {value}"
SPLITS = ("seed", "train", "test")


@dataclass(frozen=True)
class PrefPair:
    """One preference pair: ``better`` is "a" or "b"; ``long`` says which answer is the long one."""

    fact: Fact
    question: str
    answer_a: str
    answer_b: str
    better: str
    wrong_value: str
    long: str
    split: str
    held_out: bool

    @property
    def answers(self) -> tuple[str, str]:
        return self.answer_a, self.answer_b

    @property
    def worse_is_long(self) -> bool:
        """True when the worse answer is the long one (against the training bias)."""
        return self.long != self.better


@dataclass(frozen=True)
class PrefData:
    """All pairs of one corpus: training pairs (seed + train facts) and the two held-out sets."""

    facts: list[Fact]
    split_of: dict[Fact, str]
    pairs: list[PrefPair]

    def select(self, split: str, held_out: bool) -> list[PrefPair]:
        """Pairs of facts in ``split`` ("seed" | "train" | "test"), held-out or training ones."""
        if split not in SPLITS:
            raise InputError(f"split must be one of {SPLITS}, got {split!r}")
        return [p for p in self.pairs if p.split == split and p.held_out == held_out]

    def training(self) -> list[PrefPair]:
        """The preference pairs every method learns from: seed and train facts, not held out."""
        return [p for p in self.pairs if p.split != "test" and not p.held_out]

    def heldout_seen(self) -> list[PrefPair]:
        """Held-out pairs of seed and train facts (wrong values no training pair used)."""
        return [p for p in self.pairs if p.split != "test" and p.held_out]

    def heldout_unseen(self) -> list[PrefPair]:
        """Pairs of the held-out test facts."""
        return [p for p in self.pairs if p.split == "test"]


def make_pair(
    fact: Fact,
    wrong_value: str,
    better: str,
    long_better: bool,
    variant: int,
    short_form: int,
    split: str = "train",
    held_out: bool = False,
) -> PrefPair:
    """The pair of ``fact`` vs ``wrong_value``; the better answer in position ``better``, written
    long when ``long_better`` (the worse one short with ``short_form``), else the reverse."""
    if better not in ("a", "b"):
        raise InputError(f"better must be 'a' or 'b', got {better!r}")
    if wrong_value == fact.value:
        raise InputError(f"the wrong value must differ from the fact's value {fact.value!r}")
    wrong = Fact(fact.name, fact.attribute, wrong_value, fact.tier)
    good_form, bad_form = (LONG_FORM, short_form) if long_better else (short_form, LONG_FORM)
    good, bad = fact.answer(good_form), wrong.answer(bad_form)
    a, b = (good, bad) if better == "a" else (bad, good)
    worse = "b" if better == "a" else "a"
    return PrefPair(
        fact,
        fact.question(variant),
        a,
        b,
        better,
        wrong_value,
        better if long_better else worse,
        split,
        held_out,
    )


def build_prefs(
    people: int = 56,
    seed: int = 0,
    pairs_per_fact: int = 4,
    heldout_per_fact: int = 2,
    shares: tuple[float, float, float] = (0.25, 0.5, 0.25),
    long_better_share: float = 0.8,
) -> PrefData:
    """Facts of ``build_facts(people, seed)`` split by ``shares`` (seed, train, test) and their
    pairs: ``pairs_per_fact`` training pairs for seed/train facts plus ``heldout_per_fact``
    held-out ones with unused wrong values; ``pairs_per_fact + heldout_per_fact`` for test facts.
    """
    if pairs_per_fact < 2 or pairs_per_fact % 2:
        raise InputError(f"pairs_per_fact must be even and >= 2, got {pairs_per_fact}")
    if heldout_per_fact < 0:
        raise InputError(f"heldout_per_fact must be >= 0, got {heldout_per_fact}")
    if len(shares) != 3 or min(shares) <= 0 or abs(sum(shares) - 1) > 1e-9:
        raise InputError(f"shares must be three positive fractions summing to 1, got {shares}")
    if not 0.0 <= long_better_share <= 1.0:
        raise InputError(f"long_better_share must be in [0, 1], got {long_better_share}")
    facts = build_facts(people, seed)
    rng = random.Random(seed + 7)
    order = list(range(len(facts)))
    rng.shuffle(order)
    n_seed = max(1, round(shares[0] * len(facts)))
    n_train = max(1, round(shares[1] * len(facts)))
    split_of = {}
    for rank, index in enumerate(order):
        split_of[facts[index]] = (
            "seed" if rank < n_seed else "train" if rank < n_seed + n_train else "test"
        )
    pairs: list[PrefPair] = []
    for fact in facts:
        split = split_of[fact]
        others = [v for v in ATTRIBUTES[fact.attribute]["values"] if v != fact.value]
        total = pairs_per_fact + heldout_per_fact
        if total > len(others):
            raise InputError(f"{total} pairs per fact need that many wrong values")
        wrong_values = rng.sample(others, total)
        for i, wrong in enumerate(wrong_values):
            held_out = split == "test" or i >= pairs_per_fact
            share = 0.5 if held_out or split == "seed" else long_better_share
            better = "a" if i % 2 == 0 else "b"  # position balanced within each fact
            pairs.append(
                make_pair(
                    fact,
                    wrong,
                    better,
                    rng.random() < share,
                    rng.randrange(2),
                    rng.choice(SHORT_FORMS),
                    split,
                    held_out,
                )
            )
    return PrefData(facts, split_of, pairs)
