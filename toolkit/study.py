"""What every ``edgekit eval METHOD`` study does at the end: save its figure, print its table,
write ``report.json`` (atomically) beside the plot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def save_figure(fig: Any, path: str | Path, dpi: int = 110) -> Path:
    """Lay out, write (PNG, creating the folder) and close a matplotlib figure; returns ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def write_study(
    report: dict[str, Any],
    out: str | Path,
    print_table: Callable[[dict[str, Any]], None],
    plot: Callable[[dict[str, Any], Path], Path],
    plot_name: str,
) -> dict[str, Any]:
    """Print ``report``'s table, plot it to ``out/plot_name``, write ``out/report.json``."""
    from edgekit.cache import atomic_write_text

    print_table(report)
    out = Path(out)
    report["plot"] = str(plot(report, out / plot_name))
    atomic_write_text(out / "report.json", json.dumps(report, indent=2))
    return report
