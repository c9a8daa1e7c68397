"""The staged training recipe as data: stages, each with its data mixture, validated.

``Recipe.from_dict`` reads the yaml-like form::

    {"stages": [
        {"name": "pretrain", "steps": 300, "lr": 3e-3, "mixture": {"caption": 1.0}},
        {"name": "continual-pretrain", "steps": 200, "lr": 2e-3, "mixture": {"ocr": 1.0}},
        {"name": "sft", "steps": 600, "lr": 2e-3,
         "mixture": {"ocr": 0.25, "count": 0.2, "refer": 0.25, "ground": 0.3}}]}

``Recipe.without(category)`` is the ablation: the category leaves every stage, and a stage
whose mixture becomes empty is skipped. ``batch_categories`` draws the category of each example
in a batch from the stage's mixture weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.mm15.tasks import CATEGORIES


@dataclass(frozen=True)
class Stage:
    """One training stage: ``steps`` Adam steps at peak ``lr`` on the ``mixture`` weights
    (category -> non-negative weight; normalised when sampling)."""

    name: str
    steps: int
    lr: float
    mixture: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("a stage needs a non-empty name")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise InputError(
                f"stage {self.name!r}: steps must be an integer >= 1, got {self.steps!r}"
            )
        if not (isinstance(self.lr, float | int) and 0 < self.lr < 1):
            raise InputError(f"stage {self.name!r}: lr must be a number in (0, 1), got {self.lr!r}")
        seen = set()
        for category, weight in self.mixture:
            if category not in CATEGORIES:
                raise InputError(
                    f"stage {self.name!r}: unknown data category {category!r}; "
                    f"expected some of {CATEGORIES}"
                )
            if category in seen:
                raise InputError(f"stage {self.name!r}: category {category!r} is listed twice")
            seen.add(category)
            if not (isinstance(weight, float | int) and math.isfinite(weight) and weight >= 0):
                raise InputError(
                    f"stage {self.name!r}: weight of {category!r} must be a finite number >= 0, "
                    f"got {weight!r}"
                )
        if not self.mixture or sum(w for _, w in self.mixture) <= 0:
            raise InputError(f"stage {self.name!r}: the mixture needs a positive total weight")

    def weights(self) -> dict[str, float]:
        """Normalised mixture: category -> probability (sums to 1)."""
        total = sum(w for _, w in self.mixture)
        return {c: w / total for c, w in self.mixture}


@dataclass(frozen=True)
class Recipe:
    """Stages run in order, each continuing from the previous stage's weights."""

    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise InputError("a recipe needs at least one stage")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise InputError(f"stage names must be unique, got {names}")

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Recipe:
        """Build and validate a recipe from ``{"stages": [{name, steps, lr, mixture}, ...]}``."""
        if not isinstance(spec, dict) or not isinstance(spec.get("stages"), list):
            raise InputError("a recipe is a dict with a list under 'stages'")
        stages = []
        for i, s in enumerate(spec["stages"]):
            if not isinstance(s, dict):
                raise InputError(f"stage {i} must be a dict, got {type(s).__name__}")
            missing = {"name", "steps", "lr", "mixture"} - set(s)
            extra = set(s) - {"name", "steps", "lr", "mixture"}
            if missing or extra:
                raise InputError(
                    f"stage {i}: expected keys name, steps, lr, mixture; "
                    f"missing {sorted(missing)}, unknown {sorted(extra)}"
                )
            if not isinstance(s["mixture"], dict):
                raise InputError(f"stage {i}: mixture must be a dict category -> weight")
            stages.append(Stage(s["name"], s["steps"], s["lr"], tuple(s["mixture"].items())))
        return cls(tuple(stages))

    def to_dict(self) -> dict[str, Any]:
        """The ``from_dict`` form of this recipe."""
        return {
            "stages": [
                {"name": s.name, "steps": s.steps, "lr": s.lr, "mixture": dict(s.mixture)}
                for s in self.stages
            ]
        }

    def without(self, category: str) -> Recipe:
        """The ablation: ``category`` removed from every mixture; emptied stages are dropped."""
        if category not in CATEGORIES:
            raise InputError(f"unknown data category {category!r}; expected one of {CATEGORIES}")
        stages = []
        for s in self.stages:
            kept = tuple((c, w) for c, w in s.mixture if c != category and w > 0)
            if kept:
                stages.append(Stage(s.name, s.steps, s.lr, kept))
        if not stages:
            raise InputError(f"dropping {category!r} leaves no stage with data")
        return Recipe(tuple(stages))

    def categories(self) -> set[str]:
        """Every category with a positive weight in some stage."""
        return {c for s in self.stages for c, w in s.mixture if w > 0}


DEFAULT_RECIPE = Recipe.from_dict(
    {
        "stages": [
            {"name": "pretrain", "steps": 150, "lr": 3e-3, "mixture": {"caption": 1.0}},
            {
                "name": "continual-pretrain",
                "steps": 150,
                "lr": 3e-3,
                "mixture": {"ocr": 0.8, "caption": 0.2},
            },
            {
                "name": "sft",
                "steps": 900,
                "lr": 2e-3,
                "mixture": {
                    "caption": 0.05,
                    "ocr": 0.2,
                    "count": 0.2,
                    "refer": 0.25,
                    "ground": 0.3,
                },
            },
        ]
    }
)


def batch_categories(stage: Stage, batch: int, rng: np.random.Generator) -> list[str]:
    """The category of each of ``batch`` examples, drawn i.i.d. from the stage's weights."""
    weights = stage.weights()
    names = list(weights)
    counts = rng.multinomial(batch, [weights[c] for c in names])
    return [c for c, k in zip(names, counts, strict=True) for _ in range(int(k))]
