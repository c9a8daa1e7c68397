"""A synthetic question-answer corpus of personal facts, some seen often and some rarely.

Each of ``people`` people has four facts (city, job, pet, favourite colour). A fact's
popularity tier decides how many times it appears in the training data (``TIER_COUNTS``):
frequent facts are learnt, rare ones half-learnt and unseen ones never seen, so a small LM
trained on the corpus answers some questions right and hallucinates on others. Every training
occurrence picks a question paraphrase and an answer form at random ("paris", "in paris",
"anna lives in paris"), so an answer's wording varies even when its meaning is certain: the
case where semantic entropy and predictive entropy disagree.

Correctness of a generated answer (``is_correct``): ROUGE-1 F1 between its content words
(words that are neither template words nor words of the question) and the reference value's
words, at or above ``CORRECT_ROUGE`` (0.5).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

NAMES = [
    "anna",
    "ben",
    "carl",
    "dora",
    "emma",
    "frank",
    "grace",
    "henry",
    "iris",
    "jack",
    "kate",
    "leo",
    "mia",
    "nina",
    "oscar",
    "paul",
    "rosa",
    "sam",
    "tina",
    "victor",
    "wendy",
    "xavier",
    "yara",
    "zoe",
    "adam",
    "bella",
    "chris",
    "diana",
    "eric",
    "fiona",
    "george",
    "hannah",
    "ivan",
    "julia",
    "kevin",
    "laura",
    "mark",
    "olga",
    "peter",
    "quinn",
    "ruth",
    "simon",
    "tom",
    "uma",
    "vera",
    "will",
    "amy",
    "bob",
    "cara",
    "dan",
    "eva",
    "fred",
    "gina",
    "hugo",
    "ida",
    "joel",
]

ATTRIBUTES: dict[str, dict[str, tuple[str, ...]]] = {
    "city": {
        "values": tuple(
            [
                "paris",
                "london",
                "berlin",
                "madrid",
                "rome",
                "vienna",
                "prague",
                "oslo",
                "dublin",
                "lisbon",
                "athens",
                "warsaw",
                "cairo",
                "tokyo",
                "seoul",
                "lima",
                "quito",
                "boston",
                "denver",
                "chicago",
            ]
        ),
        "questions": ("where does {name} live?", "which city does {name} live in?"),
        "answers": ("{value}", "in {value}", "{name} lives in {value}"),
    },
    "job": {
        "values": tuple(
            [
                "doctor",
                "teacher",
                "farmer",
                "pilot",
                "baker",
                "lawyer",
                "nurse",
                "chef",
                "painter",
                "writer",
                "dentist",
                "singer",
            ]
        ),
        "questions": ("what is the job of {name}?", "what does {name} work as?"),
        "answers": ("{value}", "a {value}", "{name} is a {value}"),
    },
    "pet": {
        "values": tuple(
            [
                "cat",
                "dog",
                "horse",
                "rabbit",
                "parrot",
                "goat",
                "hamster",
                "turtle",
                "snake",
                "pony",
            ]
        ),
        "questions": ("what pet does {name} have?", "which animal does {name} keep?"),
        "answers": ("{value}", "a {value}", "{name} has a {value}"),
    },
    "color": {
        "values": tuple(
            [
                "red",
                "blue",
                "green",
                "yellow",
                "black",
                "white",
                "purple",
                "orange",
                "brown",
                "pink",
                "gray",
                "silver",
            ]
        ),
        "questions": ("what is the favourite colour of {name}?", "which colour does {name} like?"),
        "answers": ("{value}", "the colour {value}", "{name} likes {value}"),
    },
}

TIERS = ("frequent", "medium", "rare", "unseen")
TIER_COUNTS = {"frequent": 16, "medium": 4, "rare": 1, "unseen": 0}
TIER_SHARES = (0.35, 0.2, 0.2, 0.25)
CORRECT_ROUGE = 0.5
TEMPLATE_WORDS = frozenset(
    w
    for spec in ATTRIBUTES.values()
    for form in spec["answers"]
    for w in form.replace("{value}", "").replace("{name}", "").split()
)


@dataclass(frozen=True)
class Fact:
    """One (person, attribute, value) fact with its popularity tier."""

    name: str
    attribute: str
    value: str
    tier: str

    def question(self, variant: int = 0) -> str:
        """The fact's question, paraphrase ``variant`` (0 or 1)."""
        templates = ATTRIBUTES[self.attribute]["questions"]
        return templates[variant % len(templates)].format(name=self.name)

    def answer(self, form: int = 0) -> str:
        """The fact's answer in form ``form`` (0: bare value, 1: short phrase, 2: sentence)."""
        templates = ATTRIBUTES[self.attribute]["answers"]
        return templates[form % len(templates)].format(name=self.name, value=self.value)


def build_facts(people: int = 56, seed: int = 0) -> list[Fact]:
    """``people`` x 4 facts with random values and tiers (shares ``TIER_SHARES``), seeded."""
    if not 1 <= people <= len(NAMES):
        raise ValueError(f"people must be in 1..{len(NAMES)}, got {people}")
    rng = random.Random(seed)
    facts = []
    for name in NAMES[:people]:
        for attribute, spec in ATTRIBUTES.items():
            tier = rng.choices(TIERS, weights=TIER_SHARES)[0]
            facts.append(Fact(name, attribute, rng.choice(spec["values"]), tier))
    return facts


TUNING_SHARE = 1 / 3  # of each tier's facts, kept for tuning; the rest are evaluated
SPLIT_SEED = 11


def split_facts(
    facts: list[Fact], share: float = TUNING_SHARE, seed: int = SPLIT_SEED
) -> tuple[list[Fact], list[Fact]]:
    """(tuning facts, evaluated facts): disjoint by fact, deterministic. Within each tier a
    seeded shuffle puts ``round(share * n)`` facts in tuning and the rest in evaluation, so
    both halves keep the tier mix (and so right and wrong answers); each half in corpus
    order. Every SDLG knob, threshold and calibration input is chosen on the tuning facts;
    only the evaluated ones are ever scored for the reported numbers."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"share must be in (0, 1), got {share}")
    if len(set(facts)) != len(facts):
        raise ValueError("facts must be distinct")
    rng = random.Random(seed)
    tuning: set[Fact] = set()
    for tier in TIERS:
        members = [f for f in facts if f.tier == tier]
        rng.shuffle(members)
        tuning.update(members[: round(share * len(members))])
    return [f for f in facts if f in tuning], [f for f in facts if f not in tuning]


def training_pairs(facts: list[Fact], seed: int = 0) -> list[tuple[str, str]]:
    """(question, answer) training pairs: each fact ``TIER_COUNTS[tier]`` times, each with a
    random question paraphrase and answer form; shuffled, seeded."""
    rng = random.Random(seed + 1)
    pairs = []
    for fact in facts:
        for _ in range(TIER_COUNTS[fact.tier]):
            pairs.append((fact.question(rng.randrange(2)), fact.answer(rng.randrange(3))))
    rng.shuffle(pairs)
    return pairs


def content_words(answer: str, question: str) -> list[str]:
    """Words of ``answer`` that are neither template words nor words of ``question``."""
    skip = TEMPLATE_WORDS | set(question.lower().replace("?", " ").split())
    return [w for w in answer.lower().replace("?", " ").split() if w not in skip]


def rouge1_f1(candidate: list[str], reference: list[str]) -> float:
    """ROUGE-1 F1 of two word lists (clipped unigram overlap); 0.0 when either is empty."""
    if not candidate or not reference:
        return 0.0
    overlap = sum((Counter(candidate) & Counter(reference)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(candidate), overlap / len(reference)
    return 2 * precision * recall / (precision + recall)


def is_correct(answer: str, fact: Fact, question: str) -> bool:
    """ROUGE-1 F1 of the answer's content words vs the fact's value >= ``CORRECT_ROUGE``."""
    return rouge1_f1(content_words(answer, question), fact.value.split()) >= CORRECT_ROUGE
