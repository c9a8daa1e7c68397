"""Two settings of one card, compared item by item: ``edgekit eval NAME --against KEY=VALUE``.

A = the card as given, B = the same card with the ``--against`` options on top. Both score the
same evaluation items (``ModelCard.item_scores``); per metric the table gives both means, the
paired difference B - A with its standard error and a 95 % bootstrap interval over the items,
and how many items changed. A difference is a finding only where its interval excludes 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.numeric import bootstrap_interval


@dataclass(frozen=True)
class PairedRow:
    """One metric of A and B on the same N items."""

    metric: str
    a: float
    b: float
    se: float  # standard error of the mean paired difference
    ci_low: float
    ci_high: float
    items: int
    changed: int  # items whose score differs between A and B

    @property
    def delta(self) -> float:
        return self.b - self.a


def paired_rows(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> list[PairedRow]:
    """A row per metric both settings scored: ``a``/``b`` map metric -> (N,) per-item scores
    of the same items. InputError when the item counts differ or no metric is shared."""
    shared = [m for m in a if m in b]
    if not shared:
        raise InputError(f"the two settings share no per-item metric ({sorted(a)} vs {sorted(b)})")
    rows = []
    for metric in shared:
        x, y = np.asarray(a[metric], np.float64), np.asarray(b[metric], np.float64)
        if x.shape != y.shape or x.ndim != 1 or not len(x):
            raise InputError(
                f"{metric}: A scored {x.shape} items and B {y.shape}; a paired comparison "
                "needs the same items"
            )
        d = y - x
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        low, high = bootstrap_interval(lambda i, d=d: float(d[i].mean()), len(d))
        changed = int(np.count_nonzero(~np.isclose(x, y)))
        rows.append(
            PairedRow(metric, float(x.mean()), float(y.mean()), se, low, high, len(d), changed)
        )
    return rows


def format_rows(rows: list[PairedRow], title: str) -> str:
    """The rows as a text table under ``title``."""
    lines = [
        title,
        f"{'metric':<28} {'A':>8} {'B':>8} {'B - A':>9} {'SE':>7} {'95% CI':>19} {'changed':>9}",
    ]
    for r in rows:
        ci = f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
        lines.append(
            f"{r.metric:<28} {r.a:8.4f} {r.b:8.4f} {r.delta:+9.4f} {r.se:7.4f} {ci:>19} "
            f"{r.changed:>4}/{r.items}"
        )
    return "\n".join(lines)
