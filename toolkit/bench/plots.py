"""PNG plot of a bench report: latency distribution per target, and p50/p99 bars.

Drawn with matplotlib's Agg canvas directly (no pyplot, no display, no global backend switch),
so it works headless on a device and inside a daemon.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def row_label(row: Mapping[str, Any]) -> str:
    """Two-line label of a result row: model, then target · runtime (· device if not cpu)."""
    second = f"{row.get('target') or '?'} · {row.get('runtime') or '?'}"
    if row.get("device") not in (None, "cpu"):
        second += f" · {row['device']}"
    return f"{row.get('model') or row.get('label') or '?'}\n{second}"


def plot_title(report: Mapping[str, Any]) -> str:
    """ "<CPU model> · <threads> threads · batch <b>" from the report's environment and config."""
    cfg = report.get("config") or {}
    cpu = ((report.get("environment") or {}).get("cpu") or {}).get("model", "unknown CPU")
    threads = cfg.get("threads")
    threads_text = (
        f"{threads} thread{'s' if threads != 1 else ''}" if threads else "default threads"
    )
    return f"{cpu} · {threads_text} · batch {cfg.get('batch', 1)}"


def plot_report(report: Mapping[str, Any], path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Write a PNG: left, a box plot of every ok target's latency samples (ms, log scale when
    they span more than 20x); right, p50 and p99 bars. Failed targets are listed under the
    plot. Returns the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [r for r in report.get("results", []) if r.get("status") == "ok" and r.get("samples_ms")]
    failed = [r for r in report.get("results", []) if r.get("status") != "ok"]
    labels = [row_label(r) for r in rows]
    height = max(3.0, 0.75 * len(rows) + 1.6 + 0.25 * len(failed))
    fig = Figure(figsize=(13, height), layout="constrained")
    FigureCanvasAgg(fig)
    dist, bars = fig.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    fig.suptitle(plot_title(report), fontsize=11)
    if rows:
        positions = list(range(len(rows)))
        samples = [r["samples_ms"] for r in rows]
        style = dict(
            positions=positions,
            whis=(1, 99),
            flierprops={"markersize": 2, "alpha": 0.4},
            medianprops={"color": "black"},
            patch_artist=True,
            boxprops={"facecolor": "#9ecae1"},
        )
        try:
            dist.boxplot(samples, orientation="horizontal", **style)
        except TypeError:  # matplotlib < 3.10
            dist.boxplot(samples, vert=False, **style)
        low = min(min(s) for s in samples)
        high = max(max(s) for s in samples)
        if low > 0 and high / low > 20:
            dist.set_xscale("log")
            bars.set_xscale("log")
        dist.set_yticks(positions, labels, fontsize=8)
        dist.invert_yaxis()
        p50 = [r["latency_ms"]["p50"] for r in rows]
        p99 = [r["latency_ms"]["p99"] for r in rows]
        bars.barh([p - 0.2 for p in positions], p50, height=0.38, label="p50", color="#3182bd")
        bars.barh([p + 0.2 for p in positions], p99, height=0.38, label="p99", color="#e6550d")
        for p, a, b in zip(positions, p50, p99, strict=True):
            bars.text(a, p - 0.2, f" {a:.3g}", va="center", fontsize=7)
            bars.text(b, p + 0.2, f" {b:.3g}", va="center", fontsize=7)
        bars.set_xlim(right=max(p99) * (3 if bars.get_xscale() == "log" else 1.25))
        bars.legend(loc="best", fontsize=8)
    else:
        dist.text(0.5, 0.5, "no successful target", ha="center", va="center")
    dist.set_xlabel("latency per call (ms); whiskers p1-p99")
    dist.set_title("latency distribution", fontsize=10)
    bars.set_xlabel("ms")
    bars.set_title("p50 / p99", fontsize=10)
    for ax in (dist, bars):
        ax.grid(axis="x", alpha=0.3)
    if failed:
        text = "; ".join(f"{row_label(r).replace(chr(10), ' ')}: FAILED" for r in failed)
        fig.supxlabel(text, fontsize=8, color="#b30000")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=dpi)
    return dest
