"""A synthetic story world: premises, latent plans and five-section stories made from templates.

A ``Premise`` fixes the hero, the hero's trade, the home town and the threat. A ``Plan`` adds the
choices the premise leaves open (traits, a companion, a landmark, a stolen treasure, a fear, the
tool that wins, the season, the outcome). A story is five sections, each a template filled from
premise + plan, so every name, place and object in a reference story is consistent with one
plan. Each section starts with its header ("exposition :", ...), so structure is checkable.

The lexicons (``LEXICON``) are also what the pairwise judge reads to find characters and places
in any story, generated or reference.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from edgekit.errors import InputError

NAMES = (
    "mara", "tomas", "ilse", "bram", "nina", "oskar", "lena", "felix",
    "rosa", "hugo", "greta", "jonas", "vera", "emil", "anya", "pavel",
)  # fmt: skip
ROLES = ("smith", "baker", "shepherd", "weaver", "fisher", "miller", "healer", "hunter")
PLACES = (
    "oakvale", "rivermouth", "stonebridge", "ashford",
    "millbrook", "greyhaven", "thornwick", "elmstead",
)  # fmt: skip
THREATS = ("dragon", "troll", "witch", "giant", "serpent", "wolf")
LANDMARKS = ("old tower", "dark forest", "frozen lake", "high cliffs", "deep cave", "ruined chapel")
TREASURES = ("golden bell", "silver lantern", "last seed", "old crown", "blue stone")
FEARS = ("fire", "darkness", "deep water", "heights", "thunder")
TOOLS = ("iron key", "magic harp", "sharp sword", "silver net", "secret song")
TRAITS = ("brave", "clever", "shy", "stubborn", "kind", "quick")
SEASONS = ("winter", "spring", "summer", "autumn")
OUTCOMES = (("trap", "trapped"), ("chase away", "chased away"), ("defeat", "defeated"))

#: entity category -> surface forms the judge looks for (multi-word forms included)
LEXICON: dict[str, tuple[str, ...]] = {
    "character": NAMES,
    "trade": ROLES,
    "town": PLACES,
    "landmark": LANDMARKS,
    "season": SEASONS,
    "threat": THREATS,
    "treasure": TREASURES,
    "tool": TOOLS,
    "fear": FEARS,
}

PLANNING = ("conflict", "character", "setting", "plot")
SECTIONS = ("exposition", "rising action", "climax", "falling action", "resolution")

PLAN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "conflict": (
        "the {threat} wants the {treasure} of {place} . {hero} is afraid of {fear} .",
        "{hero} fears {fear} , but the {threat} is after the {treasure} of {place} .",
    ),
    "character": (
        "{hero} is a {trait} {role} . {companion} is a {companion_role} and a loyal friend .",
        "{hero} , a {trait} {role} , travels with {companion} the {companion_role} .",
    ),
    "setting": (
        "{place} lies near the {landmark} . it is {season} .",
        "it is {season} in {place} , a town by the {landmark} .",
    ),
    "plot": (
        "{hero} and {companion} go to the {landmark} , find the {tool} and {outcome} the {threat} .",
        "at the {landmark} , {hero} and {companion} use the {tool} to {outcome} the {threat} .",
    ),
}

SECTION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "exposition": (
        "in {place} , near the {landmark} , lived {hero} , a {trait} {role} . "
        "the best friend of {hero} was {companion} the {companion_role} .",
        "{hero} was a {trait} {role} in {place} , a town by the {landmark} . "
        "{companion} the {companion_role} often helped {hero} .",
    ),
    "rising action": (
        "one {season} night the {threat} came and stole the {treasure} . "
        "{hero} and {companion} set out for the {landmark} .",
        "in {season} the {threat} took the {treasure} from {place} . "
        "{companion} and {hero} followed its tracks to the {landmark} .",
    ),
    "climax": (
        "at the {landmark} {hero} found the {tool} . though afraid of {fear} , "
        "{hero} faced the {threat} .",
        "{hero} faced the {threat} at the {landmark} , fought the fear of {fear} "
        "and raised the {tool} .",
    ),
    "falling action": (
        "the {threat} was {outcome_past} . {companion} carried the {treasure} back to {place} .",
        "with the {threat} {outcome_past} , {hero} and {companion} walked home with the {treasure} .",
    ),
    "resolution": (
        "{place} celebrated all {season} . {hero} was no longer afraid of {fear} .",
        "the {treasure} shone again in {place} , and {hero} and {companion} were honoured .",
    ),
}


@dataclass(frozen=True)
class Premise:
    """The writing prompt: who, what trade, which town, which threat."""

    hero: str
    role: str
    place: str
    threat: str

    def text(self) -> str:
        return f"{self.hero} , a {self.role} from {self.place} , must face the {self.threat} ."

    def entities(self) -> dict[str, str]:
        """Lexicon category -> the premise's entity of that category."""
        return {
            "character": self.hero,
            "trade": self.role,
            "town": self.place,
            "threat": self.threat,
        }


@dataclass(frozen=True)
class Plan:
    """The choices a premise leaves open; one plan makes one consistent story."""

    trait: str
    companion: str
    companion_role: str
    landmark: str
    treasure: str
    fear: str
    tool: str
    season: str
    outcome: int  # index into OUTCOMES
    variants: tuple[int, ...]  # template variant per planning entry then per section (9)


def sample_plan(premise: Premise, rng: random.Random) -> Plan:
    """A random plan for ``premise`` (the companion is never the hero)."""
    return Plan(
        trait=rng.choice(TRAITS),
        companion=rng.choice([n for n in NAMES if n != premise.hero]),
        companion_role=rng.choice([r for r in ROLES if r != premise.role]),
        landmark=rng.choice(LANDMARKS),
        treasure=rng.choice(TREASURES),
        fear=rng.choice(FEARS),
        tool=rng.choice(TOOLS),
        season=rng.choice(SEASONS),
        outcome=rng.randrange(len(OUTCOMES)),
        variants=tuple(rng.randrange(2) for _ in range(len(PLANNING) + len(SECTIONS))),
    )


def _slots(premise: Premise, plan: Plan) -> dict[str, str]:
    present, past = OUTCOMES[plan.outcome]
    fields = {k: v for k, v in asdict(plan).items() if isinstance(v, str)}
    return asdict(premise) | fields | {"outcome": present, "outcome_past": past}


def plan_entry(kind: str, premise: Premise, plan: Plan) -> str:
    """The planning agent ``kind``'s reference contribution (one of PLANNING)."""
    if kind not in PLAN_TEMPLATES:
        raise InputError(f"planning entry must be one of {PLANNING}, got {kind!r}")
    variant = plan.variants[PLANNING.index(kind)]
    return PLAN_TEMPLATES[kind][variant].format(**_slots(premise, plan))


def section_text(section: str, premise: Premise, plan: Plan) -> str:
    """The reference text of story ``section`` (one of SECTIONS), without its header."""
    if section not in SECTION_TEMPLATES:
        raise InputError(f"story section must be one of {SECTIONS}, got {section!r}")
    variant = plan.variants[len(PLANNING) + SECTIONS.index(section)]
    return SECTION_TEMPLATES[section][variant].format(**_slots(premise, plan))


def with_header(section: str, text: str) -> str:
    """``"climax : text"``: a section as it appears in a story."""
    return f"{section} : {text}"


def reference_story(premise: Premise, plan: Plan) -> str:
    """The five sections with their headers, in order: the human-written stand-in."""
    return " ".join(with_header(s, section_text(s, premise, plan)) for s in SECTIONS)


def all_premises() -> list[Premise]:
    """Every hero x trade x town x threat combination (6144), in a fixed order."""
    return [Premise(h, r, p, t) for h in NAMES for r in ROLES for p in PLACES for t in THREATS]


def split_premises(test: int, seed: int = 0) -> tuple[list[Premise], list[Premise]]:
    """(train, test) premises: ``test`` held-out combinations never seen in training."""
    premises = all_premises()
    if not 0 < test < len(premises):
        raise InputError(f"test premises must be in 1..{len(premises) - 1}, got {test}")
    random.Random(seed).shuffle(premises)
    return premises[test:], premises[:test]
