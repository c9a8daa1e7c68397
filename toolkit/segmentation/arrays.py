"""Array maths of the streaming SAM 2 predictor (numpy only): SAM 2's mask post-processing
(non-overlap constraint, hole filling), bfloat16 storage, torch-equivalent bilinear resizing
and PIL-equivalent bicubic resizing of frames (the two ways Meta's predictors resize)."""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.segmentation.graphs import LABEL_BOX_BOTTOM_RIGHT, LABEL_BOX_TOP_LEFT


def non_overlapping_logits(logits: np.ndarray) -> np.ndarray:
    """SAM 2's non-overlap constraint: logits (K, h, w) of K objects -> (K, h, w) where on
    every pixel only the object with the highest logit keeps it; the others are clamped to at
    most -10 (ties go to the first object)."""
    winner = np.argmax(logits, axis=0)  # (h, w)
    keep = winner[None] == np.arange(logits.shape[0])[:, None, None]  # (K, h, w)
    return np.where(keep, logits, np.minimum(logits, np.float32(-10.0))).astype(np.float32)


def fill_holes(logits: np.ndarray, hole_area: int, sprinkle_area: int = 0) -> np.ndarray:
    """SAM 2's mask post-processing on one (h, w) logit map -> (h, w) float32: background
    components (8-connected, as SAM 2's connected-components kernel) of at most ``hole_area``
    pixels become 0.1 (foreground, as ``fill_holes_in_mask_scores``), then foreground
    components of at most ``sprinkle_area`` pixels become -0.1 (background). 0: skip."""
    out = np.array(logits, np.float32, copy=True)
    if hole_area <= 0 and sprinkle_area <= 0:
        return out
    try:
        from scipy.ndimage import label
    except ModuleNotFoundError:
        raise InputError(
            "fill_hole_area / remove_sprinkle_area need scipy: pip install 'edgekit[sim]'"
        ) from None

    eight = np.ones((3, 3), bool)
    for value, max_area in ((0.1, hole_area), (-0.1, sprinkle_area)):
        if max_area <= 0:
            continue
        labels, count = label(out <= 0 if value > 0 else out > 0, structure=eight)
        if count == 0:
            continue
        areas = np.bincount(labels.reshape(-1), minlength=count + 1)
        small = (areas <= max_area) & (np.arange(count + 1) > 0)
        out[small[labels]] = np.float32(value)
    return out


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> uint16 bfloat16 bits, rounding to nearest even (as torch's .to(bfloat16))."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bits -> float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


@lru_cache(maxsize=64)
def _taps(n_in: int, n_out: int, antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights (n_out, K) of 1D linear resampling, align_corners=False.

    Without antialias: the two neighbours of (i + 0.5) * scale - 0.5 (clamped at 0). With it:
    a triangle filter stretched by the scale when shrinking, normalised per output.
    """
    scale = np.float32(n_in) / np.float32(n_out)
    i = np.arange(n_out, dtype=np.float32)
    if not antialias:
        src = np.maximum(scale * (i + np.float32(0.5)) - np.float32(0.5), np.float32(0))
        i0 = src.astype(np.int64)
        i1 = np.minimum(i0 + 1, n_in - 1)
        l1 = src - i0.astype(np.float32)
        return np.stack([i0, i1], 1), np.stack([np.float32(1) - l1, l1], 1)
    support = scale if scale >= 1 else np.float32(1.0)
    invscale = np.float32(1) / scale if scale >= 1 else np.float32(1.0)
    center = scale * (i + np.float32(0.5))
    xmin = np.maximum(np.trunc(center - support + np.float32(0.5)).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + np.float32(0.5)).astype(np.int64), n_in)
    k = int((xmax - xmin).max())
    j = np.arange(k)
    x = (j[None, :] + xmin[:, None] - center[:, None] + np.float32(0.5)) * invscale
    weights = np.maximum(np.float32(0), np.float32(1) - np.abs(x)).astype(np.float32)
    weights[j[None, :] >= (xmax - xmin)[:, None]] = 0
    weights /= weights.sum(1, keepdims=True)
    return np.minimum(xmin[:, None] + j[None, :], n_in - 1), weights.astype(np.float32)


def resize_bilinear(x: np.ndarray, size: tuple[int, int], antialias: bool = False) -> np.ndarray:
    """Resize the last two axes of ``x`` to ``size`` like torch's F.interpolate(mode="bilinear",
    align_corners=False, antialias=...); float32 in and out."""
    h, w = x.shape[-2:]
    oh, ow = size
    x = np.asarray(x, np.float32)
    if (h, w) == (oh, ow):
        return x
    idx, wts = _taps(w, ow, antialias)
    y = sum(x[..., idx[:, k]] * wts[:, k] for k in range(idx.shape[1]))
    idx, wts = _taps(h, oh, antialias)
    return sum(y[..., idx[:, k], :] * wts[:, k, None] for k in range(idx.shape[1]))


#: how a frame becomes the image encoder's (3, S, S) input (StreamConfig.resize); see frame_to_input
RESIZE_METHODS = ("bilinear-antialias", "pil-bicubic")
_PIL_PRECISION_BITS = 22  # Pillow's 8-bit resampling: 32 - 8 - 2 bits of fixed-point weights


def frame_to_input(frame: np.ndarray, size: int, method: str = "bilinear-antialias") -> np.ndarray:
    """An (H, W, 3) uint8 RGB frame -> the image encoder's input (3, size, size) float32 in
    [0, 1] (ImageNet normalisation happens inside the graph), resized by ``method``:

    - "bilinear-antialias": divide by 255 in float32, then anti-aliased bilinear resizing
      (torch's ``F.interpolate(mode="bilinear", align_corners=False, antialias=True)``): what
      Meta's image predictor does (``SAM2Transforms``: ToTensor, then torchvision's Resize on
      the float tensor, anti-aliased by default since torchvision 0.17).
    - "pil-bicubic": PIL's bicubic resize of the uint8 frame (``resize_pil_bicubic``), then
      divide by 255: what Meta's video predictor does (``load_video_frames`` on a folder of
      JPEG frames, ``_load_img_as_tensor``); bit-exact. (Given an .mp4, Meta's predictor
      resizes with decord's scaler instead, which is not reproduced.)
    """
    if method == "pil-bicubic":
        resized = resize_pil_bicubic(frame, (size, size))  # (size, size, 3) uint8
        return np.ascontiguousarray(np.moveaxis(resized, -1, 0), np.float32) / np.float32(255.0)
    if method != "bilinear-antialias":
        raise InputError(f"unknown resize method {method!r}; expected one of {RESIZE_METHODS}")
    image = frame.astype(np.float32) / np.float32(255.0)
    return resize_bilinear(np.moveaxis(image, -1, 0), (size, size), antialias=True)


def _bicubic(x: np.ndarray) -> np.ndarray:
    """Pillow's bicubic kernel (a = -0.5) on float64, its operations in its order."""
    x = np.abs(x)
    inner = ((1.5 * x - 2.5) * x) * x + 1.0
    outer = (((x - 5.0) * x + 8.0) * x - 4.0) * -0.5
    return np.where(x < 1.0, inner, np.where(x < 2.0, outer, 0.0))


@lru_cache(maxsize=32)
def _pil_bicubic_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Pillow's ``precompute_coeffs`` + ``normalize_coeffs_8bpc`` for BICUBIC along one axis:
    source indices and fixed-point int32 weights, both (n_out, K) (unused taps weigh 0)."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    ksize = int(np.ceil(support)) * 2 + 1
    center = (np.arange(n_out, dtype=np.float64) + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in) - xmin
    j = np.arange(ksize)
    used = j[None, :] < xmax[:, None]  # (n_out, K)
    w = _bicubic(
        ((j[None, :] + xmin[:, None]).astype(np.float64) - center[:, None] + 0.5)
        * (1.0 / filterscale)
    )
    w = np.where(used, w, 0.0)
    total = np.zeros(n_out)
    for k in range(ksize):  # summed in Pillow's order (numpy's sum pairs terms differently)
        total = total + w[:, k]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    fixed = w * float(1 << _PIL_PRECISION_BITS)
    weights = np.trunc(np.where(w < 0, fixed - 0.5, fixed + 0.5)).astype(np.int32)
    index = np.minimum(xmin[:, None] + j[None, :], n_in - 1)
    return index, weights


def _pil_pass(x: np.ndarray, n_out: int, axis: int) -> np.ndarray:
    """One of Pillow's 8-bit resampling passes along ``axis`` of uint8 ``x``."""
    index, weights = _pil_bicubic_taps(x.shape[axis], n_out)
    shape = [1] * x.ndim
    shape[axis] = n_out
    half = 1 << (_PIL_PRECISION_BITS - 1)  # rounds the sum to nearest
    acc = np.full((*x.shape[:axis], n_out, *x.shape[axis + 1 :]), half, np.int32)
    for k in range(index.shape[1]):
        acc += np.take(x, index[:, k], axis=axis).astype(np.int32) * weights[:, k].reshape(shape)
    return np.clip(acc >> _PIL_PRECISION_BITS, 0, 255).astype(np.uint8)


def resize_pil_bicubic(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(H, W, C) uint8 -> (oh, ow, C) uint8, bit-exact with Pillow's
    ``Image.fromarray(image).resize((ow, oh))`` (BICUBIC, its default) in numpy, so the lean
    device install needs no Pillow: Pillow's fixed-point resampling, one pass per axis whose
    size changes, each rounded and clipped to 8 bits. The order of the passes is Pillow
    13's: vertical first when the height shrinks by more than twice as many pixels as the
    width, else horizontal first (Pillow 12 and older always go horizontal first; the two
    differ only in that vertical-first case, e.g. a portrait frame taller than ``oh``)."""
    oh, ow = size
    out = np.asarray(image)
    if out.dtype != np.uint8 or out.ndim != 3:
        raise InputError(f"resize_pil_bicubic needs (H, W, C) uint8, got {out.dtype} {out.shape}")
    pillow = _pillow_13()
    if pillow is not None and out.shape[2] == 3:  # the same arithmetic, 2-7x faster
        return np.asarray(pillow.fromarray(out).resize((ow, oh), pillow.BICUBIC))
    return resize_pil_bicubic_numpy(out, size)


def resize_pil_bicubic_numpy(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``resize_pil_bicubic`` in numpy only (what runs where Pillow 13 is not installed)."""
    oh, ow = size
    out = np.asarray(image)
    h, w = out.shape[:2]
    vertical_first = h - oh > 0 and h - oh > (w - ow) * 2
    for axis in (0, 1) if vertical_first else (1, 0):
        n_out = (oh, ow)[axis]
        if out.shape[axis] != n_out:
            out = _pil_pass(out, n_out, axis)
    return out


@cache
def _pillow_13() -> Any:
    """PIL.Image when Pillow 13 or newer is installed (its bicubic passes run in the order
    ``resize_pil_bicubic`` reproduces), else None."""
    try:
        import PIL
        from PIL import Image
    except ImportError:
        return None
    major = int(PIL.__version__.split(".")[0])
    return Image if major >= 13 else None


def box_mean(x: np.ndarray, radius: int) -> np.ndarray:
    """Mean of the last two axes of ``x`` over (2r+1) x (2r+1) windows, edge pixels repeated
    beyond the border (the window never shrinks); float32 unless ``x`` is float64, same shape.
    scipy's uniform filter where scipy is installed (about 3x faster), else ``box_mean_numpy``
    (the lean device install); the two agree to float rounding."""
    x = _float(x)
    if radius <= 0:
        return x.copy()
    uniform_filter = _scipy_uniform_filter()
    if uniform_filter is None:
        return box_mean_numpy(x, radius)
    k = 2 * radius + 1
    return uniform_filter(x, size=(1,) * (x.ndim - 2) + (k, k), mode="nearest")


@cache
def _scipy_uniform_filter() -> Any:
    try:
        from scipy.ndimage import uniform_filter
    except ImportError:
        return None
    return uniform_filter


def box_mean_numpy(x: np.ndarray, radius: int) -> np.ndarray:
    """``box_mean`` in numpy alone: running sums in float64 along each axis (window sum =
    S[i + k - 1] - S[i - 1]) over the edge-padded input."""
    x = _float(x)
    if radius <= 0:
        return x.copy()
    k = 2 * radius + 1
    pad = [(0, 0)] * (x.ndim - 2) + [(radius, radius), (radius, radius)]
    total = np.pad(x.astype(np.float64), pad, mode="edge")
    for axis in (x.ndim - 2, x.ndim - 1):
        np.cumsum(total, axis=axis, out=total)
        head = [slice(None)] * x.ndim
        head[axis] = slice(k - 1, None)
        window = total[tuple(head)].copy()
        rest, drop = list(head), list(head)
        rest[axis], drop[axis] = slice(1, None), slice(None, -k)
        window[tuple(rest)] -= total[tuple(drop)]
        total = window
    total *= 1.0 / (k * k)
    return total.astype(x.dtype)


def _float(x: np.ndarray) -> np.ndarray:
    """``x`` as float64 if it is, else as float32."""
    x = np.asarray(x)
    return x if x.dtype == np.float64 else x.astype(np.float32, copy=False)


def guided_filter(guide: np.ndarray, p: np.ndarray, radius: int, eps: float) -> np.ndarray:
    """He et al.'s colour guided filter: the (H, W) map ``p`` filtered by the (3, H, W) image
    ``guide`` (values in [0, 1]) -> (H, W), float64 if ``guide`` is, else float32. Per window
    of radius ``radius`` ``p`` is fit as a linear function of the three colours (ridge
    ``eps``), and the fits are averaged: edges of ``p`` move onto the image's nearby colour
    edges; where ``p`` is flat it stays."""
    g = _float(guide)
    p = np.asarray(p, g.dtype)
    eps = g.dtype.type(eps)
    pairs = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    stack = np.concatenate([g, p[None], g * p[None], [g[i] * g[j] for i, j in pairs]])
    means = box_mean(stack, radius)  # (13, H, W)
    mean_i, mean_p, mean_ip, mean_ii = means[:3], means[3], means[4:7], means[7:]
    cov = mean_ip - mean_i * mean_p  # (3, H, W)
    v = [mean_ii[k] - mean_i[i] * mean_i[j] for k, (i, j) in enumerate(pairs)]
    xx, xy, xz, yy, yz, zz = v[0] + eps, v[1], v[2], v[3] + eps, v[4], v[5] + eps
    # a = S^-1 cov per pixel, S the symmetric 3 x 3 colour covariance: adjugate / determinant
    c00, c01, c02 = yy * zz - yz * yz, xz * yz - xy * zz, xy * yz - xz * yy
    c11, c12, c22 = xx * zz - xz * xz, xy * xz - xx * yz, xx * yy - xy * xy
    det = xx * c00 + xy * c01 + xz * c02
    a = (
        np.stack(
            [
                c00 * cov[0] + c01 * cov[1] + c02 * cov[2],
                c01 * cov[0] + c11 * cov[1] + c12 * cov[2],
                c02 * cov[0] + c12 * cov[1] + c22 * cov[2],
            ]
        )
        / det
    )
    b = mean_p - (a * mean_i).sum(0)
    smooth = box_mean(np.concatenate([a, b[None]]), radius)  # (4, H, W)
    return (smooth[:3] * g).sum(0) + smooth[3]


def refine_mask(
    low: np.ndarray, guide: np.ndarray, radius: int, eps: float, threshold: float = 0.0
) -> np.ndarray:
    """Image-guided refinement of one object's mask: low-res logits (h, w) upsampled to the
    (3, S, S) ``guide`` (the frame as the encoder saw it, in [0, 1]), their probabilities
    guided-filtered (``guided_filter``) -> (S, S) float32, the filtered probability minus
    sigmoid(``threshold``) (> 0: the object). Only the box around the pixels whose logit is
    above -6, grown by 2r + 1, is filtered; elsewhere the result is -sigmoid(threshold)."""
    size = guide.shape[-2:]
    up = resize_bilinear(low, size, antialias=False)
    cut = np.float32(1.0 / (1.0 + np.exp(-threshold)))
    out = np.full(size, -cut, np.float32)
    rows, cols = np.nonzero(up.max(1) > -6)[0], np.nonzero(up.max(0) > -6)[0]
    if rows.size == 0:
        return out
    m = 2 * radius + 1
    y0, y1 = max(rows[0] - m, 0), min(rows[-1] + m + 1, size[0])
    x0, x1 = max(cols[0] - m, 0), min(cols[-1] + m + 1, size[1])
    prob = np.float32(1.0) / (np.float32(1.0) + np.exp(-up[y0:y1, x0:x1]))
    filtered = guided_filter(_float(guide[:, y0:y1, x0:x1]), prob, radius, eps)
    out[y0:y1, x0:x1] = filtered - cut
    return out


def object_summary(mask: np.ndarray, score: float) -> dict[str, Any]:
    """Area (pixels), bounding box (x0, y0, x1, y1) or None, and the object score."""
    ys, xs = np.nonzero(mask)
    box = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None
    return {"area": int(len(xs)), "box": box, "score": round(float(score), 4)}


def confine_to_box(
    low: np.ndarray, coords: np.ndarray, labels: np.ndarray, image_size: int
) -> np.ndarray:
    """Low-res mask logits (s, s) of an input ``image_size`` square -> the same logits with
    the positive logits of every cell that does not overlap the prompt's box negated (so the
    upsampled mask ends on the cells' boundary, as it does where it ends by itself). ``coords``
    (N, 2) and ``labels`` (N,) are a parsed prompt (input pixels); without box corners (labels
    2 and 3) the logits come back unchanged."""
    labels = np.asarray(labels).reshape(-1)
    if not (np.any(labels == LABEL_BOX_TOP_LEFT) and np.any(labels == LABEL_BOX_BOTTOM_RIGHT)):
        return low
    x0, y0 = np.asarray(coords)[labels == LABEL_BOX_TOP_LEFT][0]
    x1, y1 = np.asarray(coords)[labels == LABEL_BOX_BOTTOM_RIGHT][0]
    cell = image_size / low.shape[-1]  # input pixels per low-res cell
    keep = np.zeros(low.shape, bool)
    c0, c1 = int(np.floor(x0 / cell)), int(np.ceil(x1 / cell))
    r0, r1 = int(np.floor(y0 / cell)), int(np.ceil(y1 / cell))
    keep[max(r0, 0) : max(r1, r0 + 1), max(c0, 0) : max(c1, c0 + 1)] = True
    return np.where(keep, low, -np.abs(low)).astype(low.dtype)
