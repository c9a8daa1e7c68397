"""Labelled interleaved answers made in-repo: (query, reference, answer, defects, score).

Each category has a generator of queries with a correct interleaved reference answer (text
steps, most with a 16x16 image, and a text-only final conclusion):

- situational: name the objects a camera saw, left to right, with a picture of each, and say
  whether the place is safe (a cross is a hazard sign);
- project: a staged plan (build a fence, bake a cake, ...) with a progress sketch per stage;
- reasoning: a chain of arithmetic on 0-9 with each intermediate result drawn as a
  handwritten digit, then the final result.

An answer is the reference degraded in known ways (``rubrics.DEFECTS``: wrong image, wrong
fact, missing step, swapped steps, no images, off-topic text, wrong conclusion); its label is
``rubric_score`` of those defects. Items for held-out evaluation draw digits from the held-out
handwriting pool and come from another seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mmie.images import SHAPES, digit_image, progress_image, shape_image
from edgekit.models.mmie.rubrics import CATEGORIES, check_category, rubric_score


@dataclass(frozen=True)
class Step:
    """One segment of an interleaved answer: text and an optional (16, 16) float32 image.

    ``wrong_text`` / ``wrong_image`` are the degraded versions a defect substitutes (never
    shown to a judge)."""

    text: str
    image: np.ndarray | None = None
    wrong_text: str = ""
    wrong_image: np.ndarray | None = None


@dataclass(frozen=True)
class Item:
    """A labelled example: the judge sees category, query, reference and answer."""

    category: str
    query: str
    reference: tuple[Step, ...]
    answer: tuple[Step, ...]
    defects: tuple[str, ...]
    score: int


FILLER = (
    "I really enjoy long walks on sunny afternoons.",
    "The weather forecast promises rain for tomorrow.",
    "My favourite colour has always been green.",
    "Remember to drink enough water every day.",
    "This reminds me of a film I watched last year.",
    "Cats usually sleep for most of the day.",
)
PLACES = ("yard", "warehouse", "parking lot", "lobby", "garden", "loading dock")
ORDINALS = ("first", "second", "third", "fourth")
PROJECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "build a garden fence": (
        "fence",
        (
            "mark the fence line",
            "dig the post holes",
            "set the posts in concrete",
            "attach the rails",
            "nail on the boards",
            "paint the boards",
        ),
    ),
    "plant a vegetable bed": (
        "vegetable bed",
        (
            "clear the weeds",
            "loosen the soil",
            "mix in compost",
            "sow the seeds",
            "water the rows",
            "cover the soil with mulch",
        ),
    ),
    "bake a layered cake": (
        "cake",
        (
            "mix the dry ingredients",
            "whisk in the eggs",
            "bake the sponge layers",
            "cool the layers",
            "spread the cream",
            "decorate the top",
        ),
    ),
    "build a bookshelf": (
        "bookshelf",
        (
            "measure the wall",
            "cut the boards",
            "sand the edges",
            "screw the frame together",
            "fit the shelves",
            "varnish the wood",
        ),
    ),
    "set up an aquarium": (
        "aquarium",
        (
            "rinse the gravel",
            "place the tank",
            "add the gravel",
            "fill the tank with water",
            "start the filter",
            "add the fish",
        ),
    ),
    "paint a room": (
        "room",
        (
            "move the furniture",
            "tape the edges",
            "prime the walls",
            "paint the first coat",
            "paint the second coat",
            "remove the tape",
        ),
    ),
}


def _other(rng: np.random.Generator, options: list, avoid: object) -> object:
    return options[int(rng.choice([i for i, o in enumerate(options) if o != avoid]))]


def _situational(rng: np.random.Generator, held_out: bool) -> tuple[str, list[Step]]:
    place = PLACES[rng.integers(len(PLACES))]
    n = int(rng.integers(2, 5))
    shapes = [SHAPES[i] for i in rng.choice(len(SHAPES), n, replace=False)]
    query = (
        f"A camera in the {place} recorded {n} objects. Name each object from left to right, "
        f"show it, and say whether the {place} is safe (a cross marks a hazard)."
    )
    steps = []
    for k, shape in enumerate(shapes):
        wrong = str(_other(rng, list(SHAPES), shape))
        steps.append(
            Step(
                f"The {ORDINALS[k]} object is a {shape}.",
                shape_image(shape, rng),
                f"The {ORDINALS[k]} object is a {wrong}.",
                shape_image(str(_other(rng, list(SHAPES), shape)), rng),
            )
        )
    safe = f"The {place} is safe because no hazard sign is present."
    unsafe = f"The {place} is not safe because a cross marks a hazard."
    hazard = "cross" in shapes
    steps.append(Step(unsafe if hazard else safe, None, safe if hazard else unsafe))
    return query, steps


def _project(rng: np.random.Generator, held_out: bool) -> tuple[str, list[Step]]:
    names = list(PROJECTS)
    name = names[rng.integers(len(names))]
    thing, actions = PROJECTS[name]
    n = int(rng.integers(3, 6))
    chosen = [actions[i] for i in sorted(rng.choice(len(actions), n, replace=False))]
    query = f"Plan how to {name} in {n} stages, with a sketch of the progress after each stage."
    steps = []
    for k, action in enumerate(chosen, start=1):
        other_thing = str(_other(rng, names, name))
        wrong_action = PROJECTS[other_thing][1][rng.integers(6)]
        wrong_stage = int(_other(rng, list(range(1, n + 1)), k))
        steps.append(
            Step(
                f"Stage {k}: {action}.",
                progress_image(k, n, rng),
                f"Stage {k}: {wrong_action}.",
                progress_image(wrong_stage, n, rng),
            )
        )
    steps.append(
        Step(
            f"After stage {n} the {thing} is finished and ready to use.",
            None,
            f"After stage {n} the {thing} must be taken apart and started again.",
        )
    )
    return query, steps


_OPS = {
    "add": (lambda v, k: v + k, "add {k}", "{v} plus {k} makes {r}."),
    "subtract": (lambda v, k: v - k, "subtract {k}", "{v} minus {k} makes {r}."),
    "double": (lambda v, k: 2 * v, "double it", "Doubling {v} gives {r}."),
    "halve": (lambda v, k: v // 2, "halve it", "Half of {v} is {r}."),
}


def _reasoning(rng: np.random.Generator, held_out: bool) -> tuple[str, list[Step]]:
    value = int(rng.integers(1, 10))
    start = value
    said, steps = [], []
    for _ in range(3):
        options = [("add", k) for k in range(1, 10 - value)]
        options += [("subtract", k) for k in range(1, value + 1)]
        options += [("double", 0)] * 3 if 0 < value <= 4 else []
        options += [("halve", 0)] * 3 if value > 0 and value % 2 == 0 else []
        op, k = options[rng.integers(len(options))]
        fn, phrase, sentence = _OPS[op]
        result = fn(value, k)
        wrong = int(_other(rng, list(range(10)), result))
        said.append(phrase.format(k=k))
        steps.append(
            Step(
                sentence.format(v=value, k=k, r=result),
                digit_image(result, rng, held_out),
                sentence.format(v=value, k=k, r=wrong),
                digit_image(int(_other(rng, list(range(10)), result)), rng, held_out),
            )
        )
        value = result
    query = (
        f"Start with {start}, then {said[0]}, then {said[1]}, then {said[2]}. Draw each "
        "intermediate number and state the final result."
    )
    wrong = int(_other(rng, list(range(10)), value))
    steps.append(Step(f"So the final result is {value}.", None, f"So the final result is {wrong}."))
    return query, steps


GENERATORS = {"situational": _situational, "project": _project, "reasoning": _reasoning}
DEFECT_COUNTS = (0, 1, 2, 3)
DEFECT_COUNT_P = (0.2, 0.35, 0.3, 0.15)
_TARGETED = ("text_error", "image_swap", "off_topic")


def degrade(
    reference: list[Step], defects: tuple[str, ...], rng: np.random.Generator
) -> tuple[list[Step], tuple[str, ...]]:
    """The answer ``reference`` becomes under ``defects`` and the defects that took effect.

    Defects that cannot apply (too few middle steps, an image swap in a text-only answer) are
    dropped. Middle steps are all but the final conclusion; each targeted defect hits its own
    middle step."""
    answer = list(reference)
    middle = list(rng.permutation(len(reference) - 1))
    applied = []
    if "missing_images" in defects and "image_swap" in defects:
        defects = tuple(d for d in defects if d != "image_swap")
    for defect in _TARGETED:
        if defect in defects and middle:
            i = int(middle.pop())
            step = answer[i]
            if defect == "text_error":
                answer[i] = replace(step, text=step.wrong_text)
            elif defect == "image_swap":
                answer[i] = replace(step, image=step.wrong_image)
            else:
                answer[i] = replace(step, text=FILLER[rng.integers(len(FILLER))])
            applied.append(defect)
    if "wrong_final" in defects:
        answer[-1] = replace(answer[-1], text=answer[-1].wrong_text)
        applied.append("wrong_final")
    if "reordered" in defects and len(reference) >= 3:
        i = int(rng.integers(len(reference) - 2))
        answer[i], answer[i + 1] = answer[i + 1], answer[i]
        applied.append("reordered")
    if "missing_step" in defects and middle:
        i = int(middle.pop())
        kept = answer[i]
        answer = [s for s in answer if s is not kept]
        applied.append("missing_step")
    if "missing_images" in defects:
        answer = [replace(s, image=None) for s in answer]
        applied.append("missing_images")
    return answer, tuple(applied)


ALL_DEFECTS = (
    "image_swap",
    "text_error",
    "missing_step",
    "reordered",
    "missing_images",
    "off_topic",
    "wrong_final",
)


def make_item(category: str, rng: np.random.Generator, held_out: bool = False) -> Item:
    """One labelled item of ``category`` with 0-3 random defects."""
    query, reference = GENERATORS[check_category(category)](rng, held_out)
    count = int(rng.choice(DEFECT_COUNTS, p=DEFECT_COUNT_P))
    wanted = tuple(str(d) for d in rng.choice(ALL_DEFECTS, count, replace=False))
    answer, applied = degrade(reference, wanted, rng)
    return Item(
        category, query, tuple(reference), tuple(answer), applied, rubric_score(category, applied)
    )


def make_items(count: int, seed: int, held_out: bool = False) -> list[Item]:
    """``count`` items, the categories in turn (situational, project, reasoning, ...)."""
    if count < 1:
        raise InputError(f"item count must be >= 1, got {count}")
    rng = np.random.default_rng(seed)
    return [make_item(CATEGORIES[i % len(CATEGORIES)], rng, held_out) for i in range(count)]
