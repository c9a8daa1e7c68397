"""Objects cut from real photographs, for the ``train-cutout`` clips (clips.py).

A flat-textured disc teaches a tracker to follow a texture; a real object has parts, internal
edges and shading. Each object here is a region of a training photo: the photo is cut into
superpixels (Felzenszwalb's graph segmentation, once per photo), and from a random superpixel
whole adjacent ones are added until the region reaches the asked size, each within the asked
radius of the start (so the outline is made of the photo's own edges). The object is that region's outline with the photo's own pixels as its texture (the
renderer moves, turns and scales both together). The second object of a clip is cut from the
main object's photo half of the time, so it shares its colours. Objects that need not hide
behind a bar or leave the frame are drawn up to twice as large (real objects fill more of the
frame than the synthetic shapes). Each clip is then lit differently over time (gain and colour
drift) and, sometimes, blurred as by camera motion.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgekit.models.sam2_edge import clips as C

HALF = C.TEXTURE_SIZE // 2


@lru_cache(maxsize=32)
def _segments(name: str) -> np.ndarray:
    """Superpixel labels (H, W) int of a training photo (cached per process)."""
    from skimage.segmentation import felzenszwalb

    return felzenszwalb(C.load_background(name), scale=60, sigma=0.6, min_size=40)


def _grow(labels: np.ndarray, seed: tuple[int, int], radius: float, area: float, rng):
    """A region (bool, labels' shape) of whole adjacent superpixels from the one at ``seed``,
    each lying within ``radius`` of it, grown until it covers ``area`` pixels (or nothing
    adjacent fits); None when the seed's own superpixel does not fit."""
    from scipy.ndimage import maximum

    h, w = labels.shape
    yy, xx = np.ogrid[:h, :w]
    distance = np.sqrt((yy - seed[0]) ** 2 + (xx - seed[1]) ** 2)
    ids = np.unique(labels)
    fits = set(ids[np.asarray(maximum(distance, labels, ids)) <= radius].tolist())
    if int(labels[seed]) not in fits:
        return None
    region = labels == labels[seed]
    for _ in range(64):
        if region.sum() >= area:
            break
        ring = np.zeros_like(region)  # pixels beside the region
        ring[1:] |= region[:-1]
        ring[:-1] |= region[1:]
        ring[:, 1:] |= region[:, :-1]
        ring[:, :-1] |= region[:, 1:]
        neighbours = [n for n in np.unique(labels[ring & ~region]).tolist() if n in fits]
        if not neighbours:
            break
        region |= labels == neighbours[int(rng.integers(len(neighbours)))]
    return region


def _outline(region: np.ndarray, centre: np.ndarray) -> np.ndarray | None:
    """(V, 2) (x, y) outline of the largest piece of ``region`` around ``centre`` (row, col)."""
    from skimage.measure import approximate_polygon, find_contours

    contours = find_contours(np.pad(region, 1).astype(np.float32), 0.5)
    if not contours:
        return None
    longest = approximate_polygon(max(contours, key=len), tolerance=0.8) - 1.0  # undo the pad
    if len(longest) < 4:
        return None
    return np.stack([longest[:, 1] - centre[1], longest[:, 0] - centre[0]], axis=1)


class CutoutShapes:
    """The shape factory of one ``train-cutout`` clip: ``shapes(radius)`` -> (outline (V, 2),
    texture (S, S, 3) float32), both centred on the object; ``enlarge()`` a size factor;
    ``relight(frames)`` the clip's lighting and blur."""

    def __init__(self, rng: np.random.Generator, photos: tuple[str, ...], avoid: str) -> None:
        self.rng = rng
        self.choices = [p for p in photos if p != avoid]
        self.last: str | None = None

    def enlarge(self) -> float:
        return float(self.rng.uniform(1.0, 2.0))

    def __call__(self, radius: float) -> tuple[np.ndarray, np.ndarray]:
        rng = self.rng
        same = self.last is not None and rng.random() < 0.5  # a distractor of the same colours
        name = self.last if same else self.choices[int(rng.integers(len(self.choices)))]
        self.last = name
        photo, labels = C.load_background(name), _segments(name)
        radius = min(float(radius), HALF - 2.0)
        h, w = labels.shape
        for _ in range(20):
            seed = (int(rng.integers(h)), int(rng.integers(w)))
            area = np.pi * radius**2 * rng.uniform(0.45, 0.8)
            region = _grow(labels, seed, radius, area, rng)
            if region is None or region.sum() < 0.3 * np.pi * radius**2:
                continue
            rows, cols = np.nonzero(region)
            centre = np.array([rows.mean(), cols.mean()])
            outline = _outline(region, centre)
            if outline is not None:
                return outline, self._texture(photo, centre)
        # a photo of large flat superpixels: fall back to a disc of the photo's pixels
        angles = np.linspace(0, 2 * np.pi, 48, endpoint=False)
        disc = np.stack([np.cos(angles), np.sin(angles)], 1) * radius
        return disc, self._texture(photo, np.array([h / 2, w / 2]))

    @staticmethod
    def _texture(photo: np.ndarray, centre: np.ndarray) -> np.ndarray:
        """The TEXTURE_SIZE square of ``photo`` centred on ``centre`` (edges mirrored)."""
        padded = np.pad(photo, ((HALF, HALF), (HALF, HALF), (0, 0)), mode="reflect")
        y, x = np.round(centre).astype(int)  # the padded window starting here is centred on it
        return np.ascontiguousarray(padded[y : y + C.TEXTURE_SIZE, x : x + C.TEXTURE_SIZE])

    def relight(
        self, frames: np.ndarray, blur_share: float = 1 / 3, blur: tuple[int, int] = (3, 8)
    ) -> np.ndarray:
        """``frames`` (T, H, W, 3) uint8 under a lighting drift (gain 0.7-1.3 and a colour
        cast changing linearly over the clip) and, for ``blur_share`` of clips, a motion blur
        of ``blur[0]`` to ``blur[1] - 1`` pixels along one axis on a random half of the
        frames."""
        rng = self.rng
        t = np.linspace(0.0, 1.0, len(frames))[:, None, None, None]
        start, end = rng.uniform(0.7, 1.3, size=(2, 3)).astype(np.float32)
        gain = start * (1 - t) + end * t  # (T, 1, 1, 3)
        out = frames.astype(np.float32) * gain
        if rng.random() < blur_share:
            from scipy.ndimage import uniform_filter1d

            size, axis = int(rng.integers(*blur)), int(rng.integers(1, 3))
            for i in np.flatnonzero(rng.random(len(frames)) < 0.5):
                out[i] = uniform_filter1d(out[i], size=size, axis=axis - 1)
        return np.clip(out + 0.5, 0, 255).astype(np.uint8)
