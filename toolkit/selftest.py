"""Boot-time self-test: re-run a bundle's golden inputs here and refuse to serve on a miss."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgekit.bundle import Bundle
from edgekit.card import Tolerance
from edgekit.errors import SelfTestError
from edgekit.parity import tensor_parity


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

    Tolerance: the graph's manifest tolerance (the card's tolerance for the bundle precision).
    Raises SelfTestError naming the graph and output on a miss, BundleError on a bad bundle.
    """
    bundle = Bundle.load(path)
    result = SelfTestResult(str(bundle.path), runtime or bundle.default_runtime())
    for name, entry in bundle.graphs.items():
        if not entry.golden:
            raise SelfTestError(f"graph '{name}' ships no golden I/O; it cannot be self-tested")
        inputs, expected, _ = bundle.golden(name)
        session = bundle.session(name, runtime=result.runtime, device=device, threads=threads)
        tol = Tolerance(
            float(entry.tolerance.get("atol", 1e-4)), float(entry.tolerance.get("rtol", 1e-3))
        )
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
