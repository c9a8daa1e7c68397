"""ModelCard: everything edgekit needs to know about one model, stated declaratively.

A card says what to build (``graphs()``), which real data exercises it (golden inputs,
calibration and evaluation data), how to measure it (``evaluate``) and how close an exported
artifact must stay (tolerances, agreement floors, the int8 accuracy budget). Exporters, verify
and bench read these facts; no backend code lives on a card.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from edgekit.tensorspec import TensorSpec

if TYPE_CHECKING:  # pragma: no cover
    import torch

Feeds = dict[str, np.ndarray]
Outputs = dict[str, np.ndarray]


class Runner(Protocol):
    """Anything with ``run(feeds) -> outputs`` on numpy arrays: a runtime Session is one."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> Outputs: ...


@dataclass
class GraphSpec:
    """One exportable graph of a model.

    ``example_inputs`` are ordered as the module's forward arguments; ``dynamic_axes`` maps an
    input or output name to {axis index: axis name}, e.g. {"input_ids": {0: "batch", 1: "sequence"}}.
    """

    name: str
    module: torch.nn.Module
    example_inputs: dict[str, torch.Tensor]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)

    def io_specs(self) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """(inputs, outputs) TensorSpecs; outputs found by running the module once.

        Dynamic axes become their names, e.g. ("batch", "sequence"); other dims stay ints.
        """
        import torch

        def spec(name: str, tensor: torch.Tensor) -> TensorSpec:
            axes = self.dynamic_axes.get(name, {})
            shape = tuple(axes.get(i, int(d)) for i, d in enumerate(tensor.shape))
            return TensorSpec(name, str(tensor.detach().cpu().numpy().dtype), shape)

        inputs = [spec(n, t) for n, t in self.example_inputs.items()]
        with torch.inference_mode():
            out = self.module(*self.example_inputs.values())
        if isinstance(out, dict):
            out = list(out.values())
        elif isinstance(out, torch.Tensor):
            out = [out]
        if len(out) != len(self.output_names):
            raise ValueError(
                f"graph '{self.name}' returns {len(out)} outputs but names {self.output_names}"
            )
        return inputs, [spec(n, t) for n, t in zip(self.output_names, out, strict=True)]


@dataclass(frozen=True)
class Tolerance:
    """Elementwise tensor parity: pass when |a - b| <= atol + rtol * |b| everywhere."""

    atol: float
    rtol: float

    def to_json(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


class ModelCard:
    """Base class for model cards; subclasses override the class attributes and methods.

    Class attributes are the declarative facts. ``tolerances`` maps a precision ("fp32", "fp16",
    "int8") to the tensor tolerance an artifact of that precision must meet on golden inputs.
    ``agreement_floors`` maps an agreement metric returned by ``agreement`` to its minimum
    (or, for names ending in ``_rate`` or ``_error``, its maximum).
    """

    name: ClassVar[str] = ""
    tier: ClassVar[str] = "edge"  # "edge" | "server"
    task: ClassVar[str] = ""
    architecture: ClassVar[str] = ""  # "transformer" | "cnn" | ...: picks int8 recipes (NNCF type)
    summary: ClassVar[str] = ""
    opset: ClassVar[int] = 17
    primary_metric: ClassVar[str | None] = None
    higher_is_better: ClassVar[bool] = True
    int8_budget: ClassVar[float] = 0.01  # relative drop of primary_metric accepted for int8
    int8_mode: ClassVar[str] = "static"  # "static" (QDQ, calibrated) | "dynamic"
    calibration_method: ClassVar[str] = "minmax"  # "minmax" | "entropy" | "percentile"
    ort_fusion: ClassVar[dict[str, Any] | None] = None  # onnxruntime.transformers optimizer args
    ort_fusion_int8: ClassVar[bool] = True  # False: int8 ONNX builds skip ort_fusion by default
    nncf_smooth_quant: ClassVar[bool] = True  # NNCF SmoothQuant for transformer int8 (OpenVINO)
    # regexes of graph node names kept in floating point by every int8 exporter (ONNX, OpenVINO)
    int8_float_nodes: ClassVar[tuple[str, ...]] = ()
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=1e-2, rtol=1e-2),
        "int8": Tolerance(atol=1e-1, rtol=1e-1),
    }
    agreement_floors: ClassVar[dict[str, float]] = {}

    def __init__(self, **options: Any) -> None:
        self.options = options

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """The torch graphs to export, with example inputs and dynamic axes (eval mode, CPU)."""
        raise NotImplementedError

    def source(self) -> dict[str, Any]:
        """JSON facts that let verify rebuild the reference later (card name and options)."""
        return {"card": self.name, "options": dict(self.options)}

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Per graph name, a small batch of real inputs shipped inside the bundle as golden I/O."""
        raise NotImplementedError

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Per graph name, feeds for int8 calibration (real, not random, where the card has data)."""
        raise NotImplementedError

    def preprocessing(self) -> dict[str, Any]:
        """JSON description of pre/post-processing (tokenizer, resize, normalisation, pooling)."""
        return {}

    def assets(self) -> dict[str, str]:
        """Files to ship in the bundle: bundle-relative name -> absolute source path."""
        return {}

    def labels(self) -> list[str] | None:
        return None

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Task metrics of a model whose graphs run through ``runners`` (graph name -> runner)."""
        return {}

    def item_scores(self, runners: Mapping[str, Runner]) -> dict[str, np.ndarray]:
        """Per-item scores on the card's evaluation items: metric name -> (N,) float array
        whose mean is that metric (e.g. 1.0 where a prediction is right), the same N items in
        the same order on every call. Cards that give them can be compared setting against
        setting, item by item (``edgekit eval NAME --against KEY=VALUE``); {}: not supported."""
        return {}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Agreement metrics of candidate vs reference on the card's evaluation data."""
        return {}

    def export_extra(self, graphs: list[GraphSpec]) -> dict[str, Any]:
        """Card defaults for ``ExportOptions.extra`` (e.g. TensorRT profile shapes for dynamic
        axes: {"trt_max_shapes": {input: shape}}); the user's options override them."""
        return {}

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Any:
        """Train the compact variant in-repo (cached); cards with pretrained weights return None."""
        return None

    def tolerance(self, precision: str) -> Tolerance:
        """The tensor tolerance for ``precision``; bf16 (8 significant bits) takes the card's
        int8 tolerance unless the card declares one."""
        if precision == "bf16" and "bf16" not in self.tolerances and "int8" in self.tolerances:
            return self.tolerances["int8"]
        try:
            return self.tolerances[precision]
        except KeyError as exc:
            from edgekit.errors import InputError

            raise InputError(
                f"card '{self.name}' has no tolerance for precision '{precision}'; "
                f"known: {sorted(self.tolerances)}"
            ) from exc


def config_from_options(
    card: str, config_type: Callable[..., Any], options: Mapping[str, Any]
) -> Any:
    """A card's recipe dataclass built from its options (``edgekit ... --option KEY=VALUE``);
    a name that is not a field of ``config_type`` is an InputError listing the fields."""
    from edgekit.errors import InputError

    fields = getattr(config_type, "__dataclass_fields__", {})
    unknown = sorted(set(options) - set(fields))
    if unknown:
        kind = getattr(config_type, "__name__", "config")
        raise InputError(
            f"{card} options {unknown} are unknown (not {kind} fields); "
            f"expected some of {sorted(fields)}"
        )
    check_number_options(card, config_type, options)
    return config_type(**options)


def check_number_options(card: str, config_type: Any, options: Mapping[str, Any]) -> None:
    """An InputError naming the option when one given for an ``int`` / ``float`` field of the
    dataclass ``config_type`` is not a number of that kind (a float for an int field, a string,
    None or a bool); other fields and names are not checked here."""
    from edgekit.errors import InputError

    for name, value in options.items():
        spec = getattr(config_type, "__dataclass_fields__", {}).get(name)
        kind = getattr(spec.type, "__name__", spec.type) if spec is not None else None
        if kind not in ("int", "float"):
            continue
        allowed = (int,) if kind == "int" else (int, float)
        if isinstance(value, bool) or not isinstance(value, allowed):
            article = "an integer" if kind == "int" else "a number"
            raise InputError(f"{card}: option {name}={value!r} must be {article}")
