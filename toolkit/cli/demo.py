"""``edgekit demo``: the main job on the embedded default, end to end.

Exports the demo models to every target this machine supports, verifies each bundle against
its torch reference, then benchmarks eager torch and every bundle side by side (one table per
model, JSON and PNG written under ``out``). Targets whose SDK or device is missing here are
listed with the reason, never silently dropped. Then the device loop (demo_daemon.py): a local
daemon on the simulated camera, the int8 bundles deployed to it over HTTP, Lens and the
classifier run live for a bounded time, text scored through it, a bench here vs through the
daemon, and a clean stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.runtimes import runtime_formats

DEMO_MODELS = ("minilm", "photo-cnn")
DEMO_PAIRS = [
    ["A man is playing a guitar.", "Someone is playing the guitar."],
    ["A man is playing a guitar.", "The stock market fell sharply today."],
]
DEMO_TARGETS = (
    "onnx-fp32",
    "onnx-int8",
    "openvino-fp32",
    "openvino-fp16",
    "openvino-int8",
    "tensorrt-fp16",
    "tensorrt-int8",
)


@dataclass
class ExportOutcome:
    model: str
    target: str
    status: str  # "verified" | "failed" | "unavailable"
    bundle: str | None = None
    detail: str = ""
    metric: str = ""


def target_available(target: str) -> str | None:
    """None when ``target`` can be exported and run here, else the reason it cannot."""
    from edgekit.errors import EdgekitError
    from edgekit.exporters import Target, format_module
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, get_runtime

    fmt = Target.parse(target).format
    try:
        format_module(fmt)
        runtime = get_runtime(DEFAULT_RUNTIME_FOR_FORMAT[fmt][0])
        if not runtime.devices():
            return f"runtime '{runtime.name}' has no device on this machine"
    except (EdgekitError, ImportError) as exc:
        return str(exc)
    return None


def export_all(
    models: tuple[str, ...], targets: tuple[str, ...], bundles: Path, threads: int | None
) -> list[ExportOutcome]:
    """Export and verify every (model, target); failures are recorded, not raised."""
    from edgekit.build.pipeline import build_bundle
    from edgekit.errors import EdgekitError, ParityError
    from edgekit.exporters import ExportOptions, Target
    from edgekit.registry import get_card

    outcomes = []
    reasons = {t: target_available(t) for t in targets}
    for model in models:
        card = get_card(model)
        for target in targets:
            if reasons[target]:
                outcomes.append(ExportOutcome(model, target, "unavailable", detail=reasons[target]))
                continue
            dest = bundles / f"{model}-{target}"
            try:
                bundle, report = build_bundle(
                    card, Target.parse(target), dest, ExportOptions(), threads=threads
                )
            except ParityError as exc:
                outcomes.append(ExportOutcome(model, target, "failed", detail=str(exc)))
                continue
            except EdgekitError as exc:
                outcomes.append(ExportOutcome(model, target, "failed", detail=str(exc)))
                continue
            metric = ""
            if report and card.primary_metric:
                ref = report.task["reference"].get(card.primary_metric, float("nan"))
                got = report.task["candidate"].get(card.primary_metric, float("nan"))
                metric = f"{card.primary_metric} {got:.4f} (torch {ref:.4f})"
            outcomes.append(
                ExportOutcome(model, target, "verified", str(bundle.path), metric=metric)
            )
    return outcomes


def outcome_table(outcomes: list[ExportOutcome]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="edgekit demo: export + verify")
    for col in ("model", "target", "status", "task metric (artifact vs torch)", "detail"):
        table.add_column(col, overflow="fold")
    colours = {"verified": "green", "failed": "red", "unavailable": "yellow"}
    for o in outcomes:
        detail = o.bundle or o.detail
        table.add_row(
            o.model, o.target, f"[{colours[o.status]}]{o.status}[/]", o.metric, escape(detail[:300])
        )
    return table


def run_demo(
    threads: int | None = 2,
    out: Path = Path("out/demo"),
    bundles: Path = Path("bundles"),
    models: tuple[str, ...] = DEMO_MODELS,
    targets: tuple[str, ...] = DEMO_TARGETS,
    iterations: int = 100,
    daemon_seconds: float = 20.0,
) -> int:
    """Run the demo; return the number of failed exports or benchmark rows (0 = all good)."""
    from edgekit.bench.engine import BenchConfig, BenchTarget, bench_many
    from edgekit.bench.plots import plot_report
    from edgekit.bench.tables import print_report, rows_summary, write_report
    from edgekit.console import wide_console

    console = wide_console()
    outcomes = export_all(models, targets, bundles, threads)
    console.print(outcome_table(outcomes))
    failures = sum(o.status == "failed" for o in outcomes)
    config = BenchConfig(warmup=10, iterations=iterations, threads=threads)
    written = []
    for model in models:
        rows: list[BenchTarget] = [BenchTarget(card=model)]
        for o in outcomes:
            if o.model != model or o.status != "verified" or not o.bundle:
                continue
            fmt = o.target.split("-")[0]
            runtimes = [
                r for r in ("onnxruntime", "openvino", "tensorrt") if fmt in runtime_formats(r)
            ]
            if fmt == "onnx" and any(q.startswith("Q") for q in contrib_ops_of(o.bundle)):
                # quantized contrib ops (QAttention, ...) run on ONNX Runtime only; OpenVINO's
                # ONNX reader does not convert them (OpenVINO gets its own NNCF int8 IR instead)
                runtimes = ["onnxruntime"]
            rows += [BenchTarget(bundle=o.bundle, runtime=r) for r in runtimes]
        report = bench_many(rows, config)
        print_report(report, console, title=f"edgekit bench: {model} (batch 1, {threads} threads)")
        failures += rows_summary(report["results"])["failed"]
        written += [
            write_report(report, out / f"{model}-bench.json"),
            plot_report(report, out / f"{model}-bench.png"),
        ]
    verified = {(o.model, o.target): o.bundle for o in outcomes if o.bundle}
    deploy = {m: verified[(m, "onnx-int8")] for m in models if (m, "onnx-int8") in verified}
    if daemon_seconds > 0 and deploy:
        from edgekit.cli.demo_daemon import run_daemon_loop

        pipelines = ["lens", "classify"] if "photo-cnn" in deploy else []
        pairs = {"minilm": DEMO_PAIRS} if "minilm" in deploy else {}
        benched = tuple(deploy.values())
        sam2 = sam2_demo_bundle(console)
        if sam2 is not None:  # tracked live on the daemon's camera, masks drawn on its frames
            deploy["sam2-edge"], pipelines = sam2, pipelines + ["sam2-stream"]
        summary = run_daemon_loop(
            deploy, ",".join(pipelines), out, console, daemon_seconds, benched, pairs, threads
        )
        failures += int(not summary["stopped_cleanly"]) + summary.get("bench_failed", 0)
        written += [Path(p) for p in summary.get("bench", [])]
        written += [out / "daemon-frames", out / "daemon-results.jsonl"]
    console.print("bundles: " + ", ".join(o.bundle for o in outcomes if o.bundle))
    console.print("reports: " + ", ".join(str(p) for p in written))
    return failures


def sam2_demo_bundle(console: Any) -> str | None:
    """The sam2-edge onnx-fp32 bundle (exported and verified into the edgekit cache once), or
    None with the reason printed when it cannot be built here."""
    from edgekit.errors import EdgekitError

    try:
        from edgekit.segmentation.run import sam2_bundle

        return str(sam2_bundle("sam2-edge").path)
    except (EdgekitError, ImportError) as exc:
        console.print(f"sam2-stream skipped: {exc}")
        return None


def contrib_ops_of(bundle_dir: str) -> list[str]:
    """The ONNX Runtime contrib ops every graph of a bundle records (exporters/onnx.py)."""
    from edgekit.bundle.format import Bundle

    graphs = Bundle.load(bundle_dir, verify_checksums=False).graphs.values()
    return sorted({op for g in graphs for op in g.details.get("ort_contrib_ops", [])})
