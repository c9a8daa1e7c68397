"""The "tensorrt" target: a serialized TensorRT engine (``<graph>.<precision>.engine``).

Built from the fp32 ONNX graph with ``trt.Builder`` + ``OnnxParser`` (TensorRT 10 API), one
optimisation profile covering every dynamic input: min 1, opt = the example size, max =
``options.extra["trt_max_shapes"][name]`` or 4x the example on dynamic axes. fp16 sets the FP16
builder flag; int8 sets INT8 (+FP16 for layers left unquantized) with an entropy calibrator fed
from the card's calibration data through CUDA buffers. An engine only runs with the TensorRT
version and GPU it was built on, so both are recorded in the artifact details.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgekit.errors import DeviceUnavailableError, ExportError, InputError, MissingDependencyError
from edgekit.exporters.base import Artifact, ExportOptions

try:
    import tensorrt as trt
except ImportError as exc:
    raise MissingDependencyError("TensorRT export", "tensorrt", extra="gpu") from exc

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.card import GraphSpec, ModelCard

PRECISIONS = ("fp32", "fp16", "int8")
MAX_SCALE = 4  # default max shape: this many times the example size on each dynamic axis


class _Logger(trt.ILogger):
    """Keeps TensorRT's warnings and errors so a failed build can say why."""

    def __init__(self) -> None:
        trt.ILogger.__init__(self)
        self.messages: list[str] = []

    def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
        if int(severity) <= int(trt.ILogger.Severity.WARNING):
            self.messages.append(f"[{severity.name}] {msg}")


def _require_cuda() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError("TensorRT export", "torch") from exc
    if not torch.cuda.is_available():
        raise DeviceUnavailableError(
            "TensorRT export needs a CUDA GPU, and torch sees none here "
            "(check the NVIDIA driver, CUDA_VISIBLE_DEVICES, and a CUDA build of torch)"
        )
    return torch


def profile_shapes(
    name: str, network_shape: tuple[int, ...], example: tuple[int, ...], extra: dict[str, Any]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(min, opt, max) shapes of one input; -1 in ``network_shape`` marks a dynamic axis.

    ``extra`` may give "trt_min_shapes" / "trt_opt_shapes" / "trt_max_shapes": {name: shape}.
    E.g. network (-1, 3, 64, 64), example (2, 3, 64, 64) -> (1,3,64,64), (2,...), (8,...).
    """
    if len(network_shape) != len(example):
        raise InputError(f"input '{name}' has rank {len(network_shape)} in ONNX, example {example}")
    dynamic = [d < 0 for d in network_shape]
    low = tuple(1 if dyn else e for dyn, e in zip(dynamic, example, strict=True))
    high = tuple(MAX_SCALE * e if dyn else e for dyn, e in zip(dynamic, example, strict=True))
    shapes = []
    for key, default in (
        ("trt_min_shapes", low),
        ("trt_opt_shapes", example),
        ("trt_max_shapes", high),
    ):
        given = extra.get(key, {}).get(name)
        shapes.append(tuple(int(d) for d in given) if given is not None else default)
    lo, opt, hi = shapes
    if not all(a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True)):
        raise InputError(f"input '{name}': need min <= opt <= max, got {lo}, {opt}, {hi}")
    return lo, opt, hi


def entropy_calibrator(feeds: list[dict[str, np.ndarray]], dtypes: dict[str, np.dtype]) -> Any:
    """An IInt8EntropyCalibrator2 feeding one feed dict per batch from CUDA buffers.

    Implicit (calibrated) int8 is deprecated since TensorRT 10.1; a TensorRT without it gets an
    ExportError pointing to the explicit route (an onnx-int8 QDQ graph).
    """
    base = getattr(trt, "IInt8EntropyCalibrator2", None)
    if base is None:
        raise ExportError(
            f"TensorRT {trt.__version__} has no IInt8EntropyCalibrator2 (implicit int8 was "
            "removed); build the engine from a QDQ onnx-int8 graph instead"
        )
    torch = _require_cuda()

    class EntropyCalibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.index = 0
            self.buffers: dict[str, Any] = {}
            self.feeds = feeds

        def get_batch_size(self) -> int:
            return 1  # explicit-batch network: the batch dim is part of each input's shape

        def get_batch(self, names: list[str]) -> list[int] | None:
            if self.index >= len(feeds):
                return None
            feed = feeds[self.index]
            self.index += 1
            for name in names:  # kept alive on the GPU until the next batch replaces them
                host = np.ascontiguousarray(feed[name], dtype=dtypes[name])
                self.buffers[name] = torch.from_numpy(host).cuda()
            return [int(self.buffers[name].data_ptr()) for name in names]

        def read_calibration_cache(self) -> bytes | None:
            return None  # always calibrate on the card's data

        def write_calibration_cache(self, cache: Any) -> None:
            return None  # the engine holds the scales; no cache file is kept

    return EntropyCalibrator()


def build_engine(
    onnx_path: Path,
    engine_path: Path,
    precision: str,
    examples: dict[str, tuple[int, ...]],
    extra: dict[str, Any],
    calibration: list[dict[str, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """Build and serialize a TensorRT engine from an ONNX file; return what was built.

    ``examples`` maps input name -> example shape (the "opt" shape of the profile).
    """
    torch = _require_cuda()
    logger = _Logger()
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"TensorRT could not parse {onnx_path.name}: {'; '.join(errors)}")
    config = builder.create_builder_config()
    workspace_gb = float(extra.get("trt_workspace_gb", 4))
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * 2**30))
    profile = builder.create_optimization_profile()
    shapes: dict[str, dict[str, list[int]]] = {}
    dtypes: dict[str, np.dtype] = {}
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if tensor.name not in examples:
            raise InputError(f"engine input '{tensor.name}' has no example; have {list(examples)}")
        lo, opt, hi = profile_shapes(tensor.name, tuple(tensor.shape), examples[tensor.name], extra)
        profile.set_shape(tensor.name, lo, opt, hi)
        shapes[tensor.name] = {"min": list(lo), "opt": list(opt), "max": list(hi)}
        dtypes[tensor.name] = np.dtype(trt.nptype(tensor.dtype))
    config.add_optimization_profile(profile)
    calibrator = None
    if precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if precision == "int8":
        if not calibration:
            raise InputError("TensorRT int8 needs calibration feeds; the card gave none")
        calibrator = entropy_calibrator(_same_shape(calibration), dtypes)
        calibration_profile = builder.create_optimization_profile()
        for name, arr in calibrator.feeds[0].items():
            calibration_profile.set_shape(name, arr.shape, arr.shape, arr.shape)
        config.set_flag(trt.BuilderFlag.INT8)
        config.int8_calibrator = calibrator
        config.set_calibration_profile(calibration_profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ExportError(
            f"TensorRT failed to build a {precision} engine from {onnx_path.name}: "
            + " | ".join(logger.messages[-5:])
        )
    engine_path.parent.mkdir(parents=True, exist_ok=True)
    with open(engine_path, "wb") as handle:
        handle.write(serialized)  # IHostMemory exposes the buffer protocol
    details: dict[str, Any] = {
        "tensorrt": trt.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "profile": shapes,
        "flags": {"fp32": [], "fp16": ["FP16"], "int8": ["INT8", "FP16"]}[precision],
        "workspace_gb": workspace_gb,
    }
    if calibrator is not None:
        details["calibration"] = {
            "calibrator": "IInt8EntropyCalibrator2",
            "samples": calibrator.index,
        }
    return details


def _same_shape(feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The feeds whose shapes equal the first feed's (one calibration profile, fixed shapes)."""
    first = {k: v.shape for k, v in feeds[0].items()}
    return [f for f in feeds if {k: v.shape for k, v in f.items()} == first]


def export_graph(
    graph: GraphSpec,
    onnx_path: Path | None,
    out_dir: Path,
    precision: str,
    card: ModelCard,
    options: ExportOptions,
) -> Artifact:
    """A TensorRT engine of ``graph`` at ``precision`` from its fp32 ONNX file.

    Raises DeviceUnavailableError without CUDA, ExportError when TensorRT refuses the graph.
    """
    if precision not in PRECISIONS:
        raise InputError(f"tensorrt exports {', '.join(PRECISIONS)}, not '{precision}'")
    if onnx_path is None or not Path(onnx_path).is_file():
        raise InputError(
            f"TensorRT export needs the fp32 ONNX file of '{graph.name}', got {onnx_path}"
        )
    _require_cuda()
    examples = {name: tuple(t.shape) for name, t in graph.example_inputs.items()}
    calibration = None
    if precision == "int8":
        from edgekit.exporters.onnx_int8 import calibration_feeds

        calibration = calibration_feeds(graph, card, options.calibration_size)
    engine = Path(out_dir) / f"{graph.name}.{precision}.engine"
    extra = dict(options.extra)
    if card is not None:  # the card's profile shapes, unless the user gave their own
        for key, value in card.export_extra([graph]).items():
            extra[key] = {**value, **extra.get(key, {})} if isinstance(value, dict) else value
    details = build_engine(Path(onnx_path), engine, precision, examples, extra, calibration)
    return Artifact(graph.name, [engine], "tensorrt", precision, details)
