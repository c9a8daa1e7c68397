"""Benchmark engine: latency percentiles, throughput, load and first-run time, peak RSS, size.

Each target (a bundle graph on a runtime, or a card's eager PyTorch module) runs in a fresh
``python -m edgekit.bench.engine --worker spec.json`` subprocess: peak RSS is that target's alone, and
a crash or hang becomes a failure row, not a dead run. Inputs are the golden inputs (real data)
sliced or tiled to the batch size. Report schema and JSON I/O: ``edgekit.bench.tables``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.bench.environment import peak_rss_mb, process_rss_mb
from edgekit.errors import InputError
from edgekit.tensorspec import TensorSpec

SCHEMA = "edgekit.bench.engine/1"
MAX_SAMPLES_KEPT = 5000  # samples stored per row for plots; statistics use every sample
OVERHEAD_TARGET_PCT = 3.0


@dataclass
class BenchConfig:
    """``warmup`` untimed calls after the first call, then ``iterations`` timed calls, or as
    many as fit in ``duration_s`` when set (it wins). ``threads``: intra-op threads (None = the
    runtime's default); ``timeout_s`` bounds each target's subprocess."""

    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None
    threads: int | None = None
    batch: int = 1
    device: str = "cpu"
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.duration_s is None and not self.iterations:
            raise InputError("bench needs iterations >= 1 or a duration in seconds")
        if (self.duration_s is not None and self.duration_s <= 0) or self.warmup < 0:
            raise InputError(f"bench duration must be > 0 and warmup >= 0 (got {self})")
        if self.batch < 1 or (self.threads is not None and self.threads < 1):
            raise InputError(f"bench batch and threads must be >= 1 (got {self})")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class BenchTarget:
    """One row: graph ``graph`` of ``bundle`` on ``runtime`` (None = default runtime / first
    graph), or the eager PyTorch module of registered card ``card``. ``device`` (e.g. "cuda")
    overrides the config's device for this row alone, so CPU and GPU rows share one table."""

    bundle: str | None = None
    runtime: str | None = None
    graph: str | None = None
    card: str | None = None
    label: str | None = None
    device: str | None = None

    def describe(self) -> str:
        on = f"@{self.device}" if self.device else ""
        if self.label or self.card:
            return self.label or f"{self.card} (torch eager{on})"
        where = Path(self.bundle or "?").name + (f"/{self.graph}" if self.graph else "")
        return f"{where} on {self.runtime or 'default runtime'}{on}"

    def device_in(self, config: BenchConfig) -> str:
        """The device this row runs on: its own, else the config's."""
        return self.device or config.device


# ---- timing ---------------------------------------------------------------------------------
def latency_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50/p90/p99/max/mean/min/std in milliseconds of per-call times in nanoseconds."""
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    stats = {"p50": p50, "p90": p90, "p99": p99, "max": ms.max(), "mean": ms.mean()}
    return {k: float(v) for k, v in {**stats, "min": ms.min(), "std": ms.std()}.items()}


def bench_session(session: Any, feeds: Mapping[str, Any], config: BenchConfig) -> dict[str, Any]:
    """Time ``session.run(feeds)``: the first call (reported apart), ``warmup`` untimed calls,
    then the timed calls. Returns first_run_ms, latency_ms, throughput_items_s (batch / mean
    latency), iterations, warmup, measured_s and samples_ms (at most MAX_SAMPLES_KEPT)."""
    clock = time.perf_counter_ns
    start = clock()
    session.run(feeds)
    first_ns = clock() - start
    for _ in range(config.warmup):
        session.run(feeds)
    samples: list[int] = []
    timed = config.duration_s is not None
    deadline = clock() + int((config.duration_s or 0) * 1e9)
    count = int(config.iterations or 1)
    while True:
        start = clock()
        session.run(feeds)
        end = clock()
        samples.append(end - start)
        if (end >= deadline) if timed else len(samples) >= count:
            break
    stats = latency_stats(samples)
    result = dict(first_run_ms=first_ns / 1e6, latency_ms=stats, iterations=len(samples))
    result.update(throughput_items_s=config.batch / (stats["mean"] / 1e3), warmup=config.warmup)
    kept = np.linspace(0, len(samples) - 1, min(len(samples), MAX_SAMPLES_KEPT)).astype(int)
    result.update(measured_s=sum(samples) / 1e9, samples_ms=[samples[i] / 1e6 for i in kept])
    return result


def is_batch_axis(dim: Any) -> bool:
    """True for a dynamic axis that names a batch ("batch", "batch_size", "N", "B")."""
    return isinstance(dim, str) and ("batch" in dim.lower() or dim in ("N", "B"))


def batch_feeds(
    golden: Mapping[str, np.ndarray], specs: Sequence[TensorSpec], batch: int
) -> dict[str, np.ndarray]:
    """Golden inputs sliced (batch <= golden batch) or tiled (cycled) to ``batch`` on axis 0.

    Only inputs whose axis 0 is a batch axis in ``specs`` change; others (state, scalars) are
    fed as recorded. InputError when ``batch`` > 1 and no input has a batch axis.
    """
    by_name = {s.name: s for s in specs}
    out = dict(golden)
    for name, array in golden.items():
        spec = by_name.get(name)
        if spec is not None and spec.shape and is_batch_axis(spec.shape[0]) and array.ndim:
            out[name] = np.ascontiguousarray(np.take(array, np.arange(batch) % len(array), 0))
    if batch > 1 and all(out[k] is golden[k] for k in golden):
        raise InputError(f"no input has a dynamic batch axis, cannot bench at batch {batch}")
    return out


def _shapes(feeds: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    return {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in feeds.items()}


# ---- one target, in this process ------------------------------------------------------------
def _measure_bundle(target: BenchTarget, config: BenchConfig) -> dict[str, Any]:
    from edgekit.bundle.format import Bundle
    from edgekit.runtimes import get_runtime

    rss, clock = process_rss_mb(), time.perf_counter_ns
    start = clock()
    bundle = Bundle.load(str(target.bundle))
    opened = clock()
    entry = bundle.graph(target.graph)
    runtime = target.runtime or bundle.default_runtime(entry.name)
    session = bundle.session(entry.name, runtime, target.device_in(config), config.threads)
    loaded = clock()
    feeds = batch_feeds(bundle.golden(entry.name)[0], entry.inputs, config.batch)
    timing = bench_session(session, feeds, config)
    size = sum(bundle.file(rel).stat().st_size for rel in entry.files) / 1e6
    row = dict(model=bundle.model, target=f"{entry.format}-{entry.precision}", graph=entry.name)
    row.update(runtime=runtime, runtime_versions=get_runtime(runtime).versions(), size_mb=size)
    row.update(load_ms=(loaded - start) / 1e6, inputs=_shapes(feeds), rss_before_load_mb=rss)
    row["load_breakdown_ms"] = {
        "bundle": (opened - start) / 1e6,
        "session": (loaded - opened) / 1e6,
    }
    return {**row, **timing}


def _measure_eager(target: BenchTarget, config: BenchConfig) -> dict[str, Any]:
    import torch

    from edgekit.registry import get_card
    from edgekit.runtimes import RuntimeOptions
    from edgekit.runtimes.torch import TorchRuntime

    rss, start = process_rss_mb(), time.perf_counter_ns()
    card = get_card(str(target.card))
    specs = {g.name: g for g in card.graphs()}
    if target.graph is not None and target.graph not in specs:
        raise InputError(f"card '{card.name}' has no graph '{target.graph}'; has {list(specs)}")
    spec = specs[target.graph] if target.graph else next(iter(specs.values()))
    inputs, outputs = spec.io_specs()  # one forward pass, counted as load
    options = RuntimeOptions(config.threads)
    device = target.device_in(config)
    session = TorchRuntime.from_module(spec.module, inputs, outputs, device, options)
    loaded = time.perf_counter_ns()
    feeds = batch_feeds(card.golden_inputs()[spec.name], inputs, config.batch)
    timing = bench_session(session, feeds, config)
    tensors = [*spec.module.parameters(), *spec.module.buffers()]
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.is_floating_point()})
    precision = "/".join(dtypes).replace("float32", "fp32").replace("float16", "fp16") or "fp32"
    size = sum(t.numel() * t.element_size() for t in tensors) / 1e6
    row = dict(model=card.name, target=f"torch-eager-{precision}", graph=spec.name, size_mb=size)
    row.update(runtime="torch", runtime_versions={"torch": torch.__version__})
    row.update(load_ms=(loaded - start) / 1e6, inputs=_shapes(feeds), rss_before_load_mb=rss)
    row["notes"] = "load = building the card's module + one forward pass for its I/O specs"
    return {**row, **timing}


def _base_row(target: BenchTarget, config: BenchConfig) -> dict[str, Any]:
    row: dict[str, Any] = {"label": target.describe(), "status": "ok", "error": None}
    row.update(bundle=target.bundle, card=target.card, model=target.card, target=None)
    row.update(graph=target.graph, runtime="torch" if target.card else target.runtime)
    row.update(device=target.device_in(config), threads=config.threads, batch=config.batch)
    try:
        manifest = json.loads((Path(target.bundle or "") / "bundle.json").read_text())
        fmt = manifest["target"]
        row.update(model=manifest["model"], target=f"{fmt['format']}-{fmt['precision']}")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return row


def failure_row(target: BenchTarget, config: BenchConfig, exc: BaseException | str) -> dict:
    """The row of a target that could not be measured, with the error text (Type: message)."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return {**_base_row(target, config), "status": "failed", "error": text}


def measure_in_process(target: BenchTarget, config: BenchConfig) -> dict[str, Any]:
    """Measure ``target`` in this process; any exception becomes a failure row."""
    try:
        measure = _measure_eager if target.card else _measure_bundle
        row = {**_base_row(target, config), **measure(target, config)}
    except Exception as exc:
        return failure_row(target, config, exc)
    return {**row, "peak_rss_mb": peak_rss_mb(), "pid": os.getpid()}


def measure_isolated(target: BenchTarget, config: BenchConfig) -> dict[str, Any]:
    """Measure ``target`` in a fresh ``python -m edgekit.bench.engine --worker`` subprocess."""
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        job = {"target": asdict(target), "config": config.to_json(), "result": str(result)}
        spec.write_text(json.dumps(job))
        cmd = [sys.executable, "-m", "edgekit.bench.engine", "--worker", str(spec)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            return failure_row(target, config, f"timed out after {config.timeout_s:g} s")
        if result.is_file():
            return {**json.loads(result.read_text()), "isolated": True}
        tail = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        return failure_row(target, config, f"worker exited with code {proc.returncode}: {tail}")


# ---- public entry points --------------------------------------------------------------------
def measure(target: BenchTarget, config: BenchConfig | None, isolate: bool = True) -> dict:
    """One result row for ``target``: in a fresh subprocess, or in this one if not ``isolate``."""
    return (measure_isolated if isolate else measure_in_process)(target, config or BenchConfig())


def bench_bundle(
    bundle_path: str | os.PathLike[str],
    runtime: str | None = None,
    config: BenchConfig | None = None,
    graph: str | None = None,
    isolate: bool = True,
) -> dict[str, Any]:
    """One row for ``graph`` (default: first) of the bundle at ``bundle_path`` on ``runtime``
    (default: the format's first usable runtime), measured in a fresh subprocess unless
    ``isolate`` is False. A target that fails gives a row with status "failed", never raises."""
    target = BenchTarget(bundle=str(bundle_path), runtime=runtime, graph=graph)
    return measure(target, config, isolate)


def bench_torch_eager(
    card_name: str,
    config: BenchConfig | None = None,
    graph: str | None = None,
    isolate: bool = True,
) -> dict[str, Any]:
    """One row for the eager PyTorch module of registered card ``card_name`` on its golden
    inputs: the row users compare exported artifacts against."""
    return measure(BenchTarget(card=card_name, graph=graph), config, isolate)


def expand_targets(items: Iterable[str], runtimes: Sequence[str] = ()) -> list[BenchTarget]:
    """Targets for CLI arguments. ``runtimes`` are ``RUNTIME[@DEVICE]`` specs
    ("onnxruntime@cuda"). A bundle directory gives one target per graph and runtime spec (given
    several, only those whose runtime loads the graph's format); a registered model name gives
    its eager PyTorch row, one per ``torch@DEVICE`` spec. InputError for anything else."""
    from edgekit.registry import names
    from edgekit.runtimes import DEFAULT_RUNTIME_FOR_FORMAT, parse_runtime_spec

    specs = [parse_runtime_spec(r) for r in runtimes]
    torch_devices = [d for r, d in specs if r == "torch" and d] or [None]
    targets: list[BenchTarget] = []
    for item in items:
        manifest = Path(item) / "bundle.json"
        if manifest.is_file():
            try:
                graphs = dict(json.loads(manifest.read_text())["graphs"])
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{manifest} is not a readable bundle manifest: {exc}") from exc
            for graph, entry in graphs.items():
                loads = DEFAULT_RUNTIME_FOR_FORMAT.get(str(entry.get("format")), [])
                chosen = [(r, d) for r, d in specs if len(specs) == 1 or r in loads]
                targets += [
                    BenchTarget(bundle=str(item), runtime=r, graph=graph, device=d)
                    for r, d in chosen or [(None, None)]
                ]
        elif item in names():
            targets += [BenchTarget(card=item, device=d) for d in torch_devices]
        else:
            known = ", ".join(names())
            raise InputError(f"'{item}' is neither a bundle directory nor a model ({known})")
    return targets


def bench_many(
    targets: Sequence[BenchTarget | Mapping[str, Any]],
    config: BenchConfig | None = None,
    progress: bool = True,
    extra_results: Sequence[str | os.PathLike[str]] = (),
    isolate: bool = True,
) -> dict[str, Any]:
    """Measure every target side by side, each in its own subprocess, under a progress bar;
    returns the report (environment, config, one row per target). Rows of ``extra_results``
    reports (e.g. the Optimum peer's JSON) are appended with ``source`` set to their file."""
    from edgekit.bench.environment import environment
    from edgekit.bench.tables import load_report, merge_results
    from edgekit.progress import step_progress

    config = config or BenchConfig()
    resolved = [t if isinstance(t, BenchTarget) else BenchTarget(**t) for t in targets]
    results = []
    with step_progress("bench", len(resolved), enabled=progress) as step:
        for target in resolved:
            step(target.describe())
            results.append(measure(target, config, isolate))
    report = {"schema": SCHEMA, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    report.update(environment=environment(), config=config.to_json(), results=results)
    for path in extra_results:
        merge_results(report, load_report(path), source=str(path))
    return report


def overhead(
    bundle_path: str | os.PathLike[str],
    graph: str | None = None,
    threads: int | None = None,
    iterations: int = 300,
    warmup: int = 30,
    batch: int = 1,
) -> dict[str, Any]:
    """edgekit's ``Session.run`` against a bare ``onnxruntime.InferenceSession.run`` of the same
    graph, built from the wrapped session's own SessionOptions and providers, timed call by call
    in alternating blocks in this process. Returns both latency stats (ms), the p50
    ratio, ``overhead_pct`` and the difference of medians in microseconds (``median_diff_us``)."""
    import onnxruntime as ort

    from edgekit.bundle.format import Bundle

    bundle = Bundle.load(bundle_path)
    entry = bundle.graph(graph)
    wrapped = bundle.session(entry.name, "onnxruntime", "cpu", threads)
    inner = next((v for v in vars(wrapped).values() if isinstance(v, ort.InferenceSession)), None)
    if inner is None:
        raise InputError("the onnxruntime session holds no InferenceSession to copy options from")
    options, providers = inner.get_session_options(), inner.get_providers()
    provider_options = [inner.get_provider_options().get(p, {}) for p in providers]
    bare = ort.InferenceSession(str(bundle.file(entry.file)), options, providers, provider_options)
    names = [o.name for o in bare.get_outputs()]
    feeds = batch_feeds(bundle.golden(entry.name)[0], entry.inputs, batch)
    calls = (lambda: wrapped.run(feeds), lambda: bare.run(names, feeds))
    for _ in range(warmup):
        calls[0](), calls[1]()
    # Alternate blocks, not single calls: two ORT sessions in one process each keep a spinning
    # thread pool, and call-by-call interleaving makes each pay for the other's spin. The first
    # call of each block (where that handover lands) is not counted.
    times: tuple[list[int], list[int]] = ([], [])
    rounds = max(2, min(10, iterations // 10))
    block = max(2, iterations // rounds)
    for r in range(rounds):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            for j in range(block + 1):
                start = time.perf_counter_ns()
                calls[k]()
                if j:
                    times[k].append(time.perf_counter_ns() - start)
    ours, theirs = latency_stats(times[0]), latency_stats(times[1])
    ratio = ours["p50"] / theirs["p50"]
    diff_us = (float(np.median(times[0])) - float(np.median(times[1]))) / 1e3
    result = dict(model=bundle.model, graph=entry.name, batch=batch, iterations=iterations)
    result.update(threads=options.intra_op_num_threads or None, providers=providers)
    result.update(edgekit_ms=ours, bare_ms=theirs, ratio_p50=ratio, median_diff_us=diff_us)
    result.update(overhead_pct=(ratio - 1) * 100, target_pct=OVERHEAD_TARGET_PCT)
    result["within_target"] = (ratio - 1) * 100 < OVERHEAD_TARGET_PCT
    return {**result, "runtime_versions": {"onnxruntime": ort.__version__}}


def main(argv: Sequence[str]) -> int:
    """``python -m edgekit.bench.engine --worker SPEC.json``: measure one target, write its row."""
    from edgekit.bench.tables import write_report

    if len(argv) != 2 or argv[0] != "--worker":
        print("usage: python -m edgekit.bench.engine --worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    row = measure_in_process(BenchTarget(**spec["target"]), BenchConfig.from_json(spec["config"]))
    write_report(row, spec["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
