"""Settings of the streaming SAM 2 predictor (edgekit.segmentation.stream): SAM 2.1's by default, plus
the inference-time options a card may choose (memory selection, non-overlap, post-processing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation.arrays import RESIZE_METHODS


@dataclass(frozen=True)
class StreamConfig:
    """Predictor settings; the defaults are SAM 2.1's (``max_obj_ptrs`` 16 for a live stream).

    - ``resize``: how a frame becomes the image encoder's S x S input
      (``edgekit.segmentation.arrays.frame_to_input``). "bilinear-antialias" (default):
      anti-aliased bilinear on float32, as Meta's image predictor (``SAM2ImagePredictor``)
      and what sam2-edge is trained and measured with. "pil-bicubic": PIL's bicubic resize of
      the uint8 frame, bit-exact with Meta's video predictor (``SAM2VideoPredictor`` on a
      folder of JPEG frames); the official ``sam2`` card's default. On frames already S x S
      both are the identity. Output masks are the low-res logits upsampled to the frame
      bilinearly (align_corners=False) in both, as in both of Meta's predictors.
    - ``max_cond_frames``: None (default, Meta's ``max_cond_frames_in_attn=-1``): every
      prompted (conditioning) frame stays in memory. A number n bounds them: the n most
      recent stay conditioning frames; an older one is then treated as a tracked frame (it
      stays in the recent memory and pointers while it is recent enough), as Meta's
      ``select_closest_cond_frames`` does with its unselected frames. Only streams with
      ``corrections_as_conditioning`` gain conditioning frames (one per corrected frame): by
      default a stream keeps one per object (its first prompt).

    Options that depart from SAM 2's video predictor defaults (all off by default):

    - ``non_overlap``: SAM 2's non-overlap constraint on multi-object outputs (its predictor's
      ``non_overlap_masks``): on every pixel only the object with the highest low-res logit
      keeps its logit; the others' are clamped to at most -10 there. Output masks only.
    - ``non_overlap_memory``: the same constraint on the masks the memory encoder sees (SAM 2's
      ``non_overlap_masks_for_mem_enc``), so one object's drift onto another is not written
      into its memory. Implies ``non_overlap`` for the outputs.
    - ``memory_min_score``: memory selection by object score (as SAMURAI / SAM2Long select
      memory frames by quality instead of recency). None: every tracked frame enters the
      recent bank and its pointer joins the pointers (SAM 2). A number: only tracked frames
      whose object score is above it do; the bank then holds the ``num_maskmem - 1`` most
      recent *selected* frames and pointers, placed at temporal slots by rank (the i-th most
      recent selected frame takes the slot of distance i), so frames where the object was
      hidden or lost do not push its appearance out of memory.
    - ``memory_min_iou``: the same selection by the IoU head's prediction for the chosen mask
      (SAMURAI's mask-affinity test): only tracked frames whose predicted IoU is above it
      enter the bank. Combined with ``memory_min_score``, a frame must pass both.
    - ``motion_weight``: SAMURAI's motion-aware mask selection (``edgekit.segmentation.motion``;
      SAMURAI's ``kf_score_weight``, 0.25 in its configs). None: off (SAM 2). A weight w in
      [0, 1]: a Kalman filter follows each object's box; once it has been corrected
      ``motion_warmup`` frames in a row (SAMURAI's ``stable_frames_threshold``, 15), a tracked
      frame takes the multimask output maximising w * IoU(predicted box, mask box) + (1 - w) *
      predicted IoU. The filter is corrected with the chosen box while that mask's predicted
      IoU is above ``motion_min_iou`` (``stable_ious_threshold``, 0.3) and restarts otherwise.
      Needs ``multimask_tracking``.
    - ``memory_min_motion``: memory selection by the chosen mask's motion IoU (SAMURAI's
      ``memory_bank_kf_score_threshold``): a frame scored by the motion model enters the bank
      only if its box's IoU with the predicted box is above it (frames before the filter is
      stable pass). Placed by rank, as ``memory_min_score``.
    - ``multimask_tracking``: tracked frames take the best of the 3 multimask outputs by
      predicted IoU (SAM 2's ``multimask_output_for_tracking``, True); False: the single-mask
      output (token 0) and its pointer.
    - ``mask_threshold``: output masks are the upsampled logits above it (SAM 2's
      ``mask_threshold``, 0.0). Memory is not affected.
    - ``fill_hole_area``: SAM 2.1's video post-processing (``fill_holes_in_mask_scores``, 8
      in Meta's ``build_sam2_video_predictor`` when its CUDA kernel is built): background
      components (holes, 8-connected) of at most this many low-res pixels become foreground
      in the output masks. 0: off. Memory is not affected.
    - ``remove_sprinkle_area``: the other half of SAM 2's image post-processing
      (``max_sprinkle_area``): foreground components of at most this many low-res pixels
      become background in the output masks. 0: off.
    - ``memory_stride``: SAM 2's ``memory_temporal_stride_for_eval`` (1): the previous frame
      always takes temporal slot 1; slot i >= 2 takes the frame ((t - 2) // r) * r - (i - 2) * r,
      so the recent memory reaches back about (num_maskmem - 2) * r frames (a short occlusion
      does not fill it). The bank keeps the frames of that window, still bounded. Not combined
      with memory selection (which places frames by rank).
    - ``refine_radius`` / ``refine_eps``: image-guided refinement of the output masks (0: off).
      Each visible object's logits, upsampled to the encoder's input, become probabilities
      that a colour guided filter (He et al., window radius ``refine_radius`` input pixels,
      ridge ``refine_eps``) moves onto the frame's colour edges; the mask is the filtered
      probability above sigmoid(``mask_threshold``) (``edgekit.segmentation.arrays.refine_mask``).
      Output masks only: memory and ``low_res_logits`` are not affected.
    - ``search_region``: None (default): every object is tracked on the whole frame. A factor
      k >= 1: each object is tracked in its own window of the frame, of side
      max(k * sqrt(area of its first box), twice the box's longer side, ``image_size``), moved
      onto its previous mask every frame (``edgekit.segmentation.region``; OSTrack's k is 4).
      Small objects in large frames keep their pixels; large objects and small frames are
      tracked exactly as on the whole frame. Each object then costs one image encoding.
    - ``box_clip``: False (default, SAM 2): a box prompt's mask may reach outside the box.
      True: the mask a box prompt yields is confined to the box (the positive logits of
      low-res cells that do not overlap it are negated), in that frame's output and memory, so an
      object whose first mask spills onto a neighbour does not carry the neighbour in memory.
    """

    image_size: int = 1024
    num_maskmem: int = 7
    max_obj_ptrs: int = 16
    max_cond_frames: int | None = None  # None: all (Meta's default); n: the n most recent
    memory_dtype: str = "bfloat16"  # "bfloat16" | "float32": how memory features are kept
    multimask_max_points: int = 1  # up to this many points: best of the 3 multimask outputs
    stability_delta: float = 0.05
    stability_thresh: float = 0.98
    corrections_as_conditioning: bool = False  # a corrected frame joins the conditioning frames
    # inference-time options beyond SAM 2's video predictor defaults (see StreamConfig docs)
    non_overlap: bool = False
    non_overlap_memory: bool = False
    memory_min_score: float | None = None
    memory_min_iou: float | None = None
    multimask_tracking: bool = True
    motion_weight: float | None = None
    motion_warmup: int = 15
    motion_min_iou: float = 0.3
    memory_min_motion: float | None = None
    mask_threshold: float = 0.0
    fill_hole_area: int = 0
    remove_sprinkle_area: int = 0
    memory_stride: int = 1
    refine_radius: int = 0
    refine_eps: float = 1e-4  # sam2-edge's choice (chosen on its calibration clips)
    resize: str = "bilinear-antialias"  # "bilinear-antialias" | "pil-bicubic" (see above)
    search_region: float | None = None  # None: the whole frame; k: a window per object
    box_clip: bool = False  # True: a box prompt's mask stays inside the box

    def __post_init__(self) -> None:
        if self.image_size < 32 or self.num_maskmem < 1 or self.max_obj_ptrs < 2:
            raise InputError(
                f"bad StreamConfig {self}: image_size >= 32, num_maskmem >= 1, max_obj_ptrs >= 2"
            )
        if self.memory_dtype not in ("bfloat16", "float32"):
            raise InputError(f"bad StreamConfig {self}: memory_dtype bfloat16 | float32")
        if self.max_cond_frames is not None:
            self._check_int("max_cond_frames", 1, "None (keep all, SAM 2) or an integer >= 1")
        if self.resize not in RESIZE_METHODS:
            raise InputError(
                f"bad StreamConfig resize={self.resize!r}: expected one of "
                f"{', '.join(RESIZE_METHODS)}"
            )
        for name in ("fill_hole_area", "remove_sprinkle_area"):
            self._check_int(name, 0, "an integer area in low-res pixels >= 0 (0: off)")
        self._check_int("memory_stride", 1, "an integer >= 1 (1: SAM 2)")
        stride = self.memory_stride
        if stride > 1 and self.selects_memory:
            raise InputError(
                f"bad StreamConfig: memory_stride={stride} places memory frames by time, memory "
                "selection (memory_min_score / memory_min_iou / memory_min_motion) by rank; use "
                "one of them"
            )
        self._check_int("motion_warmup", 1, "an integer number of frames >= 1 (SAMURAI: 15)")
        for name in ("motion_weight", "motion_min_iou", "memory_min_motion"):
            value = getattr(self, name)
            if value is None and name != "motion_min_iou":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise InputError(f"bad StreamConfig {name}={value!r}: expected a number in [0, 1]")
            if not 0.0 <= value <= 1.0:
                raise InputError(f"bad StreamConfig {name}={value}: expected a number in [0, 1]")
        if self.motion_weight is not None and not self.multimask_tracking:
            raise InputError(
                f"bad StreamConfig: motion_weight={self.motion_weight} chooses among the "
                "multimask outputs; it needs multimask_tracking=True"
            )
        self._check_int(
            "refine_radius", 0, "an integer window radius in input pixels >= 0 (0: off)"
        )
        if not (np.isfinite(self.refine_eps) and self.refine_eps > 0):
            raise InputError(
                f"bad StreamConfig refine_eps={self.refine_eps!r}: expected a finite ridge > 0 "
                "(squared colour units, colours in [0, 1])"
            )
        if not np.isfinite(self.mask_threshold):
            raise InputError(
                f"bad StreamConfig mask_threshold={self.mask_threshold}: expected a finite logit"
            )
        if self.memory_min_iou is not None and not 0.0 <= self.memory_min_iou < 1.0:
            raise InputError(
                f"bad StreamConfig memory_min_iou={self.memory_min_iou}: expected None (keep "
                "every frame, SAM 2) or a predicted IoU in [0, 1)"
            )
        if not isinstance(self.box_clip, (bool, np.bool_)):
            raise InputError(f"bad StreamConfig box_clip={self.box_clip!r}: expected true or false")
        region = self.search_region
        if region is not None and (
            isinstance(region, bool)
            or not isinstance(region, (int, float, np.number))
            or not (np.isfinite(region) and region >= 1.0)
        ):
            raise InputError(
                f"bad StreamConfig search_region={region!r}: expected None (the whole frame) or "
                "a window factor >= 1 (OSTrack: 4)"
            )
        if self.memory_min_score is not None and not np.isfinite(self.memory_min_score):
            raise InputError(
                f"bad StreamConfig memory_min_score={self.memory_min_score}: expected None "
                "(keep every frame, SAM 2) or a finite object-score logit"
            )

    @property
    def selects_memory(self) -> bool:
        """Whether tracked frames enter the memory bank by selection (placed by rank)."""
        return any(
            v is not None
            for v in (self.memory_min_score, self.memory_min_iou, self.memory_min_motion)
        )

    def _check_int(self, name: str, minimum: int, expected: str) -> None:
        """InputError unless field ``name`` is an integer (not a bool) >= ``minimum``."""
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise InputError(f"bad StreamConfig {name}={value!r}: expected {expected}")
