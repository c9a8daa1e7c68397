"""Rendering of the synthetic clips (clips.py): objects rasterised as polygons and composited
back to front over a panning photo crop, with exact visible-pixel masks.

An object (clips._Object) has an ``outline`` (V, 2), a ``texture`` (S, S, 3) float32 and per-frame
``centres`` (T, 2), ``scales`` (T,) and ``angles`` (T,).
"""

from __future__ import annotations

import numpy as np


def _rasterise(obj, t: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel rows, cols inside the object's outline at frame t (pixel centres)."""
    from skimage.draw import polygon

    c, s = np.cos(obj.angles[t]), np.sin(obj.angles[t])
    rot = np.array([[c, -s], [s, c]]) * obj.scales[t]
    points = obj.outline @ rot.T + obj.centres[t]  # (V, 2) (x, y)
    return polygon(points[:, 1], points[:, 0], shape=(size, size))


def _texture_at(obj, t: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Texture colours (N, 3) at image pixels (rows, cols): the texture moves with the object."""
    c, s = np.cos(obj.angles[t]), np.sin(obj.angles[t])
    dx, dy = cols - obj.centres[t, 0], rows - obj.centres[t, 1]
    u = (c * dx + s * dy) / obj.scales[t]  # inverse rotation and scale
    v = (-s * dx + c * dy) / obj.scales[t]
    n = obj.texture.shape[0]
    ui = np.floor(u + n / 2).astype(np.int64) % n
    vi = np.floor(v + n / 2).astype(np.int64) % n
    return obj.texture[vi, ui]


def background_frames(
    rng, photo: np.ndarray, size: int, frames: int, pan_limit: float = 1.5
) -> np.ndarray:
    """(T, size, size, 3) float32: a crop of the photo panning at up to ``pan_limit`` pixels a
    frame along each axis."""
    h, w = photo.shape[:2]
    pan = rng.uniform(-pan_limit, pan_limit, size=2)
    start = np.array([rng.uniform(0, w - size), rng.uniform(0, h - size)])
    out = np.empty((frames, size, size, 3), np.float32)
    for t in range(frames):
        x, y = np.clip(start + pan * t, 0, [w - size, h - size]).round().astype(int)
        out[t] = photo[y : y + size, x : x + size]
    return out


FLAT_COLOURS = ((255, 0, 0), (0, 255, 0), (0, 0, 255))


def render(objects, order, bar, bar_texture, base, flat) -> tuple[np.ndarray, np.ndarray, bool]:
    """(frames uint8, masks bool, whether one object ever covered another)."""
    frames, size = base.shape[0], base.shape[1]
    overlapped = False
    canvas = np.zeros_like(base) if flat else base.copy()
    owner = np.full((frames, size, size), -1, np.int16)  # which object each pixel shows
    for t in range(frames):
        for k in order:
            obj = objects[k]
            rows, cols = _rasterise(obj, t, size)
            overlapped = overlapped or bool((owner[t, rows, cols] >= 0).any())
            owner[t, rows, cols] = k
            if flat:
                canvas[t, rows, cols] = np.array(FLAT_COLOURS[k % 3], np.float32) / 255
            else:
                canvas[t, rows, cols] = _texture_at(obj, t, rows, cols)
        if bar is not None:
            axis, lo, hi = bar
            span = slice(int(np.floor(lo)), int(np.ceil(hi)))
            region = (slice(None), span) if axis == 0 else (span, slice(None))
            owner[t][region] = -1
            if flat:
                canvas[t][region] = 1.0
            else:
                canvas[t][region] = np.resize(bar_texture, canvas[t][region].shape)
    masks = np.stack([owner == k for k in range(len(objects))], axis=1)  # (T, K, H, W)
    frames_u8 = np.clip(canvas * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return frames_u8, masks, overlapped
