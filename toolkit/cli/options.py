"""Arguments shared by several CLI commands: card options given as repeated ``--option KEY=VALUE``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def parse_options(items: list[str] | None) -> dict[str, Any]:
    """Card options from repeated ``--option KEY=VALUE``: VALUE is read as JSON when it parses
    (true, 3, 0.5, "x") and kept as text otherwise (paths)."""
    from edgekit.errors import InputError

    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--option takes KEY=VALUE (e.g. checkpoint=ckpt.pt), got {item!r}")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    return options


OptionsArg = Annotated[
    list[str] | None,
    typer.Option("--option", help="card option KEY=VALUE (repeat), e.g. checkpoint=PATH"),
]
