"""Bench reports: the JSON file (atomic write, load, merge) and the rich terminal table.

Report schema ``edgekit.bench.engine/1``::

    {"schema": "edgekit.bench.engine/1", "created_utc": "2025-...Z",
     "environment": {...bench.environment.environment()...},
     "config": {"warmup", "iterations", "duration_s", "threads", "batch", "device", "timeout_s"},
     "results": [row, ...],
     "peer_environments": {source: environment}}        # only when rows were merged in

Each row: label, status ("ok" | "failed"), error, model, target ("onnx-int8", "torch-eager-fp32"),
graph, runtime, runtime_versions, device, threads, batch, inputs ({name: {shape, dtype}}),
size_mb, load_ms, first_run_ms, latency_ms {p50, p90, p99, max, mean, min, std},
throughput_items_s, iterations, warmup, measured_s, samples_ms, peak_rss_mb, rss_before_load_mb;
merged rows carry ``source``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import InputError

COLUMNS = (
    "Model",
    "Target",
    "Runtime",
    "Device",
    "Status",
    "Size (MB)",
    "Load (ms)",
    "First (ms)",
    "p50",
    "p90",
    "p99",
    "max",
    "items/s",
    "Peak RSS (MB)",
    "Threads",
)
TEXT_COLUMNS = ("Model", "Target", "Runtime", "Device", "Status")


# ---- JSON -----------------------------------------------------------------------------------
def write_report(report: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as JSON atomically (temp file in the same folder, then rename)."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
            fh.write("\n")
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a bench report; InputError unless it is JSON holding a "results" list."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read bench results {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise InputError(f"{path} is not an edgekit bench report (it has no 'results' list)")
    return data


def merge_results(report: dict[str, Any], other: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Append ``other``'s rows to ``report`` marked with ``source``; keep its environment."""
    report["results"].extend({**row, "source": source} for row in other.get("results", []))
    if other.get("environment"):
        report.setdefault("peer_environments", {})[source] = other["environment"]
    return report


# ---- table ----------------------------------------------------------------------------------
def _num(value: Any, digits: int | None = None) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    if digits is None:
        digits = 3 if abs(value) < 1 else 2 if abs(value) < 100 else 1
    return f"{value:,.{digits}f}"


def _cells(row: Mapping[str, Any], note: int | None) -> list[str]:
    lat = row.get("latency_ms") or {}
    ok = row.get("status") == "ok"
    status = "[green]ok[/]" if ok else f"[bold red]FAILED[/] [{note}]"
    threads = row.get("threads")
    return [
        str(row.get("model") or row.get("label") or "?"),
        str(row.get("target") or "-"),
        str(row.get("runtime") or "-"),
        str(row.get("device") or "-"),
        status,
        _num(row.get("size_mb"), 1),
        _num(row.get("load_ms"), 1),
        _num(row.get("first_run_ms")),
        *(_num(lat.get(k)) for k in ("p50", "p90", "p99", "max")),
        _num(
            row.get("throughput_items_s"), 0 if (row.get("throughput_items_s") or 0) >= 1000 else 1
        ),
        _num(row.get("peak_rss_mb"), 0),
        "default" if threads is None else str(threads),
    ]


def caption(report: Mapping[str, Any]) -> str:
    """One line: CPU, cores, batch, protocol and the runtime versions of the report."""
    env = report.get("environment") or {}
    cpu = env.get("cpu") or {}
    cores = cpu.get("cores") or {}
    cfg = report.get("config") or {}
    timed = (
        f"{cfg['duration_s']:g} s"
        if cfg.get("duration_s")
        else f"{cfg.get('iterations')} iterations"
    )
    versions = {}
    for row in report.get("results", []):
        versions.update(row.get("runtime_versions") or {})
    stack = ", ".join(f"{k} {str(v).split('-')[0]}" for k, v in sorted(versions.items()))
    return (
        f"{cpu.get('model', '?')} · {cores.get('physical', '?')} cores · batch {cfg.get('batch', 1)}"
        f" · warm-up {cfg.get('warmup', '?')} + {timed} · latency in ms"
        + (f" · {stack}" if stack else "")
    )


def render_table(report: Mapping[str, Any], title: str = "edgekit bench") -> Any:
    """A ``rich.table.Table`` with one row per result; failed rows show FAILED [n], and their
    error texts are the table's notes (see ``failure_notes``)."""
    from rich.table import Table

    table = Table(title=title, caption=caption(report), caption_justify="left")
    for name in COLUMNS:
        text = name in TEXT_COLUMNS
        wrap = name == "Model"
        table.add_column(
            name, justify="left" if text else "right", no_wrap=not wrap, overflow="fold"
        )
    note = 0
    for row in report.get("results", []):
        failed = row.get("status") != "ok"
        note += failed
        table.add_row(*_cells(row, note if failed else None), style="dim" if failed else None)
    return table


def failure_notes(report: Mapping[str, Any]) -> list[str]:
    """ "[n] label: error" for every failed row, in table order."""
    failed = [r for r in report.get("results", []) if r.get("status") != "ok"]
    return [
        f"[{i}] {r.get('label') or r.get('model')}: {r.get('error')}"
        for i, r in enumerate(failed, 1)
    ]


def _console() -> Any:
    from edgekit.console import wide_console

    return wide_console()


def print_report(
    report: Mapping[str, Any], console: Any = None, title: str = "edgekit bench"
) -> None:
    """Print the table, then each failed target's error text (red), to ``console`` (stdout)."""
    from rich.markup import escape

    console = console or _console()
    console.print(render_table(report, title))
    for line in failure_notes(report):
        console.print(f"[red]{escape(line)}[/]", highlight=False)


def print_overhead(result: Mapping[str, Any], console: Any = None) -> None:
    """One line for ``bench.overhead``: p50 of edgekit vs bare onnxruntime and their ratio."""
    console = console or _console()
    ours, bare = result["edgekit_ms"], result["bare_ms"]
    verdict = "[green]within[/]" if result["within_target"] else "[red]over[/]"
    console.print(
        f"{result.get('model')}/{result.get('graph')}: edgekit p50 {_num(ours['p50'])} ms · "
        f"bare onnxruntime p50 {_num(bare['p50'])} ms · ratio {result['ratio_p50']:.4f} "
        f"({result['overhead_pct']:+.2f} %, median diff {result['median_diff_us']:+.1f} µs)"
        f" · {verdict} the {result['target_pct']:g} % target",
        highlight=False,
    )


def rows_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Counts of ok and failed rows (for exit codes: any failure -> non-zero)."""
    failed = sum(1 for r in rows if r.get("status") != "ok")
    return {"ok": len(rows) - failed, "failed": failed}
