"""``edgekit eval lens``'s options, typed: given as ``--option KEY=VALUE`` like every model's.

``seeds`` (int >= 1, simulator seeds: run-to-run noise), ``env`` (lighting environments, a
name or a list; default all), ``test_per_class`` / ``calib_per_class`` (held-out and
calibration scenes per class and seed, >= 1), ``classifier`` (``NAME[:RECIPE]`` or a list:
the classifiers whose fp32 and int8 bundles are benched), ``variant`` (the VisiT variant of
the headline rows, ``lens.visit.VARIANTS``), ``first_seed`` (int >= 0, default 0: the
seeds are first_seed .. first_seed + seeds - 1; the tables in docs/lens.md were developed on
seeds 0-4, so a fresh check of them starts at 1000).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from edgekit.errors import InputError


@dataclass(frozen=True)
class LensEvalOptions:
    """What ``edgekit eval lens`` runs (module docstring); ``from_options`` checks each value."""

    seeds: int = 3
    env: tuple[str, ...] = ()
    test_per_class: int = 4
    calib_per_class: int = 2
    classifier: tuple[str, ...] = ()
    variant: str = "top1"
    first_seed: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> LensEvalOptions:
        """From ``--option`` KEY=VALUE pairs (values parsed as JSON where they parse); an
        unknown key or a wrong type is an InputError naming it and what is expected."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(
                f"unknown option(s) {', '.join(unknown)} for `edgekit eval lens`; it takes "
                f"{', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        for key, value in options.items():
            if key in ("seeds", "test_per_class", "calib_per_class"):
                values[key] = _positive_int(key, value)
            elif key == "first_seed":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InputError(f"option first_seed is {value!r}; expected an integer >= 0")
                values[key] = value
            elif key in ("env", "classifier"):
                values[key] = _names(key, value)
            else:
                from edgekit.lens.visit import check_variant

                if not isinstance(value, str):
                    raise InputError(f"option variant is {value!r}; expected a VisiT variant name")
                check_variant(value)
                values[key] = value
        return cls(**values)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        what = "scene per class and seed" if key != "seeds" else "seed"
        raise InputError(f"option {key} is {value!r}; it needs an integer of at least 1 {what}")
    return value


def _names(key: str, value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) for v in items):
        raise InputError(
            f"option {key} is {value!r}; expected a name or a JSON list of names, e.g. "
            f'{key}=["a","b"]'
        )
    return tuple(items)
