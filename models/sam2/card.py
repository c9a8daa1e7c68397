"""sam2 card: the official SAM 2.1 (tiny | small | base_plus | large) as a streaming bundle.

edgekit's SAM 2.1 (models/sam2) loads Meta's checkpoints (``sam2.1_hiera_*.pt``) from a path
the user gives; nothing is downloaded. The five graphs of the SAM 2 graph contract
(edgekit.segmentation.graphs) go through build_bundle like any card, so the bundle runs in
``edgekit run sam2-stream``, ``edgekit bench-stream`` and the daemon's sam2-stream pipeline, and
verify checks streaming rollout parity on the synthetic held-out clips (frames resized to the
model's input size by the stream).

Options: ``size`` (default "tiny"), ``checkpoint`` (path; required), ``image_size`` (a multiple
of 32, default 1024 as trained; smaller sizes trade accuracy for speed), ``resize`` (how frames
become the model's input: "pil-bicubic", the default, bit-exact with Meta's video predictor;
"bilinear-antialias" as Meta's image predictor; see StreamConfig), and for plumbing tests
only ``random_weights=True`` with ``seed``: the official architecture with seeded random
weights (the object-score head biased to "visible" so masks flow), recorded in the bundle's
manifest as such. ``eval_clips`` / ``eval_frames`` shrink the
held-out set that export's verify tracks (20 clips of 24 frames: minutes per runtime on a GPU,
hours at 1024 on a CPU).

    edgekit export sam2 --option checkpoint=~/ckpt/sam2.1_hiera_tiny.pt --option image_size=512 \\
        --format onnx,openvino
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from edgekit.card import GraphSpec
from edgekit.errors import InputError
from edgekit.models.sam2.config import SIZES, sam2_config
from edgekit.models.sam2.graphs import graph_specs, torch_graph_set
from edgekit.models.sam2.model import SAM2Model
from edgekit.models.sam2_edge.stream_card import StreamingSAM2Card

if TYPE_CHECKING:
    from edgekit.segmentation.stream import StreamConfig

DEFAULTS: dict[str, Any] = {
    "size": "tiny",
    "checkpoint": None,
    "image_size": 1024,
    "random_weights": False,
    "seed": 0,
    "resize": "pil-bicubic",  # Meta's video predictor (StreamConfig.resize)
    "eval_clips": 20,
    "eval_frames": 24,
}


@dataclass(frozen=True)
class Weights:
    """Where the weights came from: ``path`` is the checkpoint (its stem names the weights in
    the bundle's manifest), or None for seeded random weights."""

    path: Path | None
    size: str


class SAM21Card(StreamingSAM2Card):
    """Meta's SAM 2.1 from a local checkpoint, under the SAM 2 graph contract."""

    name: ClassVar[str] = "sam2"
    tier: ClassVar[str] = "server"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "official SAM 2.1 (Hiera trunk, memory attention with 2D RoPE) from a local "
        "sam2.1_hiera_*.pt checkpoint; streaming segmentation as five graphs"
    )
    int8_budget: ClassVar[float] = 0.05

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        unknown = sorted(set(options) - set(DEFAULTS))
        if unknown:
            raise InputError(
                f"sam2 options {unknown} are unknown; expected some of {sorted(DEFAULTS)}"
            )
        self.config = DEFAULTS | options
        c = self.config
        if c["size"] not in SIZES:
            raise InputError(f"sam2 size must be one of {', '.join(SIZES)}, got {c['size']!r}")
        sam2_config(c["size"], int(c["image_size"]))  # checks the image size
        self.stream_config()  # checks resize
        if c["checkpoint"] is None and not c["random_weights"]:
            raise InputError(
                "sam2 needs the official checkpoint: --option checkpoint=PATH to a local "
                f"sam2.1_hiera_{c['size']}.pt (edgekit downloads nothing); random_weights=true "
                "builds the architecture with random weights for plumbing tests only"
            )
        if c["checkpoint"] is not None:
            path = Path(str(c["checkpoint"])).expanduser()
            if not path.is_file():
                raise InputError(f"sam2 checkpoint {path} does not exist or is not a file")
            self.config["checkpoint"] = str(path.resolve())
            self.options = {**self.options, "checkpoint": self.config["checkpoint"]}
        self._model: SAM2Model | None = None

    # ---- weights ---------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Weights:
        """Nothing to train: the official weights, or the seeded random ones."""
        c = self.config
        return Weights(Path(c["checkpoint"]) if c["checkpoint"] else None, c["size"])

    def model(self) -> SAM2Model:
        """SAM 2.1 in eval mode with the checkpoint loaded (strictly: a missing, unexpected
        or mis-shaped key is named in the error)."""
        if self._model is None:
            c = self.config
            with torch.random.fork_rng():
                torch.manual_seed(int(c["seed"]))
                model = SAM2Model(sam2_config(c["size"], int(c["image_size"])))
            if c["checkpoint"]:
                from edgekit.models.sam2.checkpoint import load_checkpoint

                load_checkpoint(model, c["checkpoint"])
            else:  # random weights say "no object" everywhere; bias them to "visible" so
                # masks, memories and pointers flow through the plumbing being tested
                with torch.no_grad():
                    model.sam_mask_decoder.pred_obj_score_head.layers[-1].bias += 10.0
            self._model = model.eval()
        return self._model

    # ---- the graphs --------------------------------------------------------------------------
    @property
    def image_size(self) -> int:
        return int(self.config["image_size"])

    def torch_graphs(self) -> dict[str, Callable]:
        return dict(torch_graph_set(self.model()))

    def specs(self, examples: dict[str, dict[str, torch.Tensor]]) -> list[GraphSpec]:
        return graph_specs(self.model(), examples=examples)

    def stream_config(self) -> StreamConfig:
        """SAM 2.1's video predictor: its memory sizes, every conditioning frame kept
        (``max_cond_frames`` None) and frames resized as it does (option ``resize``,
        "pil-bicubic" by default)."""
        return replace(super().stream_config(), resize=str(self.config["resize"]))

    def preprocessing(self) -> dict[str, Any]:
        c = self.config
        weights = Path(c["checkpoint"]).name if c["checkpoint"] else f"random (seed {c['seed']})"
        pre = super().preprocessing()
        config = self.stream_config()
        methods = {
            "pil-bicubic": "PIL bicubic on the uint8 frame, as Meta's video predictor "
            "(edgekit.segmentation.arrays.resize_pil_bicubic)",
            "bilinear-antialias": "bilinear, anti-aliased, on float32, as Meta's image predictor",
        }
        pre["resize_method"] = methods[config.resize]
        if config.resize == "pil-bicubic":
            pre["scale"] = "resize the 8-bit frame, then divide by 255 -> float32 in [0, 1]"
        pre["stream_config"] = pre["stream_config"] | {
            "resize": config.resize,
            "max_cond_frames": config.max_cond_frames,
        }
        pre["output"] = pre["output"] | {
            "postprocess": "pick a mask as the stream does, upsample bilinearly "
            "(align_corners=False) to the frame's size, > 0 (as Meta's video predictor)"
        }
        return pre | {"size": c["size"], "weights": weights}
