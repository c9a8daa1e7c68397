"""What every SAM 2 card shares: golden feeds, calibration, held-out J&F and rollout parity.

A SAM 2 card (sam2-edge, the official SAM 2.1 sizes) exports the five graphs of the SAM 2 graph
contract (edgekit.segmentation.graphs) and is measured through the streaming predictor
(edgekit.segmentation.stream) on the synthetic clips of ``clips.py``: frames are resized to the model's
input size by the stream, so one benchmark serves every input size. Subclasses give the torch
graph set, the GraphSpecs and the input size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.sam2_edge import clips as C
from edgekit.models.sam2_edge import evaluation
from edgekit.segmentation import graphs as contract
from edgekit.segmentation.realclips import REAL_SET_TITLES, REAL_SETS

if TYPE_CHECKING:
    from edgekit.segmentation.stream import StreamConfig

GOLDEN_CLIP = ("heldout", 2)  # a crossing clip: two objects, memory filling up
GOLDEN_FRAME = 5  # the frame whose graph feeds are the golden inputs (5 memory frames)
PARITY_CLIPS = 3  # held-out clips tracked by both graph sets for rollout parity (default)
#: the StreamConfig fields a card may set on top of SAM 2's predictor (inference-time options)
STREAM_OPTION_NAMES = (
    "non_overlap",
    "non_overlap_memory",
    "memory_min_score",
    "memory_min_iou",
    "memory_min_motion",
    "motion_weight",
    "motion_warmup",
    "motion_min_iou",
    "memory_stride",
    "multimask_tracking",
    "mask_threshold",
    "fill_hole_area",
    "remove_sprinkle_area",
    "refine_radius",
    "refine_eps",
    "search_region",
    "box_clip",
)
#: predictors a card streams with (card option ``tracker``): StreamConfig options on top of
#: SAM 2's video predictor. "samurai": SAMURAI's motion-aware mask choice and memory selection
#: at the settings its authors publish (kf_score_weight 0.25, 15 stable frames, IoU floor 0.3;
#: memory frames with predicted IoU > 0.5, object score > 0, motion IoU > 0).
TRACKERS: dict[str, dict[str, Any]] = {
    "sam2": {},
    "samurai": {
        "motion_weight": 0.25,
        "memory_min_iou": 0.5,
        "memory_min_score": 0.0,
        "memory_min_motion": 0.0,
    },
}
#: card options that change only the predictor (a paired comparison runs A's graphs for B)
PREDICTOR_OPTIONS = (*STREAM_OPTION_NAMES, "tracker")


class _Recorder:
    """Wraps a graph callable; keeps a copy of every feed it is called with."""

    def __init__(self, fn: Callable, store: list[Feeds]) -> None:
        self.fn, self.store = fn, store

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        self.store.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return self.fn(feeds)


def record_feeds(
    graphs: Mapping[str, Callable], clips: list[C.Clip], image_size: int | None = None
) -> dict[str, list[Feeds]]:
    """Track ``clips`` (first-mask prompts, plus one mask correction per clip) with ``graphs``
    at ``image_size`` (default: the clips' size); return every feed each graph received, in
    call order."""
    from edgekit.segmentation.stream import Prompt, SAM2Stream

    store: dict[str, list[Feeds]] = {name: [] for name in graphs}
    recorded = {name: _Recorder(fn, store[name]) for name, fn in graphs.items()}
    size = image_size or clips[0].frames.shape[1]
    stream = SAM2Stream(recorded, evaluation.stream_config(size))
    for clip in clips:
        evaluation.track_clip(stream, clip)
        if contract.MASK_PROMPT in graphs:
            stream.add_prompt(clip.object_ids[0], Prompt(mask=clip.masks[-1, 0]))
    return store


class StreamingSAM2Card(ModelCard):
    """Base of the SAM 2 cards: subclasses implement ``torch_graphs``, ``specs`` and
    ``image_size``; everything measured goes through SAM2Stream on the synthetic clips."""

    task: ClassVar[str] = "video-object-segmentation"
    primary_metric: ClassVar[str | None] = "J&F"
    # rollout parity (edgekit.segmentation.rollout.rollout_parity) over parity_clips held-out clips:
    # the exported graph set tracks every object the way torch does, frame after frame
    agreement_floors: ClassVar[dict[str, float]] = {"rollout_mean_iou": 0.9}
    #: how many held-out clips rollout parity tracks (None: all of them)
    parity_clips: ClassVar[int | None] = PARITY_CLIPS
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=2e-3, rtol=1e-3),  # mask logits span about +-30
        "fp16": Tolerance(atol=5e-2, rtol=2e-2),
        "int8": Tolerance(atol=2.0, rtol=0.2),
    }
    num_maskmem: ClassVar[int] = 7
    max_obj_ptrs: ClassVar[int] = 16
    #: card options that pick the measured clips (default: evaluation.HELDOUT_* held-out clips)
    EVAL_OPTIONS: ClassVar[tuple[str, ...]] = (
        "eval_clips", "eval_frames", "eval_set", "eval_sheets",
    )  # fmt: skip
    #: the card option ``edgekit eval --out`` fills: where eval_set=real writes its sheets
    out_option: ClassVar[str] = "eval_sheets"
    #: inference-time StreamConfig options (STREAM_OPTION_NAMES) the card streams with;
    #: empty: SAM 2's video predictor exactly
    stream_options: ClassVar[dict[str, Any]] = {}
    #: the predictor (TRACKERS) unless option ``tracker`` names another
    tracker: ClassVar[str] = "sam2"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._golden: dict[str, Feeds] | None = None
        self._calibration: dict[str, list[Feeds]] | None = None

    # ---- what a subclass gives ---------------------------------------------------------------
    @property
    def image_size(self) -> int:
        """The square input size S of the image_encoder graph."""
        raise NotImplementedError

    def torch_graphs(self) -> dict[str, Callable]:
        """The contract graphs on torch (graph name -> feeds -> outputs)."""
        raise NotImplementedError

    def specs(self, examples: dict[str, dict[str, torch.Tensor]]) -> list[GraphSpec]:
        """The contract graphs as GraphSpecs with ``examples`` as their example inputs."""
        raise NotImplementedError

    def stream_config(self) -> StreamConfig:
        """The predictor settings this card is measured and deployed with: SAM 2.1's memory
        sizes at ``image_size``, the tracker's options (TRACKERS; option ``tracker``, default
        the card's), the card's ``stream_options``, and card options named like one of
        STREAM_OPTION_NAMES on top (e.g. ``--option memory_min_iou=null``)."""
        from edgekit.segmentation.stream import StreamConfig

        tracker = str(self.options.get("tracker", self.tracker))
        if tracker not in TRACKERS:
            raise InputError(
                f"{self.name}: unknown tracker '{tracker}'; expected one of {', '.join(TRACKERS)}"
            )
        chosen = dict(TRACKERS[tracker]) | dict(self.stream_options)
        chosen |= {k: v for k, v in self.options.items() if k in STREAM_OPTION_NAMES}
        fields = StreamConfig.__dataclass_fields__
        bad = sorted(k for k in chosen if k not in fields)
        if bad:  # pragma: no cover - a card's own stream_options naming no field
            raise InputError(f"{self.name}: stream options {bad} are not StreamConfig fields")
        try:
            return evaluation.stream_config(self.image_size, **chosen)
        except InputError as exc:
            if not TRACKERS[tracker]:
                raise
            raise InputError(
                f"{exc} (tracker '{tracker}' sets {', '.join(TRACKERS[tracker])}; "
                "--option tracker=sam2 starts from SAM 2's predictor instead)"
            ) from None

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """The five contract graphs; example inputs are the golden (recorded, real) feeds."""
        examples = {
            name: {k: torch.from_numpy(v) for k, v in feeds.items()}
            for name, feeds in self.golden_inputs().items()
        }
        return self.specs(examples)

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Per graph, the feeds it got on frame GOLDEN_FRAME of a held-out clip (the mask prompt
        graph: its one call), recorded from the torch stream."""
        if self._golden is None:
            split, index = GOLDEN_CLIP
            clip = C.make_clip(split, index, frames=GOLDEN_FRAME + 1)
            store = record_feeds(self.torch_graphs(), [clip], self.image_size)
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
        """Per graph, up to ``limit`` feeds recorded while tracking training clips (one tracking
        pass records every graph's feeds; an int8 export asks once per graph)."""
        if self._calibration is None:
            clips = C.clip_set("train", 6, frames=12, start=10_000)
            self._calibration = record_feeds(self.torch_graphs(), clips, self.image_size)
        out = {}
        for name, feeds in self._calibration.items():
            step = max(1, len(feeds) // limit)
            out[name] = feeds[::step][:limit]
        return out

    def preprocessing(self) -> dict[str, Any]:
        s = self.image_size
        config = self.stream_config()
        return {
            "color": "RGB",
            "layout": "NCHW",
            "resize": [s, s],
            "resize_method": "bilinear, anti-aliased (edgekit.segmentation.stream)",
            "scale": "divide 8-bit values by 255 -> float32 in [0, 1]",
            "normalize": "ImageNet mean/std inside the image_encoder graph",
            "pipeline": "edgekit.segmentation.stream.SAM2Stream",
            "stream_config": {
                "image_size": s,
                "num_maskmem": self.num_maskmem,
                "max_obj_ptrs": self.max_obj_ptrs,
                **{name: getattr(config, name) for name in STREAM_OPTION_NAMES},
            },
            "output": {
                "name": "low_res_masks",
                "postprocess": "pick a mask as the stream does, upsample bilinearly, > 0",
            },
        }

    # ---- measuring -------------------------------------------------------------------------
    def heldout(self) -> tuple[C.Clip, ...]:
        """The clips this card is measured on: options ``eval_clips`` (default
        evaluation.HELDOUT_CLIPS) and ``eval_frames`` (default evaluation.HELDOUT_FRAMES) of
        ``eval_set``: "heldout" (default, evaluation.heldout_clips) or "calibration" (the
        clips inference-time options are chosen on, evaluation.calibration_clips)."""
        count = self.options.get("eval_clips", evaluation.HELDOUT_CLIPS)
        frames = self.options.get("eval_frames", evaluation.HELDOUT_FRAMES)
        which = str(self.options.get("eval_set", "heldout"))
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in (count, frames))
        if not integers or count < 1 or frames < 3:
            raise InputError(
                "eval_clips must be an integer >= 1 and eval_frames an integer >= 3, "
                f"got {count!r}, {frames!r}"
            )
        sets = {"heldout": evaluation.heldout_clips, "calibration": evaluation.calibration_clips}
        if which in REAL_SETS:
            raise InputError(
                f"eval_set={which} (recorded video, hand-drawn boxes) is scored by `edgekit "
                "eval` (and its --against); rollout parity uses the synthetic clips"
            )
        if which not in sets:
            raise InputError(
                f"unknown eval_set '{which}'; expected one of {', '.join([*sets, *REAL_SETS])}"
            )
        return sets[which](count, frames)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Held-out J&F / J / F (percent; first-frame mask prompts as DAVIS / SA-V; per motion
        case; and from one click) through the streaming predictor (``stream_config()``), and
        1-click / 5-click mIoU (percent) on first frames."""
        graphs = {name: runner.run for name, runner in runners.items()}
        if self.options.get("eval_set") in REAL_SETS:
            return self.evaluate_real(graphs)
        return evaluation.evaluate_graphs(
            graphs, self.heldout(), self.image_size, self.stream_config()
        )

    def real_clips(self) -> tuple[Any, ...]:
        """The recorded clips of ``eval_set`` (realclips.REAL_SETS), the first
        ``eval_clips`` by name (default all)."""
        from edgekit.segmentation.realclips import real_clips

        clips = real_clips(which=str(self.options["eval_set"]))
        count = self.options.get("eval_clips", len(clips))
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise InputError(f"eval_clips must be an integer >= 1, got {count!r}")
        return clips[:count]

    def evaluate_real(self, graphs: Mapping[str, Callable]) -> dict[str, float]:
        """Box metrics on the recorded clips (``real_evaluation``; option ``eval_sheets``: a
        directory for a PNG sheet per clip; ``eval_clips``: the first N clips by name): each
        object prompted by its hand-drawn frame-0 box, streamed with ``stream_config()``."""
        from pathlib import Path

        from edgekit.models.sam2_edge import real_evaluation

        sheets = self.options.get("eval_sheets")
        results = real_evaluation.evaluate_real(
            graphs, self.stream_config(), self.real_clips(), Path(sheets) if sheets else None
        )
        return real_evaluation.summary(results)

    def against(self, options: Mapping[str, Any]) -> StreamingSAM2Card:
        """This card with ``options`` on top of its own: B of a paired comparison (A = self).

        The clips are A's, so ``options`` may not name EVAL_OPTIONS (InputError)."""
        shared = sorted(k for k in options if k in self.EVAL_OPTIONS)
        if shared:
            raise InputError(
                f"--against cannot change {', '.join(shared)}: both sides are measured on the "
                "same clips; set them with --option"
            )
        if not options:
            raise InputError("--against needs at least one KEY=VALUE option for side B")
        return type(self)(**{**self.options, **options})

    def compare(
        self,
        runners: Mapping[str, Runner],
        other: StreamingSAM2Card,
        other_runners: Mapping[str, Runner],
    ) -> dict[str, dict[str, float]]:
        """Paired comparison on this card's clips: A = ``runners`` streamed with this card's
        ``stream_config()``, B = ``other_runners`` with ``other``'s. Synthetic sets: rows "J&F"
        and "J&F_<case>", each segmetrics.paired_difference of per-object J&F (percent); real
        sets: rows "box IoU" and one per clip, of per-annotated-frame box IoU (percent)."""
        if self.options.get("eval_set") in REAL_SETS:
            from edgekit.models.sam2_edge.real_evaluation import compare_real

            return compare_real(
                ({name: r.run for name, r in runners.items()}, self.stream_config()),
                ({name: r.run for name, r in other_runners.items()}, other.stream_config()),
                self.real_clips(),
            )
        return evaluation.compare_paired(
            ({name: r.run for name, r in runners.items()}, self.stream_config()),
            ({name: r.run for name, r in other_runners.items()}, other.stream_config()),
            self.heldout(),
        )

    def export_extra(self, graphs: list[GraphSpec]) -> dict[str, Any]:
        """TensorRT profiles: memory frames up to num_maskmem, pointers up to max_obj_ptrs."""
        return {
            "trt_max_shapes": contract.tensorrt_max_shapes(
                graphs, self.num_maskmem, self.max_obj_ptrs
            )
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Rollout parity over the first ``parity_clips`` held-out clips (every object prompted
        by its frame-0 mask, then tracked): mean and minimum per-frame mask IoU of candidate vs
        reference, and the largest low-res logit drift."""
        from edgekit.segmentation.rollout import rollout_parity

        ious, drift = [], []
        for clip in self.heldout()[: self.parity_clips]:
            parity = rollout_parity(
                {name: r.run for name, r in reference.items()},
                {name: r.run for name, r in candidate.items()},
                list(clip.frames),
                evaluation.first_mask_prompts(clip),
                self.stream_config(),
            )
            ious += [v for per_object in parity.ious.values() for v in per_object]
            drift.append(max(parity.drift))
        return {
            "rollout_mean_iou": float(np.mean(ious)),
            "rollout_min_iou": float(np.min(ious)),
            "rollout_max_drift": float(np.max(drift)),
        }

    def metrics_table(self, metrics: Mapping[str, float]) -> str:
        """The metrics of ``evaluate`` as the text table ``edgekit eval NAME`` prints."""
        if self.options.get("eval_set") in REAL_SETS:
            from edgekit.models.sam2_edge.real_evaluation import format_real_table

            which = REAL_SET_TITLES[self.options["eval_set"]]
            title = f"{self.name}, {which} clips (hand-drawn boxes; prompt: frame-0 box)"
            return format_real_table(metrics, title)
        return evaluation.format_table(metrics, f"{self.name}, held-out set")
