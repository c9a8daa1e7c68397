"""``edgekit bench-stream --meta``: Meta's SAM 2.1 video predictor beside edgekit, in one run.

The ``sam2`` card's weights (a checkpoint, or seeded random weights from the official config)
are loaded strictly into Meta's ``SAM2VideoPredictor`` (PyPI ``sam2``) and into edgekit's graphs
on torch, ONNX Runtime and OpenVINO (exported to a temporary folder), plus any SAM 2 bundles
given. One box-prompted object is tracked through the same clip by each: a pan over
scikit-image's astronaut photograph (real pixels, camera motion), written as JPEG frames for
Meta's predictor, which reads a folder, and decoded from those files for edgekit's stream.

Per row: the cost of each tracked frame once the memory bank is full (frames after
``num_maskmem``: median, p90), the speed-up over Meta's predictor on the same frames, and the
agreement with Meta's masks (worst and mean IoU over the tracked frames, max |logit
difference| at frame size). Meta's predictor decodes and resizes every frame in ``init_state``
before tracking; that cost is reported per frame beside its tracking cost, while edgekit's
rows resize inside each frame's time.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import InputError

META_CONFIGS = {
    "tiny": "configs/sam2.1/sam2.1_hiera_t.yaml",
    "small": "configs/sam2.1/sam2.1_hiera_s.yaml",
    "base_plus": "configs/sam2.1/sam2.1_hiera_b+.yaml",
    "large": "configs/sam2.1/sam2.1_hiera_l.yaml",
}
INSTALL_HINT = (
    "SAM2_BUILD_CUDA=0 pip install --no-deps sam2==1.1.0 && pip install hydra-core iopath "
    "(make setup installs it for the tests)"
)
FRAME_HW = (320, 480)  # the clip's frames: neither square nor the model's size
BOX = (150.0, 40.0, 330.0, 250.0)  # the astronaut's head and shoulders on frame 0 (x0, y0, x1, y1)
MIN_FRAMES = 12


def pan_frames(frames: int, hw: tuple[int, int] = FRAME_HW) -> np.ndarray:
    """(frames, H, W, 3) uint8: a window of ``hw`` panning down and right over scikit-image's
    astronaut photograph (512 x 512), 3 rows and 2 columns a frame, back and forth."""
    from skimage import data

    photo = data.astronaut()
    h, w = hw
    rows, cols = photo.shape[0] - h, photo.shape[1] - w
    out = np.empty((frames, h, w, 3), np.uint8)
    for t in range(frames):
        r = _bounce(3 * t, rows)
        c = _bounce(2 * t, cols)
        out[t] = photo[r : r + h, c : c + w]
    return out


def _bounce(step: int, limit: int) -> int:
    """0 .. limit and back: a triangle wave."""
    period = 2 * limit
    phase = step % period if period else 0
    return phase if phase <= limit else period - phase


def jpeg_clip(frames: np.ndarray, folder: Path) -> np.ndarray:
    """Write ``frames`` as JPEG files 00000.jpg ... (the layout Meta's predictor reads) and
    return them decoded again, so both sides see the same pixels."""
    from PIL import Image

    decoded = []
    for i, frame in enumerate(frames):
        path = folder / f"{i:05d}.jpg"
        Image.fromarray(frame).save(path, quality=95)
        decoded.append(np.asarray(Image.open(path).convert("RGB")))
    return np.stack(decoded)


def meta_predictor(card: Any) -> Any:
    """Meta's SAM2VideoPredictor for the ``sam2`` card's size and image size, with the card's
    weights loaded strictly. Hole filling (a CUDA extension) is off, as edgekit has none."""
    import torch

    try:
        from sam2.build_sam import build_sam2_video_predictor
    except ImportError as exc:
        raise InputError(
            f"--meta needs Meta's sam2 package ({exc}); install it: {INSTALL_HINT}"
        ) from None
    config = card.config
    predictor = build_sam2_video_predictor(
        META_CONFIGS[config["size"]],
        None,
        device="cpu",
        hydra_overrides_extra=[f"++model.image_size={int(config['image_size'])}"],
    )
    predictor.fill_hole_area = 0
    with torch.no_grad():
        predictor.load_state_dict(card.model().state_dict(), strict=True)
    return predictor.eval()


def stream_meta(predictor: Any, folder: Path, frames: int) -> tuple[list[float], np.ndarray, float]:
    """Track the box through the JPEG folder with Meta's predictor: (seconds per frame, the
    frame-size logits (T, H, W), seconds per frame of ``init_state``'s decoding and resizing).
    Frame 0's time is the prompt's."""
    import torch

    with torch.inference_mode():
        started = time.perf_counter()
        state = predictor.init_state(str(folder))
        load = (time.perf_counter() - started) / frames
        started = time.perf_counter()
        _, _, logits = predictor.add_new_points_or_box(state, 0, 1, box=np.asarray(BOX))
        seconds, out = [time.perf_counter() - started], [logits[0, 0].numpy()]
        started = time.perf_counter()
        for index, _, logits in predictor.propagate_in_video(state):
            if index == 0:  # the prompted frame again
                started = time.perf_counter()
                continue
            out.append(logits[0, 0].numpy())
            now = time.perf_counter()
            seconds.append(now - started)
            started = now
    return seconds, np.stack(out), load


def stream_edgekit(
    graphs: Mapping[str, Callable], config: Any, clip: np.ndarray
) -> tuple[list[float], np.ndarray]:
    """Track the box through ``clip`` with edgekit's stream: (seconds per frame, frame-size
    logits (T, H, W): the low-res logits upsampled as the stream upsamples them)."""
    from edgekit.segmentation.arrays import resize_bilinear
    from edgekit.segmentation.stream import Prompt, SAM2Stream

    stream = SAM2Stream(graphs, config)
    seconds, out = [], []
    for i, frame in enumerate(clip):
        started = time.perf_counter()
        result = stream.start(frame, {1: Prompt(box=list(BOX))}) if i == 0 else stream.track(frame)
        seconds.append(time.perf_counter() - started)
        low = result.low_res_logits[1]
        out.append(resize_bilinear(low[None, None], clip.shape[1:3])[0, 0])
    return seconds, np.stack(out)


def agreement(logits: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Mask IoU (logits > 0) and max |logit difference| per tracked frame (1..T-1) against
    ``reference``, both (T, H, W): worst and mean IoU, max difference."""
    ious = []
    for got, want in zip(logits[1:] > 0, reference[1:] > 0, strict=True):
        union = np.logical_or(got, want).sum()
        ious.append(1.0 if union == 0 else np.logical_and(got, want).sum() / union)
    return {
        "worst_iou": float(np.min(ious)),
        "mean_iou": float(np.mean(ious)),
        "max_abs_logit": float(np.abs(logits[1:] - reference[1:]).max()),
    }


def exported_graph_sets(
    card: Any, folder: Path, threads: int, runtimes: Sequence[str]
) -> list[tuple[str, str, Any]]:
    """(target, runtime, make graphs) for the card's fp32 ONNX graphs on each of ``runtimes``
    (onnxruntime, openvino), exported to ``folder``."""
    from edgekit.exporters.onnx import export_onnx
    from edgekit.segmentation.run import graph_set_from_files

    files = {spec.name: export_onnx(spec, folder / f"{spec.name}.onnx", card.opset)
             for spec in card.graphs()}  # fmt: skip
    return [
        ("sam2 onnx fp32", runtime, lambda r=runtime: graph_set_from_files(files, r, threads))
        for runtime in runtimes
    ]


def frame_gflops(card: Any) -> dict[str, float]:
    """GFLOP of one tracked frame of one object with a full memory bank, per graph (a
    multiply-add counts 2; attention counted as its two matrix products, which torch's flop
    counter leaves out of its fused kernel)."""
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from edgekit.models.sam2.graphs import example_inputs, graph_modules

    def unfused(q: Any, k: Any, v: Any, *args: Any, **kwargs: Any) -> Any:
        return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, -1) @ v

    config = card.stream_config()
    model = card.model()
    modules = graph_modules(model)
    inputs = example_inputs(model, config.num_maskmem, config.max_obj_ptrs, num_points=1)
    out = {}
    fused, F.scaled_dot_product_attention = F.scaled_dot_product_attention, unfused
    try:
        for name in ("image_encoder", "memory_attention", "mask_decoder", "memory_encoder"):
            with torch.inference_mode(), FlopCounterMode(display=False) as counter:
                modules[name](*inputs[name].values())
            out[name] = counter.get_total_flops() / 1e9
    finally:
        F.scaled_dot_product_attention = fused
    return out


def matmul_gflops(threads: int, n: int = 2048) -> float:
    """This CPU's float32 matrix-product rate at ``threads`` (torch, n x n x n, best of 3):
    the ceiling any float32 implementation of these graphs runs under."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * n**3 / best / 1e9


def compare_with_meta(
    card: Any,
    bundles: Sequence[str | Path] = (),
    frames: int = 24,
    threads: int = 2,
    progress: bool = True,
    runtimes: Sequence[str] = ("onnxruntime", "openvino"),
) -> dict[str, Any]:
    """The side-by-side report: Meta's predictor, edgekit on torch and on each of ``runtimes``
    (the card's fp32 graphs) and each bundle on its runtimes, on one clip, at ``threads``."""
    import torch

    from edgekit.bench.environment import environment
    from edgekit.bundle.format import Bundle
    from edgekit.progress import step_progress
    from edgekit.segmentation.bench import bundle_runtimes
    from edgekit.segmentation.run import bundle_graph_set, bundle_stream_config

    if card.name != "sam2":
        raise InputError(f"--meta compares the sam2 card with Meta's predictor, not '{card.name}'")
    if frames < MIN_FRAMES:
        raise InputError(f"--meta needs at least {MIN_FRAMES} frames (the bank fills at 7)")
    torch.set_num_threads(threads)
    config = card.stream_config()
    full = config.num_maskmem + 1  # first frame tracked with a full memory bank
    with tempfile.TemporaryDirectory(prefix="edgekit-meta-") as tmp:
        folder = Path(tmp) / "frames"
        folder.mkdir()
        clip = jpeg_clip(pan_frames(frames), folder)
        plan: list[tuple[str, str, Callable[[], Mapping[str, Callable]], Any]] = [
            ("sam2 (torch)", "torch", lambda: dict(card.torch_graphs()), config)
        ]
        exports = Path(tmp) / "graphs"
        exports.mkdir()
        plan += [
            (t, r, make, config)
            for t, r, make in exported_graph_sets(card, exports, threads, runtimes)
        ]
        for path in bundles:
            bundle = Bundle.load(path)
            for runtime in bundle_runtimes(bundle):
                plan.append(
                    (
                        bundle.target,
                        runtime,
                        lambda b=bundle, r=runtime: bundle_graph_set(b, runtime=r, threads=threads),
                        bundle_stream_config(bundle),
                    )
                )
        rows = []
        with step_progress("bench-stream --meta", len(plan) + 1, progress) as step:
            step("Meta's SAM2VideoPredictor (torch)")
            seconds, reference, load = stream_meta(meta_predictor(card), folder, frames)
            rows.append(_row("Meta SAM2VideoPredictor", "torch", seconds, full, None, load))
            rows[0]["mask_fraction"] = float((reference[1:] > 0).mean())
            for target, runtime, make, stream_config in plan:
                step(f"{target} on {runtime}")
                try:
                    seconds, logits = stream_edgekit(make(), stream_config, clip)
                    rows.append(_row(target, runtime, seconds, full, agreement(logits, reference)))
                except Exception as exc:  # noqa: BLE001 - a failed row is reported, not a crash
                    rows.append({"target": target, "runtime": runtime, "error": str(exc)[:300]})
    meta_ms = rows[0]["median_ms"]
    gflops = frame_gflops(card)
    for row in rows:
        if "median_ms" in row:
            row["speedup"] = meta_ms / row["median_ms"]
            row["achieved_gflops"] = sum(gflops.values()) / row["median_ms"] * 1e3
    return {
        "kind": "sam2-meta-compare",
        "size": card.config["size"],
        "image_size": card.image_size,
        "weights": card.preprocessing()["weights"],
        "frames": frames,
        "full_from": full,
        "threads": threads,
        "gflop_per_frame": gflops,
        "fp32_matmul_gflops": matmul_gflops(threads),
        "environment": environment(),
        "results": rows,
        "latency_ms": {
            f"{r['target']} / {r['runtime']}": r["latency_ms"] for r in rows if "latency_ms" in r
        },  # fmt: skip
    }


def _row(
    target: str,
    runtime: str,
    seconds: Sequence[float],
    full: int,
    parity: Mapping[str, float] | None,
    load: float = 0.0,
) -> dict[str, Any]:
    ms = 1e3 * np.asarray(seconds)
    bank_full = ms[full:]
    return {
        "target": target,
        "runtime": runtime,
        "median_ms": float(np.median(bank_full)),
        "p90_ms": float(np.percentile(bank_full, 90)),
        "first_ms": float(ms[0]),
        "load_ms": 1e3 * load,
        "latency_ms": ms.tolist(),
        **(parity or {}),
    }


def print_meta_report(report: Mapping[str, Any], console: Any) -> None:
    """The rows as one table, then the frame's GFLOP and this CPU's float32 ceiling."""
    from edgekit.segmentation.bench import rows_table

    title = (
        f"SAM 2.1 {report['size']} at {report['image_size']} ({report['weights']}), "
        f"{report['frames']} frames of {FRAME_HW[0]} x {FRAME_HW[1]}, {report['threads']} threads; "
        f"per tracked frame from frame {report['full_from']} (memory bank full)"
    )
    cols = ("target", "runtime", "median ms", "p90 ms", "vs Meta", "GFLOP/s", "worst IoU vs Meta",
            "mean IoU", "max |Δ logit|")  # fmt: skip

    def cells(r: Mapping[str, Any]) -> list[str]:
        load = f" (+{r['load_ms']:.0f} loading)" if r.get("load_ms") else ""
        timing = [f"{r['median_ms']:.0f}{load}", f"{r['p90_ms']:.0f}", f"{r['speedup']:.2f}x",
                  f"{r['achieved_gflops']:.0f}"]  # fmt: skip
        if "worst_iou" not in r:
            return [*timing, "reference", "", ""]
        return [*timing, f"{r['worst_iou']:.4f}", f"{r['mean_iou']:.4f}",
                f"{r['max_abs_logit']:.1e}"]  # fmt: skip

    console.print(rows_table(title, cols, report["results"], cells))
    flops = report["gflop_per_frame"]
    parts = ", ".join(f"{name} {value:.1f}" for name, value in flops.items())
    console.print(
        f"GFLOP per tracked frame: {sum(flops.values()):.1f} ({parts}); this CPU's float32 "
        f"matrix product at {report['threads']} threads: {report['fp32_matmul_gflops']:.0f} GFLOP/s"
    )
