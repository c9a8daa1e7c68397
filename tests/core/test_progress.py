"""Step bars off a terminal (CI logs, redirected output): short bars log every step, long ones
about one line per twentieth of the work, first and last steps included."""

from __future__ import annotations

from edgekit.progress import LOG_EVERY_STEP, step_progress


def _logged(capsys, total: int) -> list[str]:
    with step_progress("work", total) as step:
        for i in range(total):
            step(f"item {i}")
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[work]")]


def test_a_short_bar_logs_every_step(capsys):
    lines = _logged(capsys, 7)
    assert lines == [f"[work] item {i}" for i in range(7)]
    assert len(_logged(capsys, LOG_EVERY_STEP)) == LOG_EVERY_STEP


def test_a_long_bar_logs_one_line_per_twentieth_with_the_first_and_last(capsys):
    lines = _logged(capsys, 1000)
    assert lines[0] == "[work] item 0" and lines[-1] == "[work] item 999"
    assert lines[1] == "[work] item 50" and len(lines) == 21
    assert len(_logged(capsys, 1010)) == 22  # items 0, 50, ..., 1000 and the last, 1009


def test_a_disabled_bar_is_silent(capsys):
    with step_progress("work", 3, enabled=False) as step:
        step("a")
    assert capsys.readouterr().err == ""
