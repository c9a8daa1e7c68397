"""Streaming SAM 2 segmentation over live frames, with a bounded memory bank (a pipeline).

``SAM2Stream`` runs over a *graph set*: graph name -> callable ``feeds -> outputs`` on numpy
arrays, the graphs of the contract in ``edgekit.segmentation.graphs`` (a torch model wrapped by
``edgekit.models.sam2.torch_graph_set``, or runtime sessions from
``edgekit.segmentation.run.graph_set_from_files``). Prompts and their checks:
``edgekit.segmentation.prompts``.
The predictor itself is numpy only.

Per object the memory bank holds its conditioning (prompted) frames (all of them, as SAM 2;
at most ``max_cond_frames`` when set), the ``num_maskmem - 1`` most recent tracked frames (with
``memory_stride`` r > 1: the (num_maskmem - 2) * r + 1 most recent, of which the strided ones
are read) and the object pointers of the last ``max_obj_ptrs - 1`` frames: per-frame cost and
memory stay flat however long the stream runs (a stream gains conditioning frames only by
prompts). Memory features are stored rounded to bfloat16 by default (half the bytes; SAM 2's
own video predictor stores them so too). Frames are resized to the model's input as
``StreamConfig.resize`` says (``edgekit.segmentation.arrays.frame_to_input``).

    stream = SAM2Stream(graphs, StreamConfig(image_size=1024))
    first = stream.start(frame0, {1: Prompt(points=[[320, 240]], labels=[1])})
    for frame in camera:
        result = stream.track(frame)      # result.masks[1]: (H, W) bool
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation import graphs as G
from edgekit.segmentation.arrays import (  # noqa: F401 - re-exported: part of this module's API
    confine_to_box,
    fill_holes,
    frame_to_input,
    from_bfloat16_bits,
    non_overlapping_logits,
    refine_mask,
    resize_bilinear,
    to_bfloat16_bits,
)
from edgekit.segmentation.config import StreamConfig
from edgekit.segmentation.motion import MotionState, choose_with_motion
from edgekit.segmentation.prompts import ParsedPrompt, Prompt, check_frame, parse_prompt

GraphFn = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]


@dataclass
class FrameResult:
    """Per object id: ``masks`` (H, W) bool at frame resolution, ``object_scores`` (> 0: the
    object is visible; its mask is empty otherwise) and ``low_res_logits`` (4h, 4w) float32."""

    frame_index: int
    masks: dict[int, np.ndarray]
    object_scores: dict[int, float]
    low_res_logits: dict[int, np.ndarray]


@dataclass
class _Memory:
    frame: int
    feats: np.ndarray  # (Cm, hm, wm): uint16 bfloat16 bits or float32
    ptr: np.ndarray  # (C,)


@dataclass
class _Object:
    obj_id: int
    cond: OrderedDict[int, _Memory]
    recent: deque[_Memory]
    ptrs: deque[tuple[int, np.ndarray]]
    low: np.ndarray | None = None  # current frame's chosen low-res logits
    score: float = 0.0
    pix_feat: np.ndarray | None = None  # current frame's memory-conditioned features
    last_frame: int = -1
    motion: MotionState = field(default_factory=MotionState)  # StreamConfig.motion_weight


class StreamState:
    """What every streaming predictor answers: its tracked ids and the current frame index."""

    _objects: Mapping[int, Any]
    _frame_index: int

    @property
    def object_ids(self) -> list[int]:
        return list(self._objects)

    @property
    def frame_index(self) -> int:
        """Index of the last frame given to start / track (-1 before start)."""
        return self._frame_index


def check_prompt_map(prompts: Any) -> None:
    """InputError unless ``prompts`` is a non-empty mapping object id -> prompt."""
    if not isinstance(prompts, Mapping) or not prompts:
        raise InputError("start needs prompts: a non-empty mapping object id -> Prompt")


class SAM2Stream(StreamState):
    """SAM 2 video object segmentation on a live stream of (H, W, 3) uint8 RGB frames."""

    def __init__(self, graphs: Mapping[str, GraphFn], config: StreamConfig | None = None) -> None:
        G.check_graph_set(graphs)
        self.graphs = dict(graphs)
        self.config = config or StreamConfig()
        self.timings: dict[str, float] = {}  # seconds per graph on the last frame (or prompt)
        self._reset()

    # ---- public API ----------------------------------------------------------------------------
    def start(
        self, frame: np.ndarray, prompts: Mapping[int, Prompt | Mapping[str, Any]]
    ) -> FrameResult:
        """Begin a stream on ``frame`` with one prompt per object id; forget any previous one."""
        hw = check_frame(frame)
        check_prompt_map(prompts)
        parsed = {self._check_id(k): self._parse(p, hw) for k, p in prompts.items()}
        self._reset()
        self._begin_frame(frame, hw)
        for obj_id, prompt in parsed.items():
            self._objects[obj_id] = self._new_object(obj_id)
            self._apply_prompt(self._objects[obj_id], prompt, initial=True)
        return self._result()

    def track(self, frame: np.ndarray) -> FrameResult:
        """Segment every object on the next ``frame`` and add the frame to their memory."""
        if self._enc is None:
            raise InputError("track called before start: give the first frame and prompts first")
        hw = check_frame(frame)
        self._begin_frame(frame, hw)
        t = self._frame_index
        decoded = {}
        for obj_id, obj in self._objects.items():
            obj.pix_feat = self._condition(obj, t)
            decoded[obj_id] = self._decode(
                obj.pix_feat, None, None, self.config.multimask_tracking, motion=obj.motion
            )
        if self.config.non_overlap_memory and len(decoded) > 1:
            constrained = non_overlapping_logits(np.stack([d[0] for d in decoded.values()]))
            decoded = {
                obj_id: (constrained[i], *d[1:]) for i, (obj_id, d) in enumerate(decoded.items())
            }
        for obj_id, (low, score, ptr, iou) in decoded.items():
            obj = self._objects[obj_id]
            self._remember(obj, low, score, ptr, binarize=False, conditioning=False, iou=iou)
        return self._result()

    def add_object(
        self, obj_id: int, prompt: Prompt | Mapping[str, Any] | None = None, **fields: Any
    ) -> FrameResult:
        """Start tracking a new object from a prompt on the current frame."""
        if self._enc is None:
            raise InputError("add_object called before start")
        obj_id = self._check_id(obj_id)
        if obj_id in self._objects:
            raise InputError(f"object id {obj_id} is already tracked; use add_prompt to correct it")
        parsed = self._parse(prompt if prompt is not None else fields, self._hw)
        obj = self._new_object(obj_id)
        self._apply_prompt(obj, parsed, initial=True)
        self._objects[obj_id] = obj
        return self._result()

    def add_prompt(
        self, obj_id: int, prompt: Prompt | Mapping[str, Any] | None = None, **fields: Any
    ) -> FrameResult:
        """Correct a tracked object on the current frame with new points / box / mask.

        Points refine the current mask (its logits are fed back as a mask prompt); the result
        replaces the frame's memory entry for the object.
        """
        if self._enc is None:
            raise InputError("add_prompt called before start")
        if obj_id not in self._objects:
            raise InputError(f"unknown object id {obj_id!r}; tracked ids: {self.object_ids}")
        parsed = self._parse(prompt if prompt is not None else fields, self._hw)
        obj = self._objects[obj_id]
        self._apply_prompt(obj, parsed, initial=self._frame_index in obj.cond)
        return self._result()

    def remove_object(self, obj_id: int) -> None:
        """Stop tracking ``obj_id`` and drop its memory."""
        if obj_id not in self._objects:
            raise InputError(f"unknown object id {obj_id!r}; tracked ids: {self.object_ids}")
        del self._objects[obj_id]

    def memory_stats(self) -> dict[int, dict[str, int]]:
        """Per object: conditioning frames, recent frames, object pointers and bytes held."""
        stats = {}
        for obj_id, obj in self._objects.items():
            mems = [*obj.cond.values(), *obj.recent]
            nbytes = sum(m.feats.nbytes + m.ptr.nbytes for m in mems)
            nbytes += sum(p.nbytes for _, p in obj.ptrs)
            stats[obj_id] = {
                "cond_frames": len(obj.cond),
                "recent_frames": len(obj.recent),
                "pointers": len(obj.cond) + len(obj.ptrs),
                "bytes": nbytes,
            }
        return stats

    # ---- frames and prompts --------------------------------------------------------------------
    def _reset(self) -> None:
        self._objects: OrderedDict[int, _Object] = OrderedDict()
        self._enc: dict[str, np.ndarray] | None = None
        self._hw = (0, 0)
        self._guide: np.ndarray | None = None
        self._frame_index = -1
        self._mem_pos: np.ndarray | None = None

    def _begin_frame(self, frame: np.ndarray, hw: tuple[int, int]) -> None:
        image = frame_to_input(frame, self.config.image_size, self.config.resize)  # (3, S, S)
        self.timings = {}
        self._enc = dict(self._run(G.IMAGE_ENCODER, {"image": np.ascontiguousarray(image[None])}))
        self._guide = image  # (3, s, s) in [0, 1]: the guide of the output refinement
        self._hw = hw
        self._frame_index += 1

    def _check_id(self, obj_id: Any) -> int:
        if isinstance(obj_id, bool) or not isinstance(obj_id, (int, np.integer)):
            raise InputError(f"object ids must be integers, got {obj_id!r}")
        return int(obj_id)

    def _new_object(self, obj_id: int) -> _Object:
        cfg = self.config
        return _Object(
            obj_id,
            OrderedDict(),
            deque(maxlen=max((cfg.num_maskmem - 2) * cfg.memory_stride + 1, 1)),
            deque(maxlen=cfg.max_obj_ptrs - 1),
        )

    def _parse(self, prompt: Prompt | Mapping[str, Any], hw: tuple[int, int]) -> ParsedPrompt:
        return parse_prompt(prompt, hw, self.config.image_size)

    # ---- one object on the current frame ------------------------------------------------------
    def _apply_prompt(self, obj: _Object, prompt: ParsedPrompt, initial: bool) -> None:
        enc = self._enc
        obj.motion = MotionState()  # a prompt restarts the motion model from the next frame
        if prompt.mask is not None:
            if G.MASK_PROMPT not in self.graphs:
                raise InputError(f"mask prompts need the '{G.MASK_PROMPT}' graph in the graph set")
            s4 = self.config.image_size // 4
            logits = prompt.mask * np.float32(20.0) - np.float32(10.0)
            low = resize_bilinear(logits, (s4, s4), antialias=True)
            mask_input = self._run(G.MASK_PROMPT, {"mask": prompt.mask[None, None]})["mask_input"]
            _, _, ptr, _ = self._decode(enc["image_embed"], None, None, False, mask_input, raw=True)
            as_cond = initial or self.config.corrections_as_conditioning
            self._remember(obj, low, 10.0, ptr, binarize=True, conditioning=as_cond)
            return
        if initial:
            pix = enc["image_embed_nomem"]
        else:
            pix = (
                obj.pix_feat
                if obj.pix_feat is not None
                else self._condition(obj, self._frame_index)
            )
        prev = None
        if obj.low is not None and obj.last_frame == self._frame_index:
            prev = np.clip(obj.low, -G.PROMPT_LOGIT_CLAMP, G.PROMPT_LOGIT_CLAMP)[None, None]
        n_points = prompt.labels.shape[1]
        multimask = n_points <= self.config.multimask_max_points
        low, score, ptr, _ = self._decode(pix, prompt.coords, prompt.labels, multimask, prev)
        if self.config.box_clip:
            low = confine_to_box(low, prompt.coords[0], prompt.labels[0], self.config.image_size)
        as_cond = initial or self.config.corrections_as_conditioning
        self._remember(obj, low, score, ptr, binarize=True, conditioning=as_cond)

    def _condition(self, obj: _Object, t: int) -> np.ndarray:
        """Memory attention for ``obj`` on frame ``t`` (memory from frames before t)."""
        cfg = self.config
        by_rank = cfg.selects_memory
        mems, idx = [], []
        for m in obj.cond.values():
            if m.frame < t:
                mems.append(m)
                idx.append(cfg.num_maskmem - 1)
        recent = sorted(obj.recent, key=lambda m: -m.frame)  # most recent first
        slots = memory_slots(t, cfg.num_maskmem, cfg.memory_stride)  # frame -> temporal slot
        for rank, m in reversed(list(enumerate(recent, start=1))):
            t_rel = rank if by_rank else slots.get(m.frame, 0)
            if 1 <= t_rel <= cfg.num_maskmem - 1:
                mems.append(m)
                idx.append(t_rel - 1)
        ptrs, dists = [], []
        for m in obj.cond.values():
            if m.frame <= t:
                ptrs.append(m.ptr)
                dists.append(t - m.frame)
        for rank, (frame, ptr) in enumerate(sorted(obj.ptrs, key=lambda p: -p[0]), start=1):
            dist = rank if by_rank else t - frame
            if 1 <= dist <= cfg.max_obj_ptrs - 1:
                ptrs.append(ptr)
                dists.append(dist)
        if not mems or self._mem_pos is None:
            raise InputError(f"object {obj.obj_id} has no memory before frame {t}")
        feeds = {
            "image_embed": self._enc["image_embed"],
            "image_pos": self._enc["image_pos"],
            "mem_feats": np.stack([self._load(m.feats) for m in mems]),
            "mem_pos": np.repeat(self._mem_pos, len(mems), axis=0),
            "mem_tpos_idx": np.asarray(idx, dtype=np.int64),
            "obj_ptrs": np.stack(ptrs).astype(np.float32),
            "obj_ptr_tpos": np.asarray(dists, np.float32) / np.float32(cfg.max_obj_ptrs - 1),
        }
        return self._run(G.MEMORY_ATTENTION, feeds)["pix_feat"]

    def _decode(
        self,
        pix: np.ndarray,
        coords: np.ndarray | None,
        labels: np.ndarray | None,
        multimask: bool,
        mask_input: np.ndarray | None = None,
        raw: bool = False,
        motion: MotionState | None = None,
    ) -> tuple[np.ndarray, float, np.ndarray, float]:
        """Run the decoder, choose a mask -> (low-res logits (4h, 4w), score, pointer (C,),
        the chosen mask's predicted IoU). ``motion``: a tracked frame's motion state, used to
        choose among the multimask outputs when ``motion_weight`` is set."""
        enc = self._enc
        s4 = enc["feat_s0"].shape[-1]
        if coords is None:
            coords = np.zeros((1, 1, 2), np.float32)
            labels = np.full((1, 1), G.LABEL_PADDING, np.int64)
        feeds = {
            "pix_feat": pix,
            "feat_s0": enc["feat_s0"],
            "feat_s1": enc["feat_s1"],
            "point_coords": coords,
            "point_labels": labels,
            "mask_input": np.zeros((1, 1, s4, s4), np.float32)
            if mask_input is None
            else mask_input,
            "has_mask_input": np.array([0.0 if mask_input is None else 1.0], np.float32),
        }
        out = self._run(G.MASK_DECODER, feeds)
        masks, iou = out["low_res_masks"][0], out["iou_pred"][0]
        ptrs, score = out["obj_ptrs"][0], float(out["object_score_logits"].reshape(-1)[0])
        cfg = self.config
        if multimask and motion is not None and cfg.motion_weight is not None:
            best = 1 + choose_with_motion(
                motion, masks[1:], iou[1:], cfg.motion_weight, cfg.motion_warmup,
                cfg.motion_min_iou,
            )  # fmt: skip
        else:
            best = 1 + int(np.argmax(iou[1:]))
        if multimask:
            choice, ptr = best, ptrs[best]
        else:
            choice, ptr = (0 if self._stable(masks[0]) else best), ptrs[0]
        low = masks[choice].astype(np.float32)
        if score <= 0 and not raw:
            low = np.full_like(low, G.NO_OBJECT_LOGIT)
        return low, score, np.array(ptr, np.float32), float(iou[choice])

    def _stable(self, logits: np.ndarray) -> bool:
        delta = self.config.stability_delta
        union = np.count_nonzero(logits > -delta)
        if union == 0:
            return True
        return np.count_nonzero(logits > delta) / union >= self.config.stability_thresh

    def _remember(
        self,
        obj: _Object,
        low: np.ndarray,
        score: float,
        ptr: np.ndarray,
        binarize: bool,
        conditioning: bool,
        iou: float | None = None,
    ) -> None:
        """Encode the frame's memory for ``obj`` and store it (replacing this frame's entry).

        ``iou``: the tracked frame's predicted IoU; such a frame enters the recent bank only if
        it passes the memory selection. None: a prompted frame (a correction), always kept."""
        t = self._frame_index
        feeds = {
            "image_embed": self._enc["image_embed"],
            "mask_logits": low[None, None],
            "binarize": np.array([1.0 if binarize else 0.0], np.float32),
            "object_score_logits": np.array([[score]], np.float32),
        }
        out = self._run(G.MEMORY_ENCODER, feeds)
        if self._mem_pos is None:
            self._mem_pos = np.array(out["mem_pos"], np.float32)
        memory = _Memory(t, self._store(out["mem_feats"][0]), ptr)
        _drop_frame(obj, t)
        cfg = self.config
        motion = obj.motion.last_score
        selected = iou is None or (
            (cfg.memory_min_score is None or score > cfg.memory_min_score)
            and (cfg.memory_min_iou is None or iou > cfg.memory_min_iou)
            and (cfg.memory_min_motion is None or motion is None or motion > cfg.memory_min_motion)
        )
        if conditioning:
            obj.cond[t] = memory
            while cfg.max_cond_frames is not None and len(obj.cond) > cfg.max_cond_frames:
                _, oldest = obj.cond.popitem(last=False)
                _demote(obj, oldest)
        elif selected:
            obj.recent.append(memory)
            obj.ptrs.append((t, ptr))
        obj.low, obj.score, obj.last_frame = low, score, t

    def _store(self, feats: np.ndarray) -> np.ndarray:
        if self.config.memory_dtype == "float32":
            return np.array(feats, np.float32)
        return to_bfloat16_bits(feats)

    def _load(self, feats: np.ndarray) -> np.ndarray:
        return from_bfloat16_bits(feats) if feats.dtype == np.uint16 else feats

    def _run(self, graph: str, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        start = time.perf_counter()
        out = self.graphs[graph](feeds)
        self.timings[graph] = self.timings.get(graph, 0.0) + time.perf_counter() - start
        return out

    def _result(self) -> FrameResult:
        """The current frame's outputs: low-res logits after the output-only options
        (non-overlap, hole filling), upsampled to the frame and thresholded at
        ``mask_threshold`` (0 in SAM 2), or with ``refine_radius`` > 0 refined at the encoder's
        input size first (``refine_mask``); an object whose score is <= 0 has an empty mask."""
        cfg = self.config
        h, w = self._hw
        ids = list(self._objects)
        lows = [self._objects[i].low.astype(np.float32) for i in ids]
        if (cfg.non_overlap or cfg.non_overlap_memory) and len(lows) > 1:
            lows = list(non_overlapping_logits(np.stack(lows)))
        if cfg.fill_hole_area > 0 or cfg.remove_sprinkle_area > 0:
            lows = [fill_holes(low, cfg.fill_hole_area, cfg.remove_sprinkle_area) for low in lows]
        masks, scores, logits = {}, {}, {}
        for obj_id, low in zip(ids, lows, strict=True):
            obj = self._objects[obj_id]
            if obj.score > 0 and cfg.refine_radius > 0:
                refined = refine_mask(
                    low, self._guide, cfg.refine_radius, cfg.refine_eps, cfg.mask_threshold
                )
                masks[obj_id] = resize_bilinear(refined, (h, w), antialias=False) > 0
            elif obj.score > 0:
                up = resize_bilinear(low, (h, w), antialias=False)
                masks[obj_id] = up > np.float32(cfg.mask_threshold)
            else:
                masks[obj_id] = np.zeros((h, w), bool)
            scores[obj_id] = obj.score
            logits[obj_id] = np.array(low, np.float32, copy=True)
        return FrameResult(self._frame_index, masks, scores, logits)


def memory_slots(t: int, num_maskmem: int, stride: int = 1) -> dict[int, int]:
    """{frame: temporal slot} of the recent memory frames frame ``t`` attends to: slot 1 is
    frame t - 1, slot i >= 2 is ((t - 2) // stride) * stride - (i - 2) * stride (SAM 2's
    ``memory_temporal_stride_for_eval``; stride 1: frame t - i). Frames < 0 are left out."""
    slots = {}
    for i in range(1, num_maskmem):
        frame = t - 1 if i == 1 else ((t - 2) // stride) * stride - (i - 2) * stride
        if frame >= 0:
            slots.setdefault(frame, i)
    return slots


def _demote(obj: _Object, memory: _Memory) -> None:
    """A conditioning frame beyond ``max_cond_frames`` becomes a tracked frame: its memory and
    pointer join the recent ones (in frame order, the bounds kept), as SAM 2 attends to an
    unselected conditioning frame while it is among the recent frames."""
    recent = sorted([*obj.recent, memory], key=lambda m: m.frame)
    obj.recent = deque(recent[-obj.recent.maxlen :], maxlen=obj.recent.maxlen)
    ptrs = sorted([*obj.ptrs, (memory.frame, memory.ptr)], key=lambda p: p[0])
    obj.ptrs = deque(ptrs[-obj.ptrs.maxlen :], maxlen=obj.ptrs.maxlen)


def _drop_frame(obj: _Object, t: int) -> None:
    """Remove any memory of frame ``t`` (a correction replaces it)."""
    obj.cond.pop(t, None)
    for m in [m for m in obj.recent if m.frame == t]:
        obj.recent.remove(m)
    for p in [p for p in obj.ptrs if p[0] == t]:
        obj.ptrs.remove(p)


__all__ = [
    "FrameResult",
    "Prompt",
    "SAM2Stream",
    "StreamConfig",
    "fill_holes",
    "non_overlapping_logits",
    "resize_bilinear",
]
