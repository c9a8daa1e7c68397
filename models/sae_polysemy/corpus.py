"""The SAE training corpus, built in-repo: template sentences plus the shipped STS sentences.

Templates cover everyday topics (home, work, travel, food, nature, sport, money, health,
science, music) and use many polysemous nouns in each of their senses ("the bank approved
the loan", "a heron stood on the bank"), so the SAEs see both meanings of a word without
ever seeing the WiC evaluation contexts (those are removed if a template ever produces one).
Generation is seeded: the same ``CorpusConfig`` always gives the same sentence list.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass
from functools import lru_cache

VOCAB: dict[str, tuple[str, ...]] = {
    "name": (
        "Anna", "Ben", "Carlos", "Dana", "Elif", "Farah", "George", "Hana", "Ivan", "Julia",
        "Kofi", "Lena", "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tomas",
    ),
    "person": (
        "my neighbour", "the teacher", "her uncle", "our manager", "the old farmer",
        "a young doctor", "the new student", "his sister", "the taxi driver", "a tourist",
        "the librarian", "my grandmother", "the mechanic", "a local artist", "the nurse",
    ),
    "city": (
        "Lisbon", "Oslo", "Nairobi", "Osaka", "Toronto", "Lima", "Prague", "Cairo", "Seoul",
        "Dublin", "Madrid", "Hanoi", "Boston", "Krakow", "Perth",
    ),
    "day": ("on Monday", "on Friday", "last weekend", "yesterday", "this morning",
            "every evening", "after lunch", "before dawn", "in the afternoon", "last night"),
    "place": (
        "the kitchen", "the office", "the garden", "the station", "the library", "the market",
        "the hospital", "the beach", "the museum", "the school", "the harbour", "the park",
    ),
    "food": (
        "bread", "soup", "rice", "apples", "cheese", "pasta", "fish", "lentils", "pancakes",
        "salad", "oranges", "dumplings", "noodles", "yoghurt", "carrots",
    ),
    "animal": (
        "a fox", "a heron", "an owl", "a hedgehog", "a rabbit", "a deer", "a squirrel",
        "a beaver", "a goat", "a lizard", "a robin", "a badger",
    ),
    "thing": (
        "the umbrella", "the laptop", "the bicycle", "the kettle", "the map", "the camera",
        "the ladder", "the blanket", "the radio", "the suitcase", "the lamp", "the backpack",
    ),
    "adj": (
        "quiet", "busy", "cold", "bright", "crowded", "peaceful", "noisy", "warm", "tiny",
        "famous", "modern", "ancient", "strange", "beautiful", "narrow",
    ),
    "weather": (
        "heavy rain", "thick fog", "strong wind", "bright sunshine", "light snow",
        "a thunderstorm", "freezing cold", "a heat wave",
    ),
    "job": (
        "a nurse", "an engineer", "a chef", "a pilot", "a carpenter", "a journalist",
        "a baker", "a lawyer", "a gardener", "an electrician", "a translator", "a plumber",
    ),
    "sport": ("football", "tennis", "cricket", "basketball", "volleyball", "hockey",
              "rugby", "badminton", "golf", "baseball"),
    "instrument": ("the piano", "the guitar", "the violin", "the drums", "the flute",
                   "the cello", "the trumpet", "the organ"),
    "number": ("two", "three", "four", "five", "six", "ten", "twelve", "twenty", "fifty"),
    "colour": ("red", "blue", "green", "yellow", "black", "white", "grey", "orange"),
    "subject": ("history", "chemistry", "biology", "music", "geography", "physics",
                "literature", "mathematics", "economics", "art"),
}  # fmt: skip

TEMPLATES: tuple[str, ...] = (
    # everyday life
    "{name} left {thing} in {place} {day}.",
    "{person} found {thing} under the bed {day}.",
    "{name} and {person} walked to {place} {day}.",
    "{person} cooked {food} for the whole family {day}.",
    "We bought fresh {food} at the market {day}.",
    "{name} does not like {food} very much.",
    "{place} was {adj} {day}.",
    "{person} borrowed {thing} and never gave it back.",
    "The {adj} room smelled of {food} and coffee.",
    "{name} fixed {thing} with a bit of tape.",
    "{person} painted the fence {colour} {day}.",
    "Our flat has a {adj} view of {place}.",
    "{name} works as {job} in {city}.",
    "{person} trained for {number} years to become {job}.",
    "{name} moved to {city} to work as {job}.",
    "The {adj} streets of {city} were full of people.",
    "{name} took the night train from {city} to {city2}.",
    "The flight to {city} was delayed by {weather}.",
    "{weather} is expected in {city} {day}.",
    "{person} saw {animal} near {place} {day}.",
    "{animal} ran across the road in front of our car.",
    "{name} watched {animal} from the kitchen window.",
    "{person} plays {sport} every weekend.",
    "{name} scored {number} points in the {sport} final.",
    "The {sport} team trained in {weather}.",
    "{name} is learning to play {instrument}.",
    "{person} played {instrument} at the village concert.",
    "{name} studies {subject} at the university in {city}.",
    "The {subject} exam was harder than {name} expected.",
    "{person} wrote a book about the {subject} of {city}.",
    "{name} paid {number} dollars for {thing}.",
    "It took {number} hours to drive to {city}.",
    "{person} has lived in {city} for {number} years.",
    "The museum in {city} is {adj} and {adj2}.",
    "{name} forgot to charge the phone {day}.",
    "{person} answered every email before noon.",
    "The children built a snowman in {place}.",
    "{name} planted tomatoes and beans in the garden.",
    # polysemous words in their different senses
    "{name} opened a savings account at the bank {day}.",
    "The bank raised its interest rates again.",
    "{animal} was drinking at the bank of the river.",
    "Reeds grew thick along the bank of the canal.",
    "{person} hit the ball hard with a wooden bat.",
    "A bat flew out of the attic {day}.",
    "The dog gave a loud bark when {name} arrived.",
    "Moss covered the bark of the fallen tree.",
    "The cherry trees bloom in {city} every spring.",
    "{name} replaced the broken spring in the old chair.",
    "{person} lit a match to start the fire.",
    "The {sport} match was cancelled because of {weather}.",
    "The groundskeeper rolled the pitch before the game.",
    "The choir sang slightly below the right pitch.",
    "A crane stood still in the shallow water.",
    "A huge crane lifted the roof onto the new building.",
    "A grey seal rested on the rocks below {place}.",
    "The seal on the bottle of medicine was broken.",
    "{name} caught a bass in the reservoir {day}.",
    "The bass line of the song is very simple.",
    "{person} wore a silver ring on every finger.",
    "The boxer climbed back into the ring.",
    "{name} sat on a flat rock by the sea.",
    "The rock band played until midnight in {city}.",
    "{name} pointed at a bright star above the hills.",
    "The football star signed a new contract {day}.",
    "{person} watered every plant in the house.",
    "The chemical plant outside {city} closed {day}.",
    "{name} lost the key to the front door.",
    "The piano piece changes key in the middle.",
    "{person} sent a letter to the council about the noise.",
    "The last letter of the word is silent.",
    "The copper mine employed half of the town.",
    "The soldiers cleared every mine from the field.",
    "{name} set a trap for the mouse in the cellar.",
    "The mouse stopped working when the battery died.",
    "{person} hammered a nail into the door frame.",
    "{name} bit her nail while waiting for the results.",
    "The organ in the cathedral is very old.",
    "The liver is the largest organ inside the body.",
    "{person} signed the form with a blue pen.",
    "The sheep were counted as they entered the pen.",
    "{name} swam twenty lengths of the pool.",
    "{person} won a game of pool at the pub.",
    "The teacher gave each pupil a {colour} notebook.",
    "The pupil of her eye grew wider in the dark.",
    "{name} restrung the racket before the {sport} match.",
    "The workmen made a racket outside {day}.",
    "The child measured the leaf with a ruler.",
    "The young ruler promised to lower taxes.",
    "{person} weighed the {food} on the scale.",
    "The fuel tank was almost empty.",
    "A tank crossed the bridge during the parade.",
    "{name} wore a {colour} tie to the wedding.",
    "The election ended in a tie between the two candidates.",
    "Put {thing} in the trunk of the car.",
    "The trunk of the tree was covered in ivy.",
    "{name} got a new watch for her birthday.",
    "{person} kept watch while the others slept.",
    "The wave knocked {name} off the surfboard.",
    "{person} returned the wave with a smile.",
    "The virus enters the cell through its membrane.",
    "The thief spent the night in a police cell.",
    "{name} joined the hiking club in {city}.",
    "{person} cleaned the golf club after the round.",
    "We agreed on a date for the next meeting.",
    "{name} ate a date and a handful of nuts.",
    "{person} turned on the fan because of the heat.",
    "Every fan in the stadium stood up and cheered.",
    "{name} made plum jam with her grandmother.",
    "The bus was stuck in a jam near {place}.",
    "{person} wrapped the present in {colour} paper.",
    "The waiter forgot to bring the bill.",
    "The heron caught a fish with its long bill.",
    "The board met to approve the annual budget.",
    "{person} sawed the board in half.",
    "The coach told the players to stay calm.",
    "The coach to {city} leaves from platform {number}.",
    "The court will announce its decision {day}.",
    "The tennis court was wet after {weather}.",
    "The sailors scrubbed the deck of the ship.",
    "{name} shuffled the deck and dealt the cards.",
    "{person} ironed the shirt with a hot iron.",
    "The bridge was built from iron and stone.",
    "{name} left a note for {person} on the table.",
    "The singer held the last note for a long time.",
    "The party celebrated its victory in the election.",
    "{name} invited {number} friends to the party.",
    "The ship stayed in port because of {weather}.",
    "{person} plugged the cable into the wrong port.",
    "The letter came in the morning post.",
    "The goat was tied to a fence post.",
    "We sat in the back row of the theatre.",
    "{name} had a row with {person} about money.",
    "The judge handed down a long sentence.",
    "Read the first sentence of the paragraph aloud.",
    "{name} collected a shell on the beach.",
    "The old stamp on the envelope was very rare.",
    "{person} wore a grey suit to the interview.",
    "The family filed a suit against the builder.",
    "{name} left a tip for the waiter.",
    "The tip of the knife was bent.",
    "The prime minister named a new cabinet.",
    "The glasses are in the kitchen cabinet.",
    "{name} felt a pain in the chest after running.",
    "The old chest was full of letters and photos.",
    "A mole dug up the lawn {day}.",
    "{name} paid one pound for the newspaper.",
    "The lost dog was taken to the pound.",
    "The temple on the hill is {number} hundred years old.",
    "{person} pressed a finger to the temple.",
    "Turn up the volume so everyone can hear.",
    "The library has every volume of the encyclopedia.",
    "The bird had a broken wing.",
    "The new wing of the school opens {day}.",
    "The hunters tracked game through the forest.",
    "The game lasted until {name} finally won.",
    "A cold draft came through the open window.",
    "{name} finished the first draft of the report.",
    "A range of mountains rose above {city}.",
    "{name} slipped on a wet tile in {place}.",
    "Fresh mint grew beside the kitchen door.",
    "The mint issued a new coin {day}.",
    "The press waited outside the minister's house.",
    "{name} drank a cup of tea with mint and honey.",
)

STS_SOURCE = "minilm sts_pairs.tsv"
_SLOT = re.compile(r"\{(\w+?)(2?)\}")


@dataclass(frozen=True)
class CorpusConfig:
    """What determines the corpus: ``templated`` generated sentences plus the STS sentences."""

    templated: int = 2400
    include_sts: bool = True
    seed: int = 0

    def key(self) -> str:
        """Cache key: sha256 over this config and the templates/vocabulary (12 hex chars)."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode())
        digest.update(json.dumps([TEMPLATES, VOCAB], sort_keys=True).encode())
        return digest.hexdigest()[:12]


def _fill(template: str, rng: random.Random) -> str:
    chosen: dict[str, str] = {}

    def pick(match: re.Match[str]) -> str:
        slot, second = match.group(1), match.group(2)
        options = VOCAB[slot]
        if second:  # "{city2}": a different value from "{city}" in the same sentence
            options = tuple(o for o in options if o != chosen.get(slot)) or options
            return rng.choice(options)
        chosen[slot] = rng.choice(options)
        return chosen[slot]

    text = _SLOT.sub(pick, template)
    return text[0].upper() + text[1:]


@lru_cache(maxsize=8)
def build_corpus(config: CorpusConfig = CorpusConfig()) -> tuple[str, ...]:
    """Distinct sentences: ``config.templated`` from the templates, then the STS sentences.

    Templates are drawn round-robin in a seeded shuffled order so every template contributes;
    a sentence equal to a WiC evaluation context is dropped. Raises ValueError when the
    templates cannot produce ``templated`` distinct sentences.
    """
    from edgekit.models.sae_polysemy.wic import all_contexts

    if config.templated < 0:
        raise ValueError(f"templated must be >= 0, got {config.templated}")
    banned = set(all_contexts())
    rng = random.Random(config.seed)
    seen: dict[str, None] = {}
    attempts = 0
    order = list(TEMPLATES)
    while len(seen) < config.templated:
        if attempts > 50 * max(config.templated, 1):
            raise ValueError(f"the templates gave only {len(seen)} distinct sentences")
        if attempts % len(order) == 0:
            rng.shuffle(order)
        sentence = _fill(order[attempts % len(order)], rng)
        attempts += 1
        if sentence not in banned:
            seen.setdefault(sentence)
    if config.include_sts:
        from edgekit.models.minilm.data import unique_sentences

        for sentence in unique_sentences():
            if sentence not in banned:
                seen.setdefault(sentence)
    return tuple(seen)


def split_corpus(
    sentences: tuple[str, ...], heldout_every: int = 10
) -> tuple[list[str], list[str]]:
    """(train, held-out): every ``heldout_every``-th sentence is held out for MSE/L0."""
    if heldout_every < 2:
        raise ValueError(f"heldout_every must be >= 2, got {heldout_every}")
    train = [s for i, s in enumerate(sentences) if i % heldout_every != heldout_every - 1]
    held = [s for i, s in enumerate(sentences) if i % heldout_every == heldout_every - 1]
    return train, held
