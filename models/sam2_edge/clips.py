"""Synthetic tracking clips: textured moving shapes over real photos, with exact masks.

Every clip is a pure function of ``(split, index)`` (and its size / length): the same call
returns the same frames and masks on every machine. A clip shows one *motion case* as its main
object's behaviour (plus, for most cases, a second object moving independently):

- ``linear``: straight-line motion with a slow spin;
- ``scale``: the object grows or shrinks by up to 2x while drifting;
- ``crossing``: two objects pass over one another (the one behind loses the covered pixels);
- ``occlusion``: an object passes behind an opaque bar and is fully hidden for some frames;
- ``exit``: an object leaves the frame completely and comes back.

Shapes (discs, ellipses, star-shaped polygons) are rasterised once per frame as polygons
(pixel centres inside the outline) and composited back to front; each object's mask is the set
of its pixels still visible in the final frame, so masks are exact by construction and disjoint.
Textures are cut from photos (colour-shifted) or procedural (stripes, checkers, blobs).

Splits: ``train`` draws backgrounds and photo textures from TRAIN_PHOTOS with seeds from
TRAIN_SEED; ``heldout`` uses HELDOUT_PHOTOS (stereo_motorcycle, cell, page, retina: none of them
is in TRAIN_PHOTOS) and its own seed, so held-out clips never show a training background.
``train-wide`` (a training option, ``TrainConfig.split``) draws from TRAIN_PHOTOS and
WIDE_PHOTOS (natural photos bundled with scikit-learn and matplotlib, none of them held out),
each background turned by a random flip / transposition, with its own seed.
``train-cutout`` (a training option too) draws from the same photos as ``train-wide`` but its
objects are regions cut from the photos themselves (``cutouts.py``: adjacent superpixels grown
into one irregular region, real texture, internal edges and shading, up to twice as large), the
second object often cut from the main object's photo (a distractor of the same colours), and
each clip is lit differently over time and sometimes motion-blurred.
``train-occluder`` is ``train-cutout`` with one change: in its ``occlusion`` clips the object
is hidden by another cut-out object (id 2, two to three times its size, often cut from the same
photo) that passes in front of it for many frames, instead of by a bar. A real tracked object is
hidden by other real things (a passing car, a person), and a tracker trained only on bars
learns to follow whatever covers its object.
``train-twin`` is ``train-occluder`` whose ``occlusion`` and ``exit`` clips show, instead of an
independent second object, a twin of the first (the same cut-out, outline and texture) that
drifts elsewhere in the frame the whole time: while the object is hidden or out of the frame
its mask is empty although its double is in view, as when the next identical sign or plate
comes into view after the tracked one has left.
``train-fast`` is ``train-occluder`` under fast motion (``FAST``): objects drift 3-9 pixels a
frame instead of 0.5-3, the camera pans up to 6 pixels a frame instead of 1.5, and two thirds of
the clips are motion-blurred (5-11 pixels) instead of a third, as a rider passing close to the
camera or a sign under a fast pan moves in real footage.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from edgekit.errors import InputError
from edgekit.models.sam2_edge.clip_render import background_frames, render

CASES = ("linear", "scale", "crossing", "occlusion", "exit")
TRAIN_PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "immunohistochemistry",
    "brick",
    "gravel",
    "grass",
    "camera",
    "coins",
    "moon",
    "clock",
)
HELDOUT_PHOTOS = ("stereo_motorcycle", "cell", "page", "retina")
# Further training photos for the ``train-wide`` split: scikit-learn's two sample photos,
# matplotlib's sample portrait and scikit-image's Hubble field (not text or retina images,
# which are held-out kinds).
WIDE_PHOTOS = ("china", "flower", "grace_hopper", "hubble_deep_field")
SPLIT_SEEDS = {
    "train": 1_000_003, "heldout": 7_700_011, "train-wide": 3_300_017, "train-cutout": 5_500_021,
    "train-occluder": 6_600_029, "train-twin": 8_800_037, "train-fast": 9_900_041,
}  # fmt: skip
# objects cut from photos
CUTOUT_SPLITS = ("train-cutout", "train-occluder", "train-twin", "train-fast")
# occlusion by a passing cut-out, not a bar
OCCLUDER_SPLITS = ("train-occluder", "train-twin", "train-fast")
DEFAULT_SIZE = 256
WORK_SHORT_SIDE = 320  # photos are resized to this short side before cropping backgrounds


@dataclass(frozen=True)
class Motion:
    """How fast a split's clips move, in pixels a frame at 256 x 256: the drift speed range of
    drifting objects, the camera's largest pan, and the share of cut-out clips that are
    motion-blurred with the blur lengths (lo, hi) drawn for them."""

    drift: tuple[float, float] = (0.5, 3.0)
    pan: float = 1.5
    blur_share: float = 1 / 3
    blur: tuple[int, int] = (3, 8)  # lengths lo .. hi - 1


CALM = Motion()
FAST = Motion(drift=(3.0, 9.0), pan=6.0, blur_share=2 / 3, blur=(5, 12))
MOTION = {"train-fast": FAST}  # every other split moves as CALM


@dataclass(frozen=True)
class Clip:
    """One synthetic clip.

    frames: (T, H, W, 3) uint8 RGB. masks: (T, K, H, W) bool, the visible pixels of each object
    (disjoint across objects). object_ids: K ints (1-based). case: the motion case.
    background: the photo behind the objects. hidden: (T, K) bool, True where an object has no
    visible pixel (fully occluded or outside the frame).
    """

    frames: np.ndarray
    masks: np.ndarray
    object_ids: tuple[int, ...]
    case: str
    background: str
    split: str
    index: int

    @property
    def hidden(self) -> np.ndarray:
        return ~self.masks.any(axis=(2, 3))

    @property
    def name(self) -> str:
        return f"{self.split}-{self.index:04d}-{self.case}"


# ---- photos ----------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def load_background(name: str) -> np.ndarray:
    """A bundled photo (scikit-image's; WIDE_PHOTOS also scikit-learn's and matplotlib's) as
    (H, W, 3) float32 in [0, 1], short side WORK_SHORT_SIDE."""
    from skimage.transform import resize

    known = TRAIN_PHOTOS + HELDOUT_PHOTOS + WIDE_PHOTOS
    if name not in known:
        raise InputError(f"unknown background photo '{name}'; expected one of {', '.join(known)}")
    image = np.asarray(_read_photo(name))
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    image = image[..., :3].astype(np.float32) / 255.0
    h, w = image.shape[:2]
    scale = WORK_SHORT_SIDE / min(h, w)
    out = resize(image, (round(h * scale), round(w * scale)), anti_aliasing=True, order=1)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def _read_photo(name: str) -> np.ndarray:
    """The photo ``name`` as its package ships it (uint8, grey or RGB / RGBA)."""
    if name in ("china", "flower"):
        from sklearn.datasets import load_sample_image

        return load_sample_image(f"{name}.jpg")
    if name == "grace_hopper":
        import matplotlib.cbook
        import matplotlib.image

        with matplotlib.cbook.get_sample_data("grace_hopper.jpg") as f:
            return matplotlib.image.imread(f, format="jpg")
    from skimage import data

    image = getattr(data, name)()
    return image[0] if isinstance(image, tuple) else image  # stereo_motorcycle: (left, ...)


def _photos(split: str) -> tuple[str, ...]:
    if split not in SPLIT_SEEDS:
        raise InputError(f"unknown split '{split}'; expected one of {', '.join(SPLIT_SEEDS)}")
    if split in ("train-wide", *CUTOUT_SPLITS):
        return TRAIN_PHOTOS + WIDE_PHOTOS
    return TRAIN_PHOTOS if split == "train" else HELDOUT_PHOTOS


def _turned(photo: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``photo`` (H, W, 3) under one of the 8 flips / transpositions of the square, at random."""
    k = int(rng.integers(8))
    if k & 4:
        photo = photo.transpose(1, 0, 2)
    return np.ascontiguousarray(photo[:: -1 if k & 1 else 1, :: -1 if k & 2 else 1])


# ---- textures ------------------------------------------------------------------------------
TEXTURE_SIZE = 192


def _random_colour(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0.05, 0.95, size=3).astype(np.float32)


def _procedural_texture(rng: np.random.Generator) -> np.ndarray:
    """(TEXTURE_SIZE, TEXTURE_SIZE, 3) float32: stripes, checkers or smooth blobs in 2 colours."""
    n = TEXTURE_SIZE
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32)
    a, b = _random_colour(rng), _random_colour(rng)
    kind = rng.integers(3)
    if kind == 0:  # stripes
        theta = rng.uniform(0, np.pi)
        period = rng.uniform(6, 24)
        phase = (np.cos(theta) * xx + np.sin(theta) * yy) * (2 * np.pi / period)
        weight = 0.5 + 0.5 * np.sin(phase)
    elif kind == 1:  # checkers
        cell = rng.uniform(6, 20)
        weight = ((np.floor(xx / cell) + np.floor(yy / cell)) % 2).astype(np.float32)
    else:  # smooth blobs: low-frequency noise
        from scipy.ndimage import gaussian_filter

        noise = gaussian_filter(rng.standard_normal((n, n)).astype(np.float32), rng.uniform(3, 8))
        weight = 1.0 / (1.0 + np.exp(-noise / (noise.std() + 1e-6) * 3.0))
    return (a * weight[..., None] + b * (1.0 - weight[..., None])).astype(np.float32)


def _photo_texture(rng: np.random.Generator, photos: tuple[str, ...], avoid: str) -> np.ndarray:
    """A TEXTURE_SIZE square cut from one of ``photos`` (not ``avoid``), colour-shifted."""
    choices = [p for p in photos if p != avoid]
    photo = load_background(choices[rng.integers(len(choices))])
    h, w = photo.shape[:2]
    y, x = rng.integers(0, h - TEXTURE_SIZE + 1), rng.integers(0, w - TEXTURE_SIZE + 1)
    patch = photo[y : y + TEXTURE_SIZE, x : x + TEXTURE_SIZE]
    patch = patch[..., rng.permutation(3)] * rng.uniform(0.6, 1.4, size=3)
    return np.clip(patch + rng.uniform(-0.15, 0.15, size=3), 0.0, 1.0).astype(np.float32)


def _texture(rng: np.random.Generator, photos: tuple[str, ...], avoid: str) -> np.ndarray:
    if rng.random() < 0.5:
        return _photo_texture(rng, photos, avoid)
    return _procedural_texture(rng)


# ---- shapes and motion ---------------------------------------------------------------------------
def _outline(rng: np.random.Generator, radius: float) -> np.ndarray:
    """(V, 2) canonical outline (x, y) around the origin: a disc, an ellipse or a star polygon."""
    kind = rng.integers(3)
    if kind == 2:  # star-shaped polygon, 5..9 vertices
        count = int(rng.integers(5, 10))
        angles = np.sort(rng.uniform(0, 2 * np.pi, count))
        radii = radius * rng.uniform(0.55, 1.0, count)
    else:
        angles = np.linspace(0, 2 * np.pi, 64, endpoint=False)
        aspect = 1.0 if kind == 0 else rng.uniform(0.45, 0.8)
        radii = radius * np.ones_like(angles)
        radii = radii * aspect / np.sqrt((aspect * np.cos(angles)) ** 2 + np.sin(angles) ** 2)
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1).astype(np.float64)


def _shape(rng: np.random.Generator, texture, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(outline, texture) of a synthetic object: a disc, ellipse or star, then its texture."""
    return _outline(rng, radius), texture()


@dataclass
class _Object:
    outline: np.ndarray  # (V, 2) canonical (x, y)
    texture: np.ndarray  # (S, S, 3) float32
    centres: np.ndarray  # (T, 2) (x, y) in pixels
    scales: np.ndarray  # (T,)
    angles: np.ndarray  # (T,) radians


def _linear_path(start: np.ndarray, end: np.ndarray, frames: int) -> np.ndarray:
    t = np.linspace(0.0, 1.0, frames)[:, None]
    return start[None] * (1 - t) + end[None] * t


def _bounce(path: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``path`` (T, 2) folded into [lo, hi] on each axis, as a ball bouncing off walls."""
    if hi <= lo:
        return np.full_like(path, (lo + hi) / 2)
    span = hi - lo
    folded = np.mod(path - lo, 2 * span)
    return lo + np.where(folded > span, 2 * span - folded, folded)


def _spin(rng: np.random.Generator, frames: int) -> np.ndarray:
    return rng.uniform(0, 2 * np.pi) + np.linspace(0, rng.uniform(-0.6, 0.6), frames)


def _inside_point(rng: np.random.Generator, size: int, margin: float) -> np.ndarray:
    return rng.uniform(margin, size - margin, size=2)


def _drifting(rng, size, frames, radius, shape, scale_to=1.0, motion=CALM) -> _Object:
    start = _inside_point(rng, size, radius * max(1.0, scale_to) + 4)
    step = rng.uniform(*motion.drift) * frames
    direction = rng.uniform(0, 2 * np.pi)
    heading = np.array([np.cos(direction), np.sin(direction)])
    if motion == CALM:  # a straight path, stopped at the border
        path = _linear_path(start, np.clip(start + step * heading, radius, size - radius), frames)
    else:  # at full speed all the way, bouncing off the borders
        path = _bounce(_linear_path(start, start + step * heading, frames), radius, size - radius)
    return _Object(
        *shape(radius),
        path,
        np.linspace(1.0, scale_to, frames),
        _spin(rng, frames),
    )


def _occluded_by_object(rng, size, frames, shape) -> list[_Object]:
    """An ``occlusion`` clip without a bar: the object (id 1) drifts slowly while a larger one
    (id 2, radius 1.8-2.6x) crosses the frame in front of it along a line through where the
    first one is mid-clip, so the first is hidden for a stretch of frames (about a quarter of
    the clip) and visible at both ends."""
    r = rng.uniform(0.07, 0.11) * size
    drift = rng.uniform(0.0, 1.0) * frames * rng.choice([-1.0, 1.0], size=2) / 2
    start = _inside_point(rng, size, r + abs(drift).max() + 4)
    hidden = _Object(
        *shape(r), _linear_path(start, start + drift, frames), np.ones(frames), _spin(rng, frames)
    )
    meet = hidden.centres[frames // 2]
    direction = rng.uniform(0, 2 * np.pi)
    unit = np.array([np.cos(direction), np.sin(direction)])
    reach = rng.uniform(0.35, 0.5) * size
    cover = _Object(
        *shape(r * rng.uniform(1.8, 2.6)),
        _linear_path(meet - reach * unit, meet + reach * unit, frames),
        np.ones(frames),
        _spin(rng, frames) * 0.3,
    )
    return [hidden, cover]


def _twin(rng, size, frames, original: _Object, motion=CALM) -> _Object:
    """A double of ``original`` (its outline and texture, its scale on frame 0) drifting on a
    path of its own inside the frame."""
    extent = float(np.abs(original.outline).max() * original.scales[0])
    copy = lambda _radius: (original.outline, original.texture)  # noqa: E731
    double = _drifting(rng, size, frames, extent, copy, motion=motion)
    return _Object(
        double.outline, double.texture, double.centres,
        np.full(frames, original.scales[0]), double.angles,
    )  # fmt: skip


def _case_objects(
    case, rng, size, frames, shape, enlarge=None, occluder=False, twin=False, motion=CALM
) -> tuple[list[_Object], list[int], tuple | None]:
    """The objects of one motion case (the case's own first), their drawing order (back to
    front) and the occluding bar (axis, lo, hi) or None. ``shape(radius)`` -> (outline,
    texture); ``enlarge()``, where given, scales the radius of objects that need not hide behind
    a bar or leave the frame (linear, scale, crossing, the second object). With ``occluder``
    an occlusion is by a second object passing in front (``_occluded_by_object``), not a bar;
    with ``twin`` an occlusion or exit clip adds a twin of the first object (``_twin``);
    ``motion`` sets how fast drifting objects move."""
    larger = enlarge or (lambda: 1.0)
    radius = lambda: rng.uniform(0.08, 0.17) * size  # noqa: E731
    bar = None
    if case == "linear":
        objects = [_drifting(rng, size, frames, radius() * larger(), shape, motion=motion)]
    elif case == "scale":
        grow = rng.random() < 0.5
        factor = rng.uniform(1.5, 2.0)
        r = radius() * (0.7 if grow else 1.0) * larger()
        scale_to = factor if grow else 1 / factor
        objects = [_drifting(rng, size, frames, r, shape, scale_to, motion)]
    elif case == "crossing":
        meet = rng.uniform(0.4, 0.6, size=2) * size  # both centres pass here mid-clip
        direction = rng.uniform(0, 2 * np.pi)
        objects = []
        for turn in (0.0, rng.uniform(0.35, 0.65) * np.pi):
            unit = np.array([np.cos(direction + turn), np.sin(direction + turn)])
            reach = rng.uniform(0.25, 0.35) * size
            objects.append(
                _Object(
                    *shape(radius() * larger()),
                    _linear_path(meet + reach * unit, meet - reach * unit, frames),
                    np.ones(frames),
                    _spin(rng, frames),
                )
            )
    elif case == "occlusion" and occluder:
        objects = _occluded_by_object(rng, size, frames, shape)
    elif case == "occlusion":
        r = rng.uniform(0.06, 0.1) * size
        axis = int(rng.integers(2))  # 0: vertical bar (object moves along x), 1: horizontal
        centre = rng.uniform(0.45, 0.55) * size
        half = r + rng.uniform(0.8, 1.2) * r  # the object fits behind the bar with room to spare
        bar = (axis, centre - half, centre + half)
        middle = (frames - 1) / 2
        speed = (half + r + 2) / middle * rng.uniform(1.0, 1.15) * rng.choice([-1.0, 1.0])
        along = centre + (np.arange(frames) - middle) * speed  # starts beside the bar, visible
        cross = np.full(frames, rng.uniform(0.25, 0.75) * size)
        xy = np.stack([along, cross], 1) if axis == 0 else np.stack([cross, along], 1)
        objects = [_Object(*shape(r), xy, np.ones(frames), _spin(rng, frames))]
    elif case == "exit":
        r = rng.uniform(0.07, 0.12) * size
        direction = int(rng.integers(4))  # leave through left, right, top or bottom
        t = np.linspace(0.0, 1.0, frames)
        along = 0.3 * size + (1.0 * size) * np.sin(np.pi * t)  # out past the edge and back
        across = rng.uniform(0.25, 0.75) * size + np.linspace(0, rng.uniform(-20, 20), frames)
        coord = along if direction in (1, 3) else size - along
        xy = np.stack([coord, across], 1) if direction < 2 else np.stack([across, coord], 1)
        objects = [_Object(*shape(r), xy, np.ones(frames), _spin(rng, frames))]
    else:
        raise InputError(f"unknown motion case '{case}'; expected one of {', '.join(CASES)}")
    order = list(range(len(objects)))  # back to front
    if twin and case in ("occlusion", "exit"):
        objects.append(_twin(rng, size, frames, objects[0], motion))
        order.append(len(objects) - 1)  # in front: the twin stays in view
    # an independent second object (id 2) where the case has one object
    elif case != "crossing" and len(objects) == 1 and rng.random() < 0.6:
        objects.append(_drifting(rng, size, frames, radius() * larger(), shape, motion=motion))
        order.insert(int(rng.integers(2)), 1)
    return objects, order, bar


def make_clip(
    split: str = "train",
    index: int = 0,
    *,
    frames: int = 8,
    size: int = DEFAULT_SIZE,
    case: str | None = None,
    flat: bool = False,
) -> Clip:
    """The clip number ``index`` of ``split``: deterministic in all its arguments.

    ``case`` defaults to CASES[index % 5]. ``flat`` renders every object in one solid colour
    (``clip_render.FLAT_COLOURS[k % 3]``, k = id - 1) over black with a white bar (for checking masks against pixels).
    Returns a Clip with frames (T, size, size, 3) uint8 and masks (T, K, size, size) bool.
    """
    if frames < 3 or size < 32:
        raise InputError(
            f"a clip needs frames >= 3 and size >= 32, got frames={frames}, size={size}"
        )
    photos = _photos(split)
    motion = MOTION.get(split, CALM)
    case = CASES[index % len(CASES)] if case is None else case
    if case not in CASES:
        raise InputError(f"unknown motion case '{case}'; expected one of {', '.join(CASES)}")
    for attempt in range(100):
        rng = np.random.default_rng([SPLIT_SEEDS[split], index, frames, size, attempt])
        background = photos[int(rng.integers(len(photos)))]
        if split in CUTOUT_SPLITS:
            from edgekit.models.sam2_edge.cutouts import CutoutShapes

            shapes = CutoutShapes(rng, photos, background)
            objects, order, bar = _case_objects(
                case, rng, size, frames, shapes, shapes.enlarge,
                split in OCCLUDER_SPLITS, split == "train-twin", motion,
            )  # fmt: skip
        else:
            shape = partial(_shape, rng, partial(_texture, rng, photos, background))
            objects, order, bar = _case_objects(case, rng, size, frames, shape)
        bar_texture = _texture(rng, photos, background)
        photo = load_background(background)
        if split == "train-wide":
            photo = _turned(photo, rng)
        base = background_frames(rng, photo, size, frames, motion.pan)
        pixels, masks, overlapped = render(objects, order, bar, bar_texture, base, flat)
        if split in CUTOUT_SPLITS and not flat:
            pixels = shapes.relight(pixels, motion.blur_share, motion.blur)
        first_area = masks[0].sum(axis=(1, 2)).min()
        occluded = split in OCCLUDER_SPLITS and case == "occlusion"
        if first_area >= 0.004 * size * size and _case_happens(case, masks, overlapped, occluded):
            ids = tuple(range(1, len(objects) + 1))
            return Clip(pixels, masks, ids, case, background, split, index)
    raise RuntimeError(
        f"could not draw a valid '{case}' clip for {split}/{index}"
    )  # pragma: no cover


def _case_happens(case: str, masks: np.ndarray, overlapped: bool, occluded=False) -> bool:
    """The case's event is in the clip: an object hidden for a while and visible again at the
    end (occlusion, exit), or one object passing over another (crossing). ``occluded``: the
    first object is visible on the first and last frames and hidden behind the second for at
    least an eighth of the frames (two at least)."""
    hidden = ~masks.any(axis=(2, 3))  # (T, K)
    if occluded:
        first = hidden[:, 0]
        return not first[0] and not first[-1] and first.sum() >= max(2, len(first) // 8)
    if case in ("occlusion", "exit"):
        back = hidden.any(axis=0) & ~hidden[-1]  # hidden at some point, visible at the end
        return bool(back.any())
    if case == "crossing":
        return overlapped
    return True


def clip_set(
    split: str, count: int, *, frames: int = 8, size: int = DEFAULT_SIZE, start: int = 0
) -> list[Clip]:
    """``count`` consecutive clips of ``split`` (every case in turn)."""
    return [make_clip(split, start + i, frames=frames, size=size) for i in range(count)]
