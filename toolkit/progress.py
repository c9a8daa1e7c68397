"""Progress bars for long work (rich), silent when not attached to a terminal or disabled."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

StepFn = Callable[[str], None]
LOG_EVERY_STEP = 50  # off a terminal, a bar of up to this many steps logs every step's name


@contextmanager
def step_progress(description: str, total: int, enabled: bool = True) -> Iterator[StepFn]:
    """A bar of ``total`` named steps; call the yielded function with each step's name.

    Shows on stderr when ``enabled``; the step names also go to stderr when stderr is not a
    terminal so logs still say what happened: every step's name for up to LOG_EVERY_STEP steps,
    else about one line per twentieth of the work (the first and the last step included), so a
    1000-frame stream logs 21 lines, not 1000.
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
        done = 0  # steps started so far
        every = 1 if total <= LOG_EVERY_STEP else max(1, total // 20)

        def step(name: str) -> None:
            nonlocal done
            if done:
                bar.advance(task)
            done += 1
            bar.update(task, step=name)
            logged = done == 1 or done == total or (done - 1) % every == 0
            if not console.is_terminal and logged:
                print(f"[{description}] {name}", file=sys.stderr)

        yield step
        bar.update(task, completed=total, step="done")
