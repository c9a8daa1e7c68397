"""The export pipeline: card -> torch graphs -> ONNX fp32 -> target artifact -> verified bundle.

``build_bundle`` is what ``edgekit export`` runs. It exports every graph of the card, converts
to the target, records golden I/O (real inputs from the card, the artifact's outputs and the
torch reference outputs), verifies the artifact on this machine (tensor parity, task metric
inside the budget, agreement floors) and only then moves the bundle into place. A bundle that
fails verification is not written; its report goes next to where it would have been.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgekit.build.verify import VerifyReport, require_pass, verify_runners
from edgekit.bundle.format import (
    Bundle,
    BundleWriter,
    GraphEntry,
    check_io_matches,
    default_device,
    runtime_options,
)
from edgekit.card import ModelCard
from edgekit.console import wide_console
from edgekit.errors import ParityError
from edgekit.exporters import ExportOptions, Target, format_module
from edgekit.progress import step_progress
from edgekit.sources import weights_record


def default_bundle_dir(
    card: ModelCard, target: Target, root: str | os.PathLike[str] = "bundles"
) -> Path:
    """bundles/<model>-<format>-<precision>."""
    return Path(root) / f"{card.name}-{target}"


def build_bundle(
    card: ModelCard,
    target: Target,
    out: str | os.PathLike[str] | None = None,
    options: ExportOptions | None = None,
    *,
    runtime: str | None = None,
    verify: bool = True,
    budget: float | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> tuple[Bundle, VerifyReport | None]:
    """Export ``card`` to ``target`` as a verified bundle at ``out``; return (bundle, report).

    Raises ParityError (with the report) when verification fails, MissingDependencyError when
    the target's SDK is absent, ExportError when a converter refuses the model.

    Static ONNX int8 on an x86 CPU without VNNI first uses the fast u8 x s8 kernels (7-bit
    weights); when that artifact fails verification and the int8 weight options were left to
    their defaults, it is rebuilt once with uint8 weights (u8 x u8 kernels: they never
    saturate, but run slower), and the manifest's ``export_options.int8_fallback`` says why.
    """
    options = options or ExportOptions()
    run = _BuildRun(runtime, verify, budget, threads, progress)
    try:
        return _build_bundle(card, target, out, options, run)
    except ParityError as exc:
        if not (verify and _may_fall_back(card, target, options)):
            raise
        reason = str(exc).split(" (report: ")[0]
        if progress:
            wide_console(stderr=True).print(
                f"int8 with u8 x s8 kernels failed verification ({reason}); "
                "rebuilding with uint8 weights (u8 x u8 kernels, no saturation)",
                markup=False,
            )
        extra = {**options.extra, "weight_type": "uint8", "int8_fallback": reason}
        bundle, report = _build_bundle(card, target, out, replace(options, extra=extra), run)
        failed = Path(bundle.path).with_name(Path(bundle.path).name + ".failed-report.json")
        failed.unlink(missing_ok=True)  # the first try's report; the manifest keeps its reason
        return bundle, report


def _may_fall_back(card: ModelCard, target: Target, options: ExportOptions) -> bool:
    """Whether a failed ONNX int8 build may be retried with uint8 weights (see build_bundle)."""
    from edgekit.exporters.onnx_int8 import reduce_range_default, resolve_int8_mode

    return (
        (target.format, target.precision) == ("onnx", "int8")
        and not {"weight_type", "reduce_range"} & set(options.extra)
        and resolve_int8_mode(card, options) == "static"
        and reduce_range_default()
    )


@dataclass(frozen=True)
class _BuildRun:
    """build_bundle's keyword arguments."""

    runtime: str | None
    verify: bool
    budget: float | None
    threads: int | None
    progress: bool


def _build_bundle(
    card: ModelCard,
    target: Target,
    out: str | os.PathLike[str] | None,
    options: ExportOptions,
    run: _BuildRun,
) -> tuple[Bundle, VerifyReport | None]:
    """build_bundle without the int8 fallback."""
    from edgekit.bench.environment import package_versions
    from edgekit.build.verify import reference_runners
    from edgekit.devices.profiles import detect_profile
    from edgekit.exporters.onnx import export_onnx
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, get_runtime

    runtime, verify, budget, threads, progress = (
        run.runtime,
        run.verify,
        run.budget,
        run.threads,
        run.progress,
    )
    dest = Path(out) if out else default_bundle_dir(card, target)
    exporter = format_module(target.format)  # fails fast on a missing SDK
    if target.precision not in exporter.PRECISIONS:
        from edgekit.errors import InputError

        raise InputError(
            f"{target.format} exports {', '.join(exporter.PRECISIONS)}, not {target.precision}"
        )
    started = time.perf_counter()
    steps = 5 + (1 if verify else 0)
    with (
        step_progress(f"export {card.name} -> {target}", steps, progress) as step,
        BundleWriter(dest) as writer,
    ):
        step("building torch graphs")
        graphs = card.graphs()
        work = Path(tempfile.mkdtemp(prefix="edgekit-export-"))
        try:
            artifacts = []
            for graph in graphs:
                step(f"exporting {graph.name} to ONNX")
                onnx_path = None
                if target.format != "torch":
                    onnx_path = export_onnx(
                        graph, work / f"{graph.name}.fp32.onnx", options.opset or card.opset
                    )
                step(f"converting {graph.name} to {target}")
                artifacts.append(
                    (
                        graph,
                        exporter.export_graph(
                            graph, onnx_path, work / target.format, target.precision, card, options
                        ),
                    )
                )
            step("recording golden I/O")
            runtime_name = runtime or DEFAULT_RUNTIME_FOR_FORMAT[target.format][0]
            rt = get_runtime(runtime_name)
            device = default_device(rt)
            golden_inputs = card.golden_inputs()
            reference = reference_runners(card)
            sessions = {}
            tol = card.tolerance(target.precision)
            for graph, art in artifacts:
                rels = [writer.add_file(f, f"graphs/{Path(f).name}") for f in art.files]
                inputs, outputs = graph.io_specs()
                entry = GraphEntry(
                    graph.name,
                    rels,
                    art.format,
                    art.precision,
                    inputs,
                    outputs,
                    tolerance=tol.to_json(),
                    details=art.details,
                )
                session = rt.load(
                    writer.path(rels[0]), device, runtime_options(entry, rt.name, threads)
                )
                check_io_matches(entry, *session.io())
                sessions[graph.name] = session
                feeds = golden_inputs[graph.name]
                entry.golden = writer.add_golden(
                    graph.name, feeds, session.run(feeds), reference[graph.name].run(feeds)
                )
                writer.add_graph(entry)
            for rel, src in card.assets().items():
                writer.add_file(src, f"assets/{rel}")
            report = None
            if verify:
                step("verifying against the torch reference")
                report = verify_runners(
                    card,
                    sessions,
                    target.precision,
                    reference=reference,
                    golden=golden_inputs,
                    budget=budget,
                    target=str(target),
                    runtime=f"{runtime_name}:{device}",
                )
                if not report.passed:
                    failed = dest.with_name(dest.name + ".failed-report.json")
                    failed.write_text(json.dumps(report.to_json(), indent=2, default=float))
                    try:
                        require_pass(report)
                    except ParityError as exc:
                        err = ParityError(
                            f"{exc} (report: {failed}; bundle not written)", exc.report
                        )
                        err.verify_report = report
                        raise err from None
            step("writing bundle")
            manifest: dict[str, Any] = {
                "model": card.name,
                "tier": card.tier,
                "task": card.task,
                "summary": card.summary,
                "target": {"format": target.format, "precision": target.precision},
                "export_options": {
                    "opset": options.opset or card.opset,
                    "int8_mode": options.int8_mode or card.int8_mode,
                    "calibration_method": options.calibration_method or card.calibration_method,
                    "per_channel": options.per_channel,
                    "fuse": options.fuses(card, target.precision)
                    if target.format == "onnx"
                    else None,
                    "float_nodes": list(options.int8_float_nodes(card)),
                    "int8_fallback": options.extra.get("int8_fallback"),
                },
                "source": {**card.source(), **weights_record(card)},
                "preprocessing": card.preprocessing(),
                "labels": card.labels(),
                "runtime": runtime_name,
                "device_profile": detect_profile().name,
                "versions": package_versions(),
                "report": report.to_json() if report else None,
                "export_seconds": round(time.perf_counter() - started, 2),
            }
            bundle = writer.commit(manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return bundle, report
