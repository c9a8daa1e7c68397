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
from pathlib import Path
from typing import Any

from edgekit.bundle import (
    Bundle,
    BundleWriter,
    GraphEntry,
    check_io_matches,
    default_device,
    runtime_options,
)
from edgekit.card import ModelCard
from edgekit.errors import ParityError
from edgekit.exporters import ExportOptions, Target, format_module
from edgekit.progress import step_progress
from edgekit.sources import weights_record
from edgekit.verify import VerifyReport, require_pass, verify_runners


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
    """
    from edgekit.devices.profiles import detect_profile
    from edgekit.envinfo import package_versions
    from edgekit.exporters.onnx import export_onnx
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, get_runtime
    from edgekit.verify import reference_runners

    options = options or ExportOptions()
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
