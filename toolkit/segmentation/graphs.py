"""THE SAM 2 graph contract: the exportable graphs a streaming SAM 2 model is made of.

Any model that implements these graphs (edgekit's own SAM 2.1 in ``edgekit.models.sam2``, the
compact ``sam2-edge``) runs in the streaming predictor ``edgekit.segmentation.stream`` on any runtime:
a *graph set* maps each graph name below to a callable ``feeds -> outputs`` on numpy arrays
(a wrapped torch module, an ONNX Runtime or OpenVINO ``Session.run``). The memory bank, the
choice of mask among the candidates and all resizing to and from the frame live in the
predictor, outside the graphs.

Symbols used in the shapes (values for the official SAM 2.1 at input size S = 1024):

- ``S``  model input size, square (1024; any multiple of 32 for edgekit's SAM 2.1)
- ``C``  model width (256), ``Cm`` memory width (64)
- ``h, w`` image-embedding grid (S/16 = 64); ``hm, wm`` memory grid (= h, w for SAM 2.1)
- ``4h, 4w`` mask-logit grid (S/4 = 256); also the grid of ``mask_input``
- ``F`` number of memory frames fed (1 .. num_maskmem), ``P`` number of object pointers
  (1 .. max_obj_ptrs), ``N`` number of prompt points (>= 1): dynamic axes in an export.

All tensors are float32 with batch 1 except the two int64 index inputs noted below. One call of
``memory_attention``, ``mask_decoder`` and ``memory_encoder`` serves one object; the image
encoder runs once per frame and is shared by all objects.

Graphs
------
``image_encoder``
    in  ``image`` (1, 3, S, S): RGB in [0, 1]; ImageNet mean/std normalisation is inside.
    out ``image_embed`` (1, C, h, w): stride-16 features, not memory-conditioned.
        ``image_embed_nomem`` (1, C, h, w): ``image_embed`` + the learned no-memory embedding,
        the decoder input on a frame that is prompted with no memory (a conditioning frame).
        ``image_pos`` (1, C, h, w): position encoding of ``image_embed``.
        ``feat_s0`` (1, C/8, 4h, 4w), ``feat_s1`` (1, C/4, 2h, 2w): high-resolution features,
        already through the decoder's 1x1 projections.

``memory_attention``
    in  ``image_embed``, ``image_pos`` as above;
        ``mem_feats`` (F, Cm, hm, wm), ``mem_pos`` (F, Cm, hm, wm): memory features and their
        spatial position encoding, conditioning frames first, then recent frames oldest first;
        ``mem_tpos_idx`` (F,) int64: row of the learned temporal encoding per memory frame,
        ``t_rel - 1`` for a frame ``t_rel`` frames before the current one (1 .. num_maskmem-1)
        and ``num_maskmem - 1`` for a conditioning frame;
        ``obj_ptrs`` (P, C): object pointers, conditioning frames first then recent frames
        newest first; ``obj_ptr_tpos`` (P,): signed temporal distance of each pointer
        (current frame index minus the pointer's frame index) divided by
        ``max_obj_ptrs - 1``, sine-encoded and projected inside the graph.
        Object-pointer tokens take no rotary position encoding.
    out ``pix_feat`` (1, C, h, w): the frame's features conditioned on the memory.

``mask_decoder`` (prompt encoder + mask decoder)
    in  ``pix_feat`` (1, C, h, w): ``pix_feat`` from memory attention, ``image_embed_nomem``
        on a conditioning frame, or ``image_embed`` for a mask prompt;
        ``feat_s0``, ``feat_s1`` from the image encoder;
        ``point_coords`` (1, N, 2): (x, y) in model-input pixels (0 .. S);
        ``point_labels`` (1, N) int64: 1 positive, 0 negative, 2 / 3 box top-left /
        bottom-right, -1 padding (a frame with no prompt feeds one point (0, 0) labelled -1);
        ``mask_input`` (1, 1, 4h, 4w): mask logits used as a dense prompt;
        ``has_mask_input`` (1,): 1.0 when ``mask_input`` holds a prompt, else 0.0.
    out ``low_res_masks`` (1, 4, 4h, 4w): mask logits, token 0 the single-mask output and
        1..3 the multimask outputs; ``iou_pred`` (1, 4): predicted IoU per mask;
        ``obj_ptrs`` (1, 4, C): object pointer per output token, with the no-object pointer
        already mixed in when ``object_score_logits`` <= 0; ``object_score_logits`` (1, 1):
        > 0 when the object is visible.

``memory_encoder``
    in  ``image_embed`` (1, C, h, w): the frame's un-conditioned features;
        ``mask_logits`` (1, 1, 4h, 4w): the chosen mask logits (-1024 everywhere when the
        object is absent), upsampled to S inside the graph;
        ``binarize`` (1,): 1.0 to encode the thresholded mask (prompted frames), 0.0 for the
        sigmoid of the logits (tracked frames);
        ``object_score_logits`` (1, 1): adds the learned no-object embedding when <= 0.
    out ``mem_feats`` (1, Cm, hm, wm); ``mem_pos`` (1, Cm, hm, wm), which must not depend on the
        inputs (the predictor keeps one copy).

``mask_prompt`` (optional: needed only for mask prompts)
    in  ``mask`` (1, 1, S, S): the prompt mask as 0.0 / 1.0 at model-input resolution.
    out ``mask_input`` (1, 1, 4h, 4w): the learned downsampling of the mask, fed to
        ``mask_decoder`` as ``mask_input`` to obtain the object pointer of a mask prompt.

What the predictor does around the graphs (so that a graph set reproduces SAM 2.1's video
predictor): multimask output (best of tokens 1..3 by ``iou_pred``, pointer of that token) when
at most one point is given, including tracked frames with no point; otherwise token 0 unless its
stability score (area of logits > 0.05 over area > -0.05) is below 0.98, then the best
multimask mask (pointer still token 0). Masks are set to -1024 where ``object_score_logits`` <= 0.
Frames are resized to S x S with anti-aliased bilinear interpolation; masks come back to the
frame's size by bilinear interpolation of the low-res logits (torch's align_corners=False
arithmetic) thresholded at 0. A correction on a tracked frame feeds the frame's previous logits,
clamped to +-32, as ``mask_input`` together with the new points. A mask prompt is its own output
(the mask as logits +-10, anti-aliased down to 4h x 4w) with object score 10; its pointer is
token 0 of ``mask_decoder`` run on ``image_embed`` with ``mask_prompt``'s ``mask_input`` and no
point. Prompted frames are encoded into memory with ``binarize`` 1, tracked frames with 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError

IMAGE_ENCODER = "image_encoder"
MEMORY_ATTENTION = "memory_attention"
MASK_DECODER = "mask_decoder"
MEMORY_ENCODER = "memory_encoder"
MASK_PROMPT = "mask_prompt"

REQUIRED_GRAPHS: tuple[str, ...] = (IMAGE_ENCODER, MEMORY_ATTENTION, MASK_DECODER, MEMORY_ENCODER)
OPTIONAL_GRAPHS: tuple[str, ...] = (MASK_PROMPT,)
GRAPH_NAMES: tuple[str, ...] = REQUIRED_GRAPHS + OPTIONAL_GRAPHS

NO_OBJECT_LOGIT = -1024.0  # mask logit written where the object is absent
PROMPT_LOGIT_CLAMP = 32.0  # previous mask logits fed back with a correction are clamped to this
LABEL_NEGATIVE, LABEL_POSITIVE, LABEL_BOX_TOP_LEFT, LABEL_BOX_BOTTOM_RIGHT = 0, 1, 2, 3
LABEL_PADDING = -1
NUM_MASK_TOKENS = 4


@dataclass(frozen=True)
class TensorContract:
    """One graph input or output: name, numpy dtype name and a symbolic shape."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    def resolve(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        """The concrete shape for ``dims``, e.g. {"S": 1024, "C": 256, "h": 64, ...}."""
        return tuple(_resolve_dim(d, dims) for d in self.shape)


def _resolve_dim(dim: int | str, dims: Mapping[str, int]) -> int:
    if isinstance(dim, int):
        return dim
    for op, fn in (("/", lambda a, b: a // b), ("*", lambda a, b: a * b)):
        if op in dim:
            left, right = dim.split(op)
            a = int(left) if left.isdigit() else dims[left]
            b = int(right) if right.isdigit() else dims[right]
            return fn(a, b)
    if dim.isdigit():
        return int(dim)
    return dims[dim]


def _f32(name: str, *shape: int | str) -> TensorContract:
    return TensorContract(name, "float32", tuple(shape))


def _i64(name: str, *shape: int | str) -> TensorContract:
    return TensorContract(name, "int64", tuple(shape))


GRAPH_INPUTS: dict[str, tuple[TensorContract, ...]] = {
    IMAGE_ENCODER: (_f32("image", 1, 3, "S", "S"),),
    MEMORY_ATTENTION: (
        _f32("image_embed", 1, "C", "h", "w"),
        _f32("image_pos", 1, "C", "h", "w"),
        _f32("mem_feats", "F", "Cm", "hm", "wm"),
        _f32("mem_pos", "F", "Cm", "hm", "wm"),
        _i64("mem_tpos_idx", "F"),
        _f32("obj_ptrs", "P", "C"),
        _f32("obj_ptr_tpos", "P"),
    ),
    MASK_DECODER: (
        _f32("pix_feat", 1, "C", "h", "w"),
        _f32("feat_s0", 1, "C/8", "4*h", "4*w"),
        _f32("feat_s1", 1, "C/4", "2*h", "2*w"),
        _f32("point_coords", 1, "N", 2),
        _i64("point_labels", 1, "N"),
        _f32("mask_input", 1, 1, "4*h", "4*w"),
        _f32("has_mask_input", 1),
    ),
    MEMORY_ENCODER: (
        _f32("image_embed", 1, "C", "h", "w"),
        _f32("mask_logits", 1, 1, "4*h", "4*w"),
        _f32("binarize", 1),
        _f32("object_score_logits", 1, 1),
    ),
    MASK_PROMPT: (_f32("mask", 1, 1, "S", "S"),),
}

GRAPH_OUTPUTS: dict[str, tuple[TensorContract, ...]] = {
    IMAGE_ENCODER: (
        _f32("image_embed", 1, "C", "h", "w"),
        _f32("image_embed_nomem", 1, "C", "h", "w"),
        _f32("image_pos", 1, "C", "h", "w"),
        _f32("feat_s0", 1, "C/8", "4*h", "4*w"),
        _f32("feat_s1", 1, "C/4", "2*h", "2*w"),
    ),
    MEMORY_ATTENTION: (_f32("pix_feat", 1, "C", "h", "w"),),
    MASK_DECODER: (
        _f32("low_res_masks", 1, NUM_MASK_TOKENS, "4*h", "4*w"),
        _f32("iou_pred", 1, NUM_MASK_TOKENS),
        _f32("obj_ptrs", 1, NUM_MASK_TOKENS, "C"),
        _f32("object_score_logits", 1, 1),
    ),
    MEMORY_ENCODER: (
        _f32("mem_feats", 1, "Cm", "hm", "wm"),
        _f32("mem_pos", 1, "Cm", "hm", "wm"),
    ),
    MASK_PROMPT: (_f32("mask_input", 1, 1, "4*h", "4*w"),),
}

# Dynamic axes of an export: input name -> {axis: symbol}, per graph.
DYNAMIC_AXES: dict[str, dict[str, dict[int, str]]] = {
    IMAGE_ENCODER: {},
    MEMORY_ATTENTION: {
        "mem_feats": {0: "F"},
        "mem_pos": {0: "F"},
        "mem_tpos_idx": {0: "F"},
        "obj_ptrs": {0: "P"},
        "obj_ptr_tpos": {0: "P"},
    },
    MASK_DECODER: {"point_coords": {1: "N"}, "point_labels": {1: "N"}},
    MEMORY_ENCODER: {},
    MASK_PROMPT: {},
}


def tensorrt_max_shapes(
    specs: list, num_maskmem: int, max_obj_ptrs: int, max_points: int = 16
) -> dict[str, list[int]]:
    """TensorRT profile maxima for the dynamic axes of a graph set (``GraphSpec`` list): F up
    to ``num_maskmem``, P up to ``max_obj_ptrs``, N up to ``max_points`` (the minima are 1, the
    optimum the example). Goes into ``ExportOptions.extra["trt_max_shapes"]``."""
    limits = {"F": num_maskmem, "P": max_obj_ptrs, "N": max_points}
    out: dict[str, list[int]] = {}
    for spec in specs:
        for name, axes in DYNAMIC_AXES.get(spec.name, {}).items():
            shape = list(spec.example_inputs[name].shape)
            for axis, symbol in axes.items():
                shape[axis] = max(limits[symbol], shape[axis])
            out[name] = shape
    return out


def input_names(graph: str) -> list[str]:
    """Input names of ``graph`` in the order an exported graph declares them."""
    return [t.name for t in _contract(GRAPH_INPUTS, graph)]


def output_names(graph: str) -> list[str]:
    """Output names of ``graph`` in the order an exported graph declares them."""
    return [t.name for t in _contract(GRAPH_OUTPUTS, graph)]


def _contract(table: dict[str, tuple[TensorContract, ...]], graph: str) -> tuple:
    if graph not in table:
        raise InputError(f"unknown SAM 2 graph '{graph}'; the contract has {list(GRAPH_NAMES)}")
    return table[graph]


def check_graph_set(graphs: Mapping[str, object]) -> None:
    """Raise InputError unless ``graphs`` has every required graph, each a callable."""
    missing = [g for g in REQUIRED_GRAPHS if g not in graphs]
    if missing:
        raise InputError(
            f"the SAM 2 graph set lacks {missing}; it needs {list(REQUIRED_GRAPHS)} "
            f"(and optionally {list(OPTIONAL_GRAPHS)}), got {sorted(graphs)}"
        )
    for name, fn in graphs.items():
        if not callable(fn):
            raise InputError(f"graph '{name}' must be callable as feeds -> outputs, got {fn!r}")


def check_outputs(
    graph: str, outputs: Mapping[str, np.ndarray], dims: Mapping[str, int] | None = None
) -> None:
    """Raise InputError unless ``outputs`` of ``graph`` match the contract.

    Names, dtypes and ranks are always checked; with ``dims`` (e.g. {"S": 256, "C": 256,
    "Cm": 64, "h": 16, "w": 16, "hm": 16, "wm": 16}) the full shapes are checked too.
    """
    for spec in _contract(GRAPH_OUTPUTS, graph):
        if spec.name not in outputs:
            raise InputError(f"graph '{graph}' did not return '{spec.name}'; got {list(outputs)}")
        value = np.asarray(outputs[spec.name])
        if value.dtype != np.dtype(spec.dtype):
            raise InputError(
                f"graph '{graph}' output '{spec.name}' is {value.dtype}, expected {spec.dtype}"
            )
        if value.ndim != len(spec.shape):
            raise InputError(
                f"graph '{graph}' output '{spec.name}' has shape {value.shape}, expected rank "
                f"{len(spec.shape)} {spec.shape}"
            )
        if dims is not None and tuple(value.shape) != spec.resolve(dims):
            raise InputError(
                f"graph '{graph}' output '{spec.name}' has shape {value.shape}, expected "
                f"{spec.resolve(dims)} {spec.shape}"
            )
