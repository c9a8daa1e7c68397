"""Terminal tables for verification reports."""

from __future__ import annotations

from typing import Any

from edgekit.build.verify import VerifyReport


def verify_table(report: VerifyReport) -> Any:
    """A rich Table: one row per check with value, limit and verdict; the title says pass/fail."""
    from rich.markup import escape
    from rich.table import Table

    verdict = "[green]PASS[/]" if report.passed else "[red]FAIL[/]"
    budget = f", budget {report.budget:g}" if report.budget is not None else ""
    table = Table(
        title=f"verify {report.model} {report.target} on {report.runtime}{budget}: {verdict}"
    )
    for col in ("check", "value", "limit", "", "detail"):
        table.add_column(col)
    for c in report.checks:
        table.add_row(
            c.name,
            f"{c.value:.5g}",
            f"{'>=' if c.kind == 'min' else '<='} {c.limit:.5g}",
            "[green]ok[/]" if c.passed else "[red]miss[/]",
            escape(c.detail),
        )
    ref, cand = report.task.get("reference", {}), report.task.get("candidate", {})
    for key in ref:
        table.add_row(
            f"metric {key}", f"{cand.get(key, float('nan')):.5g}", f"torch {ref[key]:.5g}", "", ""
        )
    return table
