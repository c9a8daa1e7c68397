"""Boot-time self-test: re-run a bundle's golden inputs here and refuse to serve on a miss."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.build.parity import tensor_parity
from edgekit.bundle.format import Bundle, GraphEntry
from edgekit.bundle.policy import check_tolerance
from edgekit.card import Tolerance
from edgekit.errors import BundleError, SelfTestError

DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)  # for a graph whose manifest states none


@dataclass
class SelfTestResult:
    """Per-graph parity of this machine's outputs with the outputs recorded at export."""

    bundle: str
    runtime: str
    graphs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(s.get("passed") for g in self.graphs.values() for s in g.values())


def selftest(
    path: str, runtime: str | None = None, device: str | None = None, threads: int | None = None
) -> SelfTestResult:
    """Run every graph's golden inputs and compare with its recorded outputs.

    Tolerance: the graph's manifest tolerance (the card's tolerance for the bundle precision),
    within bundle.policy.TOLERANCE_BOUNDS. Raises SelfTestError naming the graph and output
    on a miss or on golden I/O that compares nothing, BundleError on a bad bundle.
    """
    bundle = Bundle.load(path)
    result = SelfTestResult(str(bundle.path), runtime or bundle.default_runtime())
    for name, entry in bundle.graphs.items():
        if not entry.golden:
            raise SelfTestError(f"graph '{name}' ships no golden I/O; it cannot be self-tested")
        inputs, expected, _ = bundle.golden(name)
        check_golden(entry, inputs, expected)
        tol = graph_tolerance(entry)
        session = bundle.session(name, runtime=result.runtime, device=device, threads=threads)
        result.graphs[name] = tensor_parity(expected, session.run(inputs), tol)
    if not result.passed:
        misses = [
            f"{g}/{o}: "
            + (s.get("reason") or f"max|d|={s['max_abs']:.3g}, {s['violations']} elements out")
            for g, outs in result.graphs.items()
            for o, s in outs.items()
            if not s.get("passed")
        ]
        raise SelfTestError(
            f"self-test of {bundle.path} failed on {result.runtime}:{device}: " + "; ".join(misses)
        )
    return result


def graph_tolerance(entry: GraphEntry) -> Tolerance:
    """The graph's stated tolerance (BundleError when outside TOLERANCE_BOUNDS or mistyped)."""
    stated = check_tolerance(entry.tolerance, f"graph '{entry.name}'")
    return Tolerance(
        stated.get("atol", DEFAULT_TOLERANCE.atol), stated.get("rtol", DEFAULT_TOLERANCE.rtol)
    )


def check_golden(
    entry: GraphEntry, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]
) -> None:
    """SelfTestError unless the golden set feeds every declared input and records a finite,
    non-empty value for every declared output: a self-test must compare something."""
    where = f"graph '{entry.name}' golden I/O"
    declared_in = sorted(s.name for s in entry.inputs)
    declared_out = sorted(s.name for s in entry.outputs)
    if not inputs or not expected:
        raise SelfTestError(
            f"{where} has {len(inputs)} inputs and {len(expected)} outputs; a self-test needs "
            f"inputs {declared_in} and outputs {declared_out}"
        )
    if sorted(inputs) != declared_in:
        raise SelfTestError(f"{where} feeds {sorted(inputs)}; the graph's inputs are {declared_in}")
    missing = sorted(set(declared_out) - set(expected))
    if missing:
        raise SelfTestError(f"{where} records no value for output(s) {missing}")
    compared = 0
    for out, value in expected.items():
        if value.dtype.kind not in "biuf":
            raise BundleError(f"{where} output '{out}' has dtype {value.dtype}; expected numbers")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise SelfTestError(f"{where} output '{out}' holds NaN or inf; it compares nothing")
        compared += value.size
    if compared == 0:
        raise SelfTestError(f"{where} outputs are all empty; the self-test would compare nothing")
