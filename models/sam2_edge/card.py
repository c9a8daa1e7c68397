"""sam2-edge card: a compact SAM 2 for streaming video object segmentation at 256x256.

The SAM 2 graph contract (edgekit.sam2_graphs): image_encoder, memory_attention, mask_decoder,
memory_encoder and the optional mask_prompt, run by the streaming predictor edgekit.sam2_stream.
About 0.6M parameters: a MobileNet-style CNN encoder (stride 16, 64 channels), a 2-block
two-way mask decoder with IoU, object-score and object-pointer heads, a memory encoder that
compresses each memory frame to 80 tokens (EdgeTAM-style: 8x8 pooled + 16 global latents) and
2 memory-attention layers. Trained in-repo on synthetic clips (``train.py``), cached under
``~/.cache/edgekit/sam2-edge``; evaluated on held-out clips whose background photos training
never sees (``evaluation.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit import sam2_graphs as contract
from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.models.sam2_edge import clips as C
from edgekit.models.sam2_edge import evaluation
from edgekit.models.sam2_edge.graphs import graph_specs, torch_graph_set
from edgekit.models.sam2_edge.model import EdgeSAM2
from edgekit.models.sam2_edge.train import TrainConfig, TrainResult, load_cached, train_cached

GOLDEN_CLIP = ("heldout", 2)  # a crossing clip: two objects, memory filling up
GOLDEN_FRAME = 5  # the frame whose graph feeds are the golden inputs (5 memory frames)
PARITY_CLIPS = 3  # held-out clips tracked by both graph sets for rollout parity
# Weights of the default recipe ship with the package (2.7 MB), named by the recipe's cache key:
# any change to the recipe or the model's source changes the key, and the stale file is ignored.
PACKAGED_WEIGHTS = Path(__file__).parent / "weights"


class _Recorder:
    """Wraps a graph callable; keeps a copy of every feed it is called with."""

    def __init__(self, fn: Callable, store: list[Feeds]) -> None:
        self.fn, self.store = fn, store

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        self.store.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return self.fn(feeds)


def record_feeds(graphs: Mapping[str, Callable], clips: list[C.Clip]) -> dict[str, list[Feeds]]:
    """Track ``clips`` (first-click prompts, plus one mask prompt per clip) with ``graphs``;
    return every feed each graph received, in call order."""
    from edgekit.sam2_stream import Prompt, SAM2Stream

    store: dict[str, list[Feeds]] = {name: [] for name in graphs}
    recorded = {name: _Recorder(fn, store[name]) for name, fn in graphs.items()}
    stream = SAM2Stream(recorded, evaluation.stream_config(clips[0].frames.shape[1]))
    for clip in clips:
        evaluation.track_clip(stream, clip)
        if contract.MASK_PROMPT in graphs:
            stream.add_prompt(clip.object_ids[0], Prompt(mask=clip.masks[-1, 0]))
    return store


class SAM2EdgeCard(ModelCard):
    """EdgeSAM2 trained on synthetic clips; the SAM 2 graph contract at 256x256."""

    name: ClassVar[str] = "sam2-edge"
    tier: ClassVar[str] = "edge"
    task: ClassVar[str] = "video-object-segmentation"
    summary: ClassVar[str] = (
        "compact SAM 2 (0.6M params, CNN encoder, 80 compressed memory tokens per frame) "
        "streaming segmentation at 256x256"
    )
    architecture: ClassVar[str] = "cnn"
    primary_metric: ClassVar[str | None] = "J&F"
    int8_budget: ClassVar[float] = 0.025  # 2 J&F points at J&F 80
    # rollout parity (edgekit.sam2_stream.rollout_parity) over PARITY_CLIPS held-out clips:
    # the exported graph set tracks every object the way torch does, frame after frame
    agreement_floors: ClassVar[dict[str, float]] = {"rollout_mean_iou": 0.9}
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=2e-3, rtol=1e-3),  # mask logits span about +-30
        "fp16": Tolerance(atol=5e-2, rtol=2e-2),
        "int8": Tolerance(atol=2.0, rtol=0.2),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._result: TrainResult | None = None
        self._model: EdgeSAM2 | None = None
        self._golden: dict[str, Feeds] | None = None

    # ---- training --------------------------------------------------------------------------
    def train_config(self) -> TrainConfig:
        """The recipe: TrainConfig defaults, overridden by card options of the same name."""
        fields = TrainConfig.__dataclass_fields__
        return TrainConfig(**{k: v for k, v in self.options.items() if k in fields})

    def train(self, progress: Callable[[float, str], None] | None = None) -> TrainResult:
        """Train (minutes on 2 CPU cores) or load the cached weights of this recipe."""
        if self._result is None:
            config = self.train_config()
            self._result = load_cached(config, packaged_weights(config)) or train_cached(
                config, progress, show_progress=bool(self.options.get("show_progress", True))
            )
        return self._result

    def model(self) -> EdgeSAM2:
        """The trained EdgeSAM2 in eval mode (trains on first use when nothing is cached)."""
        if self._model is None:
            self._model = self.train().build()
        return self._model

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """The five contract graphs; example inputs are the golden (recorded, real) feeds."""
        examples = {
            name: {k: torch.from_numpy(v) for k, v in feeds.items()}
            for name, feeds in self.golden_inputs().items()
        }
        return graph_specs(self.model(), examples=examples)

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Per graph, the feeds it got on frame GOLDEN_FRAME of a held-out clip (the mask prompt
        graph: its one call), recorded from the torch stream."""
        if self._golden is None:
            split, index = GOLDEN_CLIP
            clip = C.make_clip(split, index, frames=GOLDEN_FRAME + 1)
            store = record_feeds(torch_graph_set(self.model()), [clip])
            k = len(clip.object_ids)
            picks = {
                contract.IMAGE_ENCODER: GOLDEN_FRAME,
                contract.MEMORY_ATTENTION: (GOLDEN_FRAME - 1) * k,
                contract.MASK_DECODER: GOLDEN_FRAME * k,
                contract.MEMORY_ENCODER: GOLDEN_FRAME * k,
                contract.MASK_PROMPT: 0,
            }
            self._golden = {name: store[name][i] for name, i in picks.items()}
        return self._golden

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Per graph, up to ``limit`` feeds recorded while tracking training clips."""
        clips = C.clip_set("train", 6, frames=12, start=10_000)
        store = record_feeds(torch_graph_set(self.model()), clips)
        out = {}
        for name, feeds in store.items():
            step = max(1, len(feeds) // limit)
            out[name] = feeds[::step][:limit]
        return out

    def preprocessing(self) -> dict[str, Any]:
        return {
            "color": "RGB",
            "layout": "NCHW",
            "resize": [C.DEFAULT_SIZE, C.DEFAULT_SIZE],
            "resize_method": "bilinear, anti-aliased (edgekit.sam2_stream)",
            "scale": "divide 8-bit values by 255 -> float32 in [0, 1]",
            "normalize": "ImageNet mean/std inside the image_encoder graph",
            "pipeline": "edgekit.sam2_stream.SAM2Stream",
            "stream_config": {"image_size": 256, "num_maskmem": 7, "max_obj_ptrs": 16},
            "output": {
                "name": "low_res_masks",
                "postprocess": "pick a mask as the stream does, upsample bilinearly, > 0",
            },
        }

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Held-out J&F / J / F (percent; first-frame mask prompts as DAVIS / SA-V; per motion
        case; and from one click) through the streaming predictor, and 1-click / 5-click mIoU
        (percent) on first frames."""
        graphs = {name: runner.run for name, runner in runners.items()}
        return evaluation.evaluate_graphs(graphs)

    def export_extra(self, graphs: list[GraphSpec]) -> dict[str, Any]:
        """TensorRT profiles: memory frames up to num_maskmem, pointers up to max_obj_ptrs."""
        arch = self.train_config().arch
        return {
            "trt_max_shapes": contract.tensorrt_max_shapes(
                graphs, arch.num_maskmem, arch.max_obj_ptrs
            )
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Rollout parity over PARITY_CLIPS held-out clips (every object prompted by its
        frame-0 mask, then tracked): mean and minimum per-frame mask IoU of candidate vs
        reference, and the largest low-res logit drift."""
        from edgekit.sam2_stream import rollout_parity

        ious, drift = [], []
        for clip in evaluation.heldout_clips()[:PARITY_CLIPS]:
            parity = rollout_parity(
                {name: r.run for name, r in reference.items()},
                {name: r.run for name, r in candidate.items()},
                list(clip.frames),
                evaluation.first_mask_prompts(clip),
                evaluation.stream_config(clip.frames.shape[1]),
            )
            ious += [v for per_object in parity.ious.values() for v in per_object]
            drift.append(max(parity.drift))
        return {
            "rollout_mean_iou": float(np.mean(ious)),
            "rollout_min_iou": float(np.min(ious)),
            "rollout_max_drift": float(np.max(drift)),
        }

    def metrics_table(self, metrics: Mapping[str, float]) -> str:
        """The metrics of ``evaluate`` as the text table ``edgekit eval sam2-edge`` prints."""
        return evaluation.format_table(metrics)


def packaged_weights(config: TrainConfig) -> Path:
    """Where the package would hold the weights of ``config`` (present for the default)."""
    return PACKAGED_WEIGHTS / f"sam2-edge-{config.key()}.pt"


def print_evaluation(runners: Mapping[str, Runner] | None = None) -> dict[str, float]:
    """Evaluate sam2-edge (torch by default) and print the table; returns the metrics."""
    card = SAM2EdgeCard()
    graphs = runners if runners is not None else torch_graph_set(card.model())
    metrics = evaluation.evaluate_graphs(
        {name: getattr(fn, "run", fn) for name, fn in graphs.items()}
    )
    print(evaluation.format_table(metrics))
    return metrics
