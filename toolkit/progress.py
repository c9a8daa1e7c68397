"""Progress bars for long work (rich), silent when not attached to a terminal or disabled."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

StepFn = Callable[[str], None]


@contextmanager
def step_progress(description: str, total: int, enabled: bool = True) -> Iterator[StepFn]:
    """A bar of ``total`` named steps; call the yielded function with each step's name.

    Shows on stderr when ``enabled``; the step names also go to stderr when stderr is not a
    terminal so logs still say what happened.
    """
    if not enabled:
        yield lambda _name: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[step]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(description, total=total, step="")
        started = False

        def step(name: str) -> None:
            nonlocal started
            if started:
                bar.advance(task)
            started = True
            bar.update(task, step=name)
            if not console.is_terminal:
                print(f"[{description}] {name}", file=sys.stderr)

        yield step
        bar.update(task, completed=total, step="done")
