"""MMIE's three categories, their scoring rubrics and the rubric-derived score of a known defect set.

A judge scores an interleaved answer against the query and a reference answer on an integer
scale 0..6 (MMIE-Score writes "### Score: N"); the labelled data made in-repo uses 1..6. Each
rubric says, per defect, how many points it costs in that category: ordering matters for a
project plan but not for listing what a scene contains, a wrong final number ruins a
calculation but only dents a plan. ``rubric_score`` turns a set of defects into the label.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgekit.errors import InputError

SCORE_MIN = 0  # lowest score a judge may write (MMIE's scale)
SCORE_MAX = 6  # highest score, a flawless answer
LABEL_MIN = 1  # the lowest label the in-repo rubric gives (an answer was at least attempted)

CATEGORIES = ("situational", "project", "reasoning")
CATEGORY_TITLES = {
    "situational": "situational analysis",
    "project": "project-based learning",
    "reasoning": "multi-step reasoning",
}

# What each defect is, in the words a rubric uses.
DEFECTS: dict[str, str] = {
    "image_swap": "an image does not show what its text says (wrong image)",
    "text_error": "a step states a wrong fact (wrong number, object or action)",
    "missing_step": "a step of the reference solution is missing",
    "reordered": "two steps are in the wrong order",
    "missing_images": "the answer is text only: no images are interleaved",
    "off_topic": "a step is replaced by irrelevant text",
    "wrong_final": "the final conclusion is wrong",
}


@dataclass(frozen=True)
class Rubric:
    """One category's rubric: its levels in words and the points each defect costs."""

    category: str
    levels: dict[int, str]
    penalties: dict[str, int]

    def text(self) -> str:
        """The rubric as a judge prompt would show it, level 6 first."""
        lines = [f"Rubric for {CATEGORY_TITLES[self.category]} (score {SCORE_MIN}-{SCORE_MAX}):"]
        lines += [f"{s}: {self.levels[s]}" for s in sorted(self.levels, reverse=True)]
        lines += [f"- {DEFECTS[d]}: -{p}" for d, p in self.penalties.items()]
        return "\n".join(lines)


_LEVELS = {
    6: "correct and complete; every image matches its text and the reference",
    5: "one minor flaw",
    4: "a clear flaw, the solution still mostly holds",
    3: "several flaws or one serious error",
    2: "major errors; only parts are usable",
    1: "mostly wrong or incomplete, but an attempt at the task",
    0: "no answer or entirely unrelated",
}

RUBRICS: dict[str, Rubric] = {
    # describe what is in the scene and judge the situation: grounding images matters, order not
    "situational": Rubric(
        "situational",
        _LEVELS,
        {
            "image_swap": 2,
            "text_error": 2,
            "missing_step": 1,
            "reordered": 0,
            "missing_images": 2,
            "off_topic": 1,
            "wrong_final": 2,
        },
    ),
    # a staged plan with progress sketches: order and completeness matter most
    "project": Rubric(
        "project",
        _LEVELS,
        {
            "image_swap": 1,
            "text_error": 1,
            "missing_step": 2,
            "reordered": 2,
            "missing_images": 2,
            "off_topic": 1,
            "wrong_final": 1,
        },
    ),
    # a calculation chain with pictured intermediate results: the numbers matter most
    "reasoning": Rubric(
        "reasoning",
        _LEVELS,
        {
            "image_swap": 1,
            "text_error": 2,
            "missing_step": 2,
            "reordered": 1,
            "missing_images": 2,
            "off_topic": 1,
            "wrong_final": 3,
        },
    ),
}


def check_category(category: str) -> str:
    """``category`` itself, or InputError naming the known categories."""
    if category not in RUBRICS:
        raise InputError(f"unknown MMIE category {category!r}; expected one of {CATEGORIES}")
    return category


def rubric_score(category: str, defects: Iterable[str]) -> int:
    """The label of an answer with ``defects`` (names in DEFECTS, repeats count again):
    SCORE_MAX minus the category's penalties, clipped to [LABEL_MIN, SCORE_MAX]."""
    rubric = RUBRICS[check_category(category)]
    total = 0
    for defect in defects:
        if defect not in DEFECTS:
            raise InputError(f"unknown defect {defect!r}; expected one of {sorted(DEFECTS)}")
        total += rubric.penalties[defect]
    return max(LABEL_MIN, min(SCORE_MAX, SCORE_MAX - total))
