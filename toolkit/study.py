"""Studies: the research behind ``edgekit eval METHOD``, kept apart from deployment cards.

A card declares what to deploy (graphs, I/O, tolerances, calibration, task metric). A model
whose paper has a study beyond ``card.evaluate`` (training comparisons, ablations, sweeps) puts
it in the module ``experiment`` beside its card, which exposes ``run`` (the ``Study``
protocol); ``study_for(card)`` finds it and ``edgekit eval MODEL`` runs it. Study modules sit
with the applications in the import order: they may use runtimes and bundles, cards may not
import them.

Every study ends the same way: save its figure, print its table, write ``report.json``
(atomically) beside the plot (``write_study``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.card import ModelCard

STUDY_MODULE = "experiment"


class Study(Protocol):
    """``run(card, out, show_progress)``: print the study's tables, write ``report.json`` and
    its plots (PNG) under ``out``, return the report."""

    def __call__(
        self, card: ModelCard, out: Path, show_progress: bool = True
    ) -> dict[str, Any]: ...


def study_for(card: ModelCard) -> Study | None:
    """The ``run`` of the ``experiment`` module beside ``card``'s own module, or None when the
    model has no study (its evaluation is ``card.evaluate``)."""
    package = type(card).__module__.rpartition(".")[0]
    name = f"{package}.{STUDY_MODULE}"
    if not package or importlib.util.find_spec(name) is None:
        return None
    return getattr(importlib.import_module(name), "run", None)


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
