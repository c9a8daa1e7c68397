"""The Hugging Face Optimum peer for MiniLM, timed with edgekit's protocol.

Subcommands (scripts/bench_optimum_peer.sh runs them in the right environments):

``export`` (in the Optimum venv): Optimum's ONNX export (task feature-extraction, the function
behind ``optimum-cli export onnx``) of the local all-MiniLM-L6-v2 weights, then Optimum's
avx512_vnni dynamic int8 preset (ORTQuantizer + AutoQuantizationConfig.avx512_vnni(
is_static=False, per_channel=False)). Writes OUT/optimum-fp32/, OUT/optimum-int8/, OUT/export.json.

``bench`` (in edgekit's venv): times both Optimum graphs, and any edgekit bundles given, with
onnxruntime on one real sentence padded to ``--seq-len`` tokens at batch 1, each target in a
fresh subprocess (``time-one``), using edgekit's bench_session (first call, warm-up, timed
iterations). Writes OUT/optimum-peer.json (Optimum rows only: merge them into any
``edgekit bench`` report with bench_many(extra_results=[...])), OUT/combined.json, a PNG, and
prints the table. Optimum's graphs output token embeddings: mean pooling is not in the graph.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

SENTENCE = (
    "The camera on the rover adjusts its exposure every frame so the segmentation model "
    "sees the rocks clearly, even when the sun is low over the horizon."
)
PEER_LABEL = "all-MiniLM-L6-v2 via Optimum (token embeddings, no mean pooling)"
PEER_MODEL = "minilm · Optimum (token emb.)"


def _versions(*dists: str) -> dict[str, str]:
    found = {}
    for dist in dists:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    return found


# ---- export (Optimum venv) ------------------------------------------------------------------
def export(model_dir: Path, out: Path) -> None:
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    fp32, int8 = out / "optimum-fp32", out / "optimum-int8"
    start = time.perf_counter()
    main_export(str(model_dir), output=fp32, task="feature-extraction", device="cpu")
    exported = time.perf_counter()
    qconfig = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    quantizer = ORTQuantizer.from_pretrained(fp32, file_name="model.onnx")
    quantizer.quantize(quantization_config=qconfig, save_dir=int8)
    quantized = time.perf_counter()
    int8_file = next(p.name for p in int8.glob("*.onnx"))
    meta = {
        "export_s": exported - start,
        "quantize_s": quantized - exported,
        "fp32": str(fp32 / "model.onnx"),
        "int8": str(int8 / int8_file),
        "quantization": "AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)",
        "versions": _versions(
            "optimum", "optimum-onnx", "transformers", "torch", "onnx", "onnxruntime"
        ),
    }
    (out / "export.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))


# ---- timing (edgekit venv) ------------------------------------------------------------------
def tokenize(model_dir: Path, seq_len: int) -> dict[str, Any]:
    """input_ids, attention_mask, token_type_ids (1, seq_len) int64 of SENTENCE, padded."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_truncation(seq_len)
    tok.enable_padding(length=seq_len, pad_id=0, pad_token="[PAD]")
    enc = tok.encode(SENTENCE)
    return {
        "input_ids": np.asarray([enc.ids], dtype=np.int64),
        "attention_mask": np.asarray([enc.attention_mask], dtype=np.int64),
        "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64),
    }


class BareOrtSession:
    """A bare onnxruntime.InferenceSession with edgekit's options (sequential, 1 inter-op
    thread, all graph optimisations, ``threads`` intra-op), ``run(feeds) -> dict``."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        outputs = self.session.run(self.output_names, feeds)
        return dict(zip(self.output_names, outputs, strict=True))


def time_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Measure one target in this (fresh) process and return its bench row."""
    from edgekit.bench.engine import BenchConfig, bench_session
    from edgekit.bench.environment import peak_rss_mb

    config = BenchConfig.from_json(spec["config"])
    feeds = tokenize(Path(spec["model_dir"]), spec["seq_len"])
    start = time.perf_counter_ns()
    if spec["kind"] == "optimum":
        import onnxruntime as ort

        session: Any = BareOrtSession(Path(spec["path"]), int(config.threads or 1))
        files = [Path(spec["path"])]
        versions = {"onnxruntime": ort.__version__}
        row = {"model": PEER_MODEL, "label": PEER_LABEL, "target": spec["target"]}
        row.update(runtime="onnxruntime", graph="model", source="optimum", peer=spec["peer"])
    else:
        from edgekit.bundle.format import Bundle
        from edgekit.runtimes import get_runtime

        bundle = Bundle.load(spec["path"])
        entry = bundle.graph(None)
        runtime = spec.get("runtime") or bundle.default_runtime(entry.name)
        session = bundle.session(entry.name, runtime, config.device, config.threads)
        files = [bundle.file(rel) for rel in entry.files]
        versions = get_runtime(runtime).versions()
        dtypes = {s.name: s.dtype for s in entry.inputs}
        feeds = {k: v.astype(dtypes[k]) for k, v in feeds.items() if k in dtypes}
        row = {"model": bundle.model, "label": f"{bundle.model} ({Path(spec['path']).name})"}
        row.update(target=f"{entry.format}-{entry.precision}", runtime=runtime, graph=entry.name)
    loaded = time.perf_counter_ns()
    if spec["kind"] == "optimum":
        feeds = {k: v for k, v in feeds.items() if k in session.input_names}
    timing = bench_session(session, feeds, config)
    shapes = {k: {"shape": list(v.shape), "dtype": v.dtype.name} for k, v in feeds.items()}
    row.update(status="ok", error=None, device=config.device, threads=config.threads, batch=1)
    row.update(runtime_versions=versions, inputs=shapes, load_ms=(loaded - start) / 1e6)
    row.update(size_mb=sum(f.stat().st_size for f in files) / 1e6, **timing)
    return {**row, "peak_rss_mb": peak_rss_mb(), "pid": os.getpid()}


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "time-one", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = " | ".join(proc.stderr.strip().splitlines()[-4:])
    return _failed(spec, f"exit code {proc.returncode}: {tail}")


def _failed(spec: dict[str, Any], error: str) -> dict[str, Any]:
    optimum = spec["kind"] == "optimum"
    row = {"label": PEER_LABEL if optimum else spec["path"], "status": "failed", "error": error}
    row.update(model=PEER_MODEL if optimum else Path(spec["path"]).name, target=spec.get("target"))
    row.update(runtime=spec.get("runtime") or "onnxruntime", device="cpu", batch=1)
    return {
        **row,
        "threads": spec["config"].get("threads"),
        "source": "optimum" if optimum else None,
    }


def bench(args: argparse.Namespace) -> None:
    from edgekit.bench.engine import SCHEMA, BenchConfig
    from edgekit.bench.environment import environment
    from edgekit.bench.plots import plot_report
    from edgekit.bench.tables import print_report, write_report

    out = Path(args.out)
    meta = json.loads((out / "export.json").read_text())
    config = BenchConfig(warmup=args.warmup, iterations=args.iterations, threads=args.threads)
    common = {"config": config.to_json(), "model_dir": str(args.model_dir), "seq_len": args.seq_len}
    peer = {"versions": meta["versions"], "quantization": meta["quantization"]}
    specs = [
        {**common, "kind": "optimum", "path": meta["fp32"], "target": "onnx-fp32", "peer": peer},
        {**common, "kind": "optimum", "path": meta["int8"], "peer": peer,
         "target": "onnx-int8 (avx512_vnni dynamic)"},
    ]  # fmt: skip
    for item in args.bundles:  # BUNDLE or BUNDLE@RUNTIME
        path, _, runtime = item.rpartition("@") if "@" in item else (item, "", args.runtime)
        specs.append({**common, "kind": "bundle", "path": path, "runtime": runtime or None})
    rows = []
    for spec in specs:
        print(f"[optimum-peer] timing {spec.get('target') or spec['path']}", file=sys.stderr)
        rows.append(_spawn(spec))
    head = {"schema": SCHEMA, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    head.update(environment=environment(), config=config.to_json())
    head["protocol"] = f"batch 1, one real sentence padded to {args.seq_len} tokens"
    peer_rows = [r for r in rows if r.get("source") == "optimum"]
    write_report({**head, "results": peer_rows}, out / "optimum-peer.json")
    combined = {**head, "results": rows}
    write_report(combined, out / "combined.json")
    plot_report(combined, out / "combined.png")
    print_report(combined, title=f"MiniLM: edgekit vs Optimum ({head['protocol']})")
    print(f"Optimum {meta['versions'].get('optimum')} (optimum-onnx "
          f"{meta['versions'].get('optimum-onnx')}, transformers "
          f"{meta['versions'].get('transformers')}); Optimum rows output token embeddings "
          f"(mean pooling not in the graph). Results: {out / 'combined.json'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    exp = sub.add_parser("export")
    exp.add_argument("--model-dir", type=Path, required=True)
    exp.add_argument("--out", type=Path, required=True)
    ben = sub.add_parser("bench")
    ben.add_argument("--model-dir", type=Path, required=True)
    ben.add_argument("--out", type=Path, required=True)
    ben.add_argument("--threads", type=int, default=2)
    ben.add_argument("--iterations", type=int, default=100)
    ben.add_argument("--warmup", type=int, default=10)
    ben.add_argument("--seq-len", type=int, default=128)
    ben.add_argument("--runtime", default=None, help="runtime for the edgekit bundles")
    ben.add_argument("bundles", nargs="*", help="edgekit MiniLM bundles: BUNDLE[@RUNTIME]")
    one = sub.add_parser("time-one")
    one.add_argument("spec")
    args = parser.parse_args()
    if args.cmd == "export":
        export(args.model_dir, args.out)
    elif args.cmd == "bench":
        bench(args)
    else:
        spec = json.loads(args.spec)
        try:
            print(json.dumps(time_one(spec)))
        except Exception as exc:  # one failing target is a row, as in edgekit bench
            print(json.dumps(_failed(spec, f"{type(exc).__name__}: {exc}")))


if __name__ == "__main__":
    main()
