"""Verify an exported artifact against its torch reference: tensors, task metric, decisions.

Three kinds of check, every one a pass/fail with its measured value and limit:

- tensor parity on the golden inputs (atol/rtol of the card for the precision, plus quantiles);
- task-metric parity: the card's primary metric on the artifact may drop at most ``budget``
  (relative) from the torch reference — int8 is accepted only inside this budget;
- agreement: the card's agreement metrics (ranking Spearman, top-1 agreement, decision-flip
  rate at the operating threshold, ...) against its declared floors.

A miss raises ParityError carrying the full report; it is never only a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from edgekit.build.parity import tensor_parity
from edgekit.card import ModelCard, Runner
from edgekit.errors import ParityError

DEFAULT_BUDGETS = {"fp32": 0.001, "fp16": 0.005}


@dataclass
class Check:
    """One verdict: ``value`` compared with ``limit`` as a minimum or a maximum."""

    name: str
    value: float
    limit: float
    kind: str  # "min" (value >= limit) | "max" (value <= limit)
    passed: bool
    detail: str = ""


@dataclass
class VerifyReport:
    """Everything verify measured; ``passed`` only when every check passed."""

    model: str
    target: str
    runtime: str
    checks: list[Check] = field(default_factory=list)
    tensor: dict[str, Any] = field(default_factory=dict)
    task: dict[str, dict[str, float]] = field(default_factory=dict)
    agreement: dict[str, float] = field(default_factory=dict)
    budget: float | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data


def _limit_check(name: str, value: float, limit: float, kind: str, detail: str = "") -> Check:
    passed = value >= limit if kind == "min" else value <= limit
    return Check(name, float(value), float(limit), kind, bool(passed), detail)


def budget_for(card: ModelCard, precision: str, budget: float | None = None) -> float:
    """The relative metric drop accepted for ``precision`` (user budget overrides the card's)."""
    if budget is not None:
        if not 0 <= budget < 1:
            from edgekit.errors import InputError

            raise InputError(f"the accuracy budget is a relative drop in [0, 1), got {budget}")
        return budget
    if precision == "int8":
        return card.int8_budget
    return DEFAULT_BUDGETS.get(precision, card.int8_budget)


def reference_runners(card: ModelCard, device: str = "cpu") -> dict[str, Runner]:
    """Torch eager sessions of the card's graphs on ``device``: the reference every artifact
    is held to (on "cpu"), or the eager rows of a GPU bench (on "cuda")."""
    from edgekit.runtimes.torch import eager_runners

    return eager_runners(card.graphs(), device)


def verify_runners(
    card: ModelCard,
    candidate: Mapping[str, Runner],
    precision: str,
    *,
    reference: Mapping[str, Runner] | None = None,
    golden: Mapping[str, Mapping[str, Any]] | None = None,
    budget: float | None = None,
    target: str = "",
    runtime: str = "",
) -> VerifyReport:
    """Run every check of ``candidate`` against ``reference`` (default: the card's torch graphs).

    ``golden`` maps graph name -> feeds for tensor parity (default: ``card.golden_inputs()``).
    Returns the report; does not raise (see ``require_pass``).
    """
    torch_reference = reference is None
    reference = reference if reference is not None else reference_runners(card)
    golden = golden if golden is not None else card.golden_inputs()
    tol = card.tolerance(precision)
    report = VerifyReport(card.name, target, runtime, budget=budget_for(card, precision, budget))

    for graph, feeds in golden.items():
        ref_out = reference[graph].run(feeds)
        cand_out = candidate[graph].run(feeds)
        per_output = tensor_parity(ref_out, cand_out, tol)
        report.tensor[graph] = per_output
        for out_name, stats in per_output.items():
            if "reason" in stats:
                report.checks.append(
                    Check(
                        f"tensor {graph}/{out_name}",
                        float("nan"),
                        0.0,
                        "max",
                        False,
                        stats["reason"],
                    )
                )
                continue
            report.checks.append(
                Check(
                    f"tensor {graph}/{out_name} violations",
                    stats["violations"],
                    0,
                    "max",
                    stats["passed"],
                    f"max|d|={stats['max_abs']:.3g} p99|d|={stats['p99_abs']:.3g} "
                    f"atol={tol.atol:g} rtol={tol.rtol:g}",
                )
            )

    if torch_reference:  # the card's own torch graphs: measured once per card instance
        if getattr(card, "_torch_metrics", None) is None:
            card._torch_metrics = card.evaluate(reference)  # type: ignore[attr-defined]
        ref_metrics = card._torch_metrics  # type: ignore[attr-defined]
    else:
        ref_metrics = card.evaluate(reference)
    cand_metrics = card.evaluate(candidate)
    report.task = {"reference": ref_metrics, "candidate": cand_metrics}
    primary = card.primary_metric
    if primary and primary in ref_metrics and primary in cand_metrics:
        ref_v, cand_v = ref_metrics[primary], cand_metrics[primary]
        drop = (ref_v - cand_v) if card.higher_is_better else (cand_v - ref_v)
        rel_drop = drop / abs(ref_v) if ref_v else drop
        report.checks.append(
            _limit_check(
                f"task {primary} relative drop",
                rel_drop,
                report.budget or 0.0,
                "max",
                f"reference {ref_v:.4f} -> artifact {cand_v:.4f}",
            )
        )

    report.agreement = card.agreement(reference, candidate)
    for metric, floor in card.agreement_floors.items():
        if metric not in report.agreement:
            report.checks.append(
                Check(f"agreement {metric}", float("nan"), floor, "min", False, "not measured")
            )
            continue
        kind = "max" if metric.endswith(("_rate", "_error")) else "min"
        report.checks.append(
            _limit_check(f"agreement {metric}", report.agreement[metric], floor, kind)
        )
    return report


def require_pass(report: VerifyReport) -> VerifyReport:
    """Raise ParityError listing the failed checks unless ``report.passed``."""
    if not report.passed:
        lines = [
            f"{c.name}: {c.value:.4g} (limit {'>=' if c.kind == 'min' else '<='} {c.limit:.4g})"
            + (f" [{c.detail}]" if c.detail else "")
            for c in report.failures()
        ]
        raise ParityError(
            f"{report.model} {report.target} on {report.runtime} failed verification: "
            + "; ".join(lines),
            report.to_json(),
        )
    return report


def verify_bundle(
    path: str,
    *,
    runtime: str | None = None,
    device: str | None = None,
    threads: int | None = None,
    budget: float | None = None,
    card: ModelCard | None = None,
) -> VerifyReport:
    """Verify the bundle at ``path`` on this machine against the torch reference of its card.

    The card is rebuilt from the bundle's recorded source unless given. Golden inputs are the
    ones shipped in the bundle. Returns the report (call ``require_pass`` to raise on a miss).
    """
    from edgekit.bundle.format import Bundle
    from edgekit.sources import card_from_source, check_weights

    bundle = Bundle.load(path)
    source = bundle.manifest.get("source") or {}
    card = card or card_from_source(source)
    check_weights(card, source)
    runtime_name = runtime or bundle.default_runtime()
    sessions = bundle.sessions(runtime=runtime_name, device=device, threads=threads)
    golden = {name: bundle.golden(name)[0] for name, entry in bundle.graphs.items() if entry.golden}
    return verify_runners(
        card,
        sessions,
        bundle.precision,
        golden=golden,
        budget=budget,
        target=bundle.target,
        runtime=f"{runtime_name}:{device or 'default'}",
    )
