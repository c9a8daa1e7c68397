"""The rich console edgekit prints to: real width on a terminal, wide enough in logs and pipes."""

from __future__ import annotations

from typing import Any

MIN_WIDTH = 200  # a console that is not a terminal (pipe, CI log) gets at least this width


def wide_console(stderr: bool = False) -> Any:
    """A rich Console; when not attached to a terminal, at least MIN_WIDTH columns wide."""
    from rich.console import Console

    console = Console(stderr=stderr)
    return (
        console
        if console.is_terminal
        else Console(stderr=stderr, width=max(console.width, MIN_WIDTH))
    )
