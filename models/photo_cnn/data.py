"""Crops of scikit-image's bundled photos: class = which photo a crop comes from.

Each photo is split along its longer side: the band from 40 % to 60 % is held out, the two sides
are the training region, so held-out crops never overlap pixels seen in training. Crops are cut and
resized to 64x64 in one bilinear ``grid_sample`` (square boxes, random scale and position,
horizontal flips), from an anti-aliased pyramid level so large boxes do not alias. Training crops
then get camera-like photometric augmentation: exposure (+-1.3 stops, clipped), white balance,
contrast, saturation, gamma, blur and signal-dependent noise. The sensor-aware recipe adds
``extreme_captures``: crops re-rendered far outside a good exposure, each with the share of
the crop's information that survived (its training target is smoothed by the share lost); the
sensor-rendered recipe adds ``camera_renders``: several captures of one crop near a good exposure,
differing in noise, blur and exposure as a camera's candidate settings do.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from edgekit.devices.scenes import HELDOUT_BAND, PHOTOS, load_photo
from edgekit.models.photo_cnn.net import IMAGE_SIZE

SHORT_SIDE = 256  # photos are resized (anti-aliased) so their short side is this many pixels
MAX_ZOOM_OUT = 1.5  # a box at most this many pixels per output pixel on a pyramid level


@dataclass(frozen=True)
class Photo:
    """One source photo as RGB float32 (3, H, W) in [0, 1], plus a 2x-smaller pyramid level."""

    name: str
    full: torch.Tensor  # (3, H, W), short side SHORT_SIDE
    half: torch.Tensor  # (3, H/2, W/2), anti-aliased

    def regions(self, split: str) -> list[tuple[float, float, float, float]]:
        """Rectangles (x0, y0, x1, y1) in pixels of ``full`` for "train" or "test".

        The held-out band covers HELDOUT_BAND of the longer side; training uses both sides.
        """
        _, h, w = self.full.shape
        length = float(max(h, w))
        lo, hi = HELDOUT_BAND[0] * length, HELDOUT_BAND[1] * length
        spans = [(lo, hi)] if split == "test" else [(0.0, lo), (hi, length)]
        if w >= h:
            return [(a, 0.0, b, float(h)) for a, b in spans]
        return [(0.0, a, float(w), b) for a, b in spans]


def _load_rgb(name: str) -> torch.Tensor:
    image = load_photo(name)  # (H, W, 3)
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))  # (3, H, W)


def _resize(image: torch.Tensor, short: int) -> torch.Tensor:
    _, h, w = image.shape
    scale = short / min(h, w)
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    out = F.interpolate(
        image[None], size=size, mode="bilinear", antialias=True, align_corners=False
    )
    return out[0].clamp(0.0, 1.0)


@lru_cache(maxsize=1)
def load_photos() -> tuple[Photo, ...]:
    """The PHOTOS, in class order, resized to SHORT_SIDE (cached for the process)."""
    photos = []
    for name in PHOTOS:
        full = _resize(_load_rgb(name), SHORT_SIDE)
        photos.append(Photo(name, full, _resize(full, SHORT_SIDE // 2)))
    return tuple(photos)


def sample_crops(
    photo: Photo,
    count: int,
    split: str,
    scale: tuple[float, float],
    generator: torch.Generator,
    flip: bool,
) -> torch.Tensor:
    """``count`` square crops (count, 3, 64, 64) from ``split``'s region of ``photo``.

    Each crop picks one of the split's rectangles at random; box sides are ``scale`` x the
    photo's short side (uniform), clipped to fit the rectangle.
    """
    _, h, w = photo.full.shape
    rects = torch.tensor(photo.regions(split))  # (R, 4)
    u = torch.rand(count, 5, generator=generator)
    x0, y0, x1, y1 = rects[(u[:, 4] * len(rects)).long().clamp(max=len(rects) - 1)].unbind(1)
    side = SHORT_SIDE * (scale[0] + (scale[1] - scale[0]) * u[:, 0])  # (count,) pixels
    side = torch.minimum(side, torch.minimum(x1 - x0, y1 - y0))
    cx = x0 + side / 2 + u[:, 1] * (x1 - x0 - side)
    cy = y0 + side / 2 + u[:, 2] * (y1 - y0 - side)
    sign = torch.where(u[:, 3] < 0.5, -1.0, 1.0) if flip else torch.ones(count)
    theta = torch.zeros(count, 2, 3)
    theta[:, 0, 0] = sign * side / w
    theta[:, 0, 2] = 2 * cx / w - 1
    theta[:, 1, 1] = side / h
    theta[:, 1, 2] = 2 * cy / h - 1
    grid = F.affine_grid(theta, [count, 3, IMAGE_SIZE, IMAGE_SIZE], align_corners=False)
    out = torch.empty(count, 3, IMAGE_SIZE, IMAGE_SIZE)
    use_half = side > MAX_ZOOM_OUT * IMAGE_SIZE  # large boxes sample the 2x-smaller level
    for level, picked in ((photo.full, ~use_half), (photo.half, use_half)):
        idx = picked.nonzero().flatten()
        if len(idx):
            src = level[None].expand(len(idx), -1, -1, -1)
            out[idx] = F.grid_sample(src, grid[idx], mode="bilinear", align_corners=False)
    return out.clamp(0.0, 1.0)


def _gaussian_blur(x: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    taps = torch.arange(-2, 3, dtype=torch.float32)
    k = torch.exp(-(taps**2) / (2 * sigma**2))
    k = k / k.sum()
    kernel = (k[:, None] * k[None, :]).expand(3, 1, 5, 5)
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="replicate"), kernel, groups=3)


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Camera-like photometric jitter of crops (N, 3, 64, 64) in [0, 1]; returns a new tensor."""
    n = x.shape[0]

    def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(n, *shape, generator=generator)

    exposure = 2.0 ** uniform(-1.3, 1.3, 1, 1, 1)  # +-1.3 stops
    white_balance = uniform(0.85, 1.15, 3, 1, 1)
    x = (x * exposure * white_balance).clamp(0.0, 1.0)
    grey = x.mean(dim=1, keepdim=True)  # (N, 1, 64, 64)
    x = grey + uniform(0.6, 1.3, 1, 1, 1) * (x - grey)  # saturation
    level = x.mean(dim=(1, 2, 3), keepdim=True)
    x = (level + uniform(0.6, 1.4, 1, 1, 1) * (x - level)).clamp(0.0, 1.0)
    x = x ** (2.0 ** uniform(-0.5, 0.5, 1, 1, 1))  # gamma 0.7 .. 1.4
    blurred = torch.rand(n, 1, 1, 1, generator=generator) < 0.3
    x = torch.where(blurred, torch.lerp(x, _gaussian_blur(x), uniform(0.3, 1.0, 1, 1, 1)), x)
    read_noise, shot_noise = uniform(0.0, 0.03, 1, 1, 1), uniform(0.0, 0.04, 1, 1, 1)
    sigma = read_noise + shot_noise * x.clamp(min=0.0).sqrt()
    x = x + sigma * torch.randn(x.shape, generator=generator)
    return x.clamp(0.0, 1.0)


EXTREME_STOPS = (-7.0, 5.0)  # exposure of extreme captures, stops from the crop's own
EXTREME_GAMMA = 2.2  # sRGB-like encoding the crops are linearised with


def _sensor_capture(
    linear: torch.Tensor, gain: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear-light images (N, 3, 64, 64) through a sensor at analogue ``gain`` (N, 1, 1, 1) in
    [0, 1]: signal-dependent noise (sigma = (0.002 + 0.3 g^2) sqrt(signal + 0.01)), clipping to
    [0, 1], re-encoding and 8-bit quantisation. Returns (captures, sigma), both (N, 3, 64, 64)."""
    sigma = (0.002 + 0.3 * gain**2) * (linear.clamp(min=0.0) + 0.01).sqrt()
    noisy = linear + sigma * torch.randn(linear.shape, generator=generator)
    captured = noisy.clamp(0.0, 1.0) ** (1 / EXTREME_GAMMA)
    return (captured * 255).round() / 255, sigma


def extreme_captures(
    x: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crops (N, 3, 64, 64) in [0, 1] as a camera would capture them far from a good exposure.

    In linear light each crop is scaled by 2^U(EXTREME_STOPS) and goes through
    ``_sensor_capture`` at a random gain g ~ U(0, 1). Returns (images (N, 3, 64, 64), lost (N,)):
    the share of information lost, 1 - min(contrast kept, SNR / 4), in [0, 1], where contrast
    kept = std(capture) / std(crop) (clipping flattens it) and SNR = mean signal / mean sigma.
    """
    n = x.shape[0]
    stops = EXTREME_STOPS[0] + (EXTREME_STOPS[1] - EXTREME_STOPS[0]) * torch.rand(
        n, 1, 1, 1, generator=generator
    )
    gain = torch.rand(n, 1, 1, 1, generator=generator)
    linear = x**EXTREME_GAMMA * 2.0**stops
    captured, sigma = _sensor_capture(linear, gain, generator)
    contrast = captured.std(dim=(1, 2, 3)) / x.std(dim=(1, 2, 3)).clamp(min=1e-3)
    snr = linear.mean(dim=(1, 2, 3)) / sigma.mean(dim=(1, 2, 3)).clamp(min=1e-6)
    kept = torch.minimum(contrast.clamp(0.0, 1.0), (snr / 4).clamp(0.0, 1.0))
    return captured, 1.0 - kept


RENDER_STOPS = (-2.5, 1.0)  # exposure of camera renders: near a good one, as Lens's candidates
RENDER_DEFOCUS_PX = (0.3, 1.8)  # Gaussian defocus sigma, output pixels
RENDER_SHAKE_PX = 6.0  # longest camera-shake streak, output pixels
BLUR_TAPS = 11  # blur kernel side (pixels)


def blur_kernels(defocus: torch.Tensor, streak: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Per-image blur kernels (N, BLUR_TAPS, BLUR_TAPS) summing to 1: a straight camera-shake
    streak of ``streak`` pixels at ``angle`` radians, each point a Gaussian of sigma ``defocus``
    pixels (all (N,))."""
    half = BLUR_TAPS // 2
    taps = torch.arange(-half, half + 1, dtype=torch.float32)
    v, u = torch.meshgrid(taps, taps, indexing="ij")  # (T, T) rows = y, columns = x
    along = torch.linspace(-0.5, 0.5, 9)[None, :] * streak[:, None]  # (N, 9) pixels
    cx = (along * torch.cos(angle)[:, None])[:, :, None, None]  # (N, 9, 1, 1)
    cy = (along * torch.sin(angle)[:, None])[:, :, None, None]
    s2 = 2 * defocus[:, None, None, None] ** 2
    kernel = torch.exp(-((u - cx) ** 2 + (v - cy) ** 2) / s2).sum(dim=1)  # (N, T, T)
    return kernel / kernel.sum(dim=(1, 2), keepdim=True)


def camera_renders(x: torch.Tensor, renders: int, generator: torch.Generator) -> torch.Tensor:
    """``renders`` captures of each crop (N, 3, 64, 64) in [0, 1], as a camera's good-to-fair
    settings would take them: (N * renders, 3, 64, 64), crop i's renders at rows
    i * renders .. (i + 1) * renders - 1.

    Each render draws its own exposure 2^U(RENDER_STOPS) in linear light, defocus (Gaussian
    sigma U(RENDER_DEFOCUS_PX)) and camera shake (a streak up to RENDER_SHAKE_PX at a random
    angle) blur, then ``_sensor_capture`` at a random gain: the renders of one crop differ the
    way Lens's candidate captures of one scene do (noise against blur against exposure).
    """
    n = x.shape[0] * renders
    rand = torch.rand(n, 5, generator=generator)
    stops = RENDER_STOPS[0] + (RENDER_STOPS[1] - RENDER_STOPS[0]) * rand[:, 0]
    defocus = RENDER_DEFOCUS_PX[0] + (RENDER_DEFOCUS_PX[1] - RENDER_DEFOCUS_PX[0]) * rand[:, 1]
    kernels = blur_kernels(defocus, RENDER_SHAKE_PX * rand[:, 2], torch.pi * rand[:, 3])
    linear = x.repeat_interleave(renders, dim=0) ** EXTREME_GAMMA  # (n, 3, H, W)
    pad = BLUR_TAPS // 2
    padded = F.pad(linear, (pad, pad, pad, pad), mode="replicate")  # (n, 3, H + 2p, W + 2p)
    weight = kernels.repeat_interleave(3, dim=0)[:, None]  # (3n, 1, T, T): one per channel
    blurred = F.conv2d(padded.flatten(0, 1)[None], weight, groups=3 * n).view(linear.shape)
    exposed = blurred * (2.0**stops)[:, None, None, None]
    return _sensor_capture(exposed, rand[:, 4, None, None, None], generator)[0]


TRAIN_SCALE = (0.1, 0.35)  # box side / short side, training region
TEST_SCALE = (0.12, 0.2)  # held-out boxes (the held-out band is 0.2 of the long side)


def train_batch(
    batch_size: int, generator: torch.Generator, augmented: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """A class-balanced batch of training crops: (images (B, 3, 64, 64), labels (B,) int64)."""
    photos = load_photos()
    labels = torch.arange(batch_size) % len(photos)
    labels = labels[torch.randperm(batch_size, generator=generator)]
    images = torch.empty(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE)
    for cls, photo in enumerate(photos):
        idx = (labels == cls).nonzero().flatten()
        if len(idx):
            images[idx] = sample_crops(photo, len(idx), "train", TRAIN_SCALE, generator, True)
    if augmented:
        images = augment(images, generator)
    return images, labels


@lru_cache(maxsize=4)
def heldout_set(per_class: int = 48, seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed held-out crops (10 * per_class, 3, 64, 64) in [0, 1] and labels (N,) int64.

    Clean crops (no photometric jitter, no flips) from each photo's held-out region.
    """
    generator = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for cls, photo in enumerate(load_photos()):
        images.append(sample_crops(photo, per_class, "test", TEST_SCALE, generator, False))
        labels.append(torch.full((per_class,), cls, dtype=torch.int64))
    return torch.cat(images), torch.cat(labels)


@lru_cache(maxsize=2)
def heldout_exposure_set(seed: int = 4321) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out crops under seeded camera-like jitter (exposure, colour, blur, noise)."""
    images, labels = heldout_set()
    return augment(images, torch.Generator().manual_seed(seed)), labels
