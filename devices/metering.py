"""Light metering of the simulated camera's auto-exposure: what share of the frame the meter reads.

Three modes, each returning the metered reflectance of a frame (the value program-mode AE
then aims at mid-grey):

- ``average``: the whole frame, every pixel alike.
- ``center-weighted``: 60 % of the weight on the central disc of half the short side, 40 % on
  the whole frame.
- ``evaluative``: the zone metering a DSLR uses by default (Canon calls it evaluative, Nikon
  matrix; ImageNet-ES's camera was a Canon). The frame is divided into 9 x 7 zones (Canon's
  63-zone metering sensor) and linked to the active AF point, here the frame's centre: zones
  weigh by a Gaussian of their distance to the AF zone (sigma 1.5 zones); the subject's level is
  the linear mean of the AF zone and its 8 neighbours; every zone's level is limited to within
  2 stops of the subject's before averaging, so a black backdrop or a lamp in the corner
  cannot drag the exposure far from the subject's. The AF point and these constants are the
  model's (Canon does not publish its weighting); they were fixed before the model was measured.

All averages run in the sRGB-encoded domain, as a meter reading the gamma-encoded preview does.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgekit.devices.sensor import linear_to_srgb, srgb_to_linear
from edgekit.errors import InputError

METERING_MODES = ("average", "center-weighted", "evaluative")
CENTER_WEIGHT = 0.6  # centre-weighted metering: share of the weight on the central disc
CENTER_DISC_FRACTION = 0.5  # diameter of that disc / the frame's short side
EVALUATIVE_ZONES = (7, 9)  # (rows, columns) of the evaluative meter's zones
EVALUATIVE_SIGMA_ZONES = 1.5  # Gaussian fall-off of a zone's weight with distance to the AF zone
EVALUATIVE_RANGE_EV = 2.0  # zones count at most this many stops above / below the subject


def check_mode(mode: str) -> str:
    """``mode`` if it is one of METERING_MODES, else InputError naming them."""
    if mode not in METERING_MODES:
        raise InputError(f"metering must be one of {', '.join(METERING_MODES)}, got {mode!r}")
    return mode


@lru_cache(maxsize=16)
def metering_weights(shape: tuple[int, int], mode: str) -> np.ndarray:
    """(H, W) float32 per-pixel weights summing to 1 of the "average" or "center-weighted"
    mode (evaluative metering is not a fixed weighting: ``zone_weights``)."""
    h, w = shape
    uniform = np.full((h, w), 1.0 / (h * w), dtype=np.float32)
    if check_mode(mode) == "average":
        uniform.setflags(write=False)
        return uniform
    if mode != "center-weighted":
        raise InputError(f"metering mode {mode!r} has no fixed per-pixel weights")
    yy, xx = np.mgrid[0:h, 0:w]
    radius = CENTER_DISC_FRACTION * min(h, w) / 2
    disc = ((yy + 0.5 - h / 2) ** 2 + (xx + 0.5 - w / 2) ** 2 <= radius**2).astype(np.float32)
    weights = CENTER_WEIGHT * disc / disc.sum() + (1 - CENTER_WEIGHT) * uniform
    weights.setflags(write=False)
    return weights


@lru_cache(maxsize=4)
def zone_weights(zones: tuple[int, int] = EVALUATIVE_ZONES) -> tuple[np.ndarray, np.ndarray]:
    """Evaluative metering's (rows, cols) zone weights summing to 1, and the (rows, cols) bool
    mask of the subject zones (the AF zone, at the centre, and its 8 neighbours)."""
    rows, cols = zones
    yy, xx = np.mgrid[0:rows, 0:cols].astype(np.float32)
    cy, cx = (rows - 1) / 2, (cols - 1) / 2
    dist2 = (yy - cy) ** 2 + (xx - cx) ** 2
    weights = np.exp(-dist2 / (2 * EVALUATIVE_SIGMA_ZONES**2))
    weights /= weights.sum()
    subject = (np.abs(yy - cy) <= 1) & (np.abs(xx - cx) <= 1)
    weights.setflags(write=False)
    subject.setflags(write=False)
    return weights, subject


def zone_means(lum: np.ndarray, zones: tuple[int, int] = EVALUATIVE_ZONES) -> np.ndarray:
    """(H, W) luminance -> (rows, cols) mean per zone (zones split the frame as evenly as
    whole pixels allow; the frame needs at least one pixel per zone)."""
    rows, cols = zones
    h, w = lum.shape
    if h < rows or w < cols:
        raise InputError(
            f"evaluative metering needs a frame of at least {rows}x{cols}, got {h}x{w}"
        )
    ys = np.linspace(0, h, rows + 1).round().astype(int)
    xs = np.linspace(0, w, cols + 1).round().astype(int)
    sums = np.add.reduceat(np.add.reduceat(lum, ys[:-1], axis=0), xs[:-1], axis=1)
    return (sums / np.outer(np.diff(ys), np.diff(xs))).astype(np.float32)


def metered_reflectance(lum: np.ndarray, mode: str, encoded: bool = True) -> float:
    """The level the meter reads from (H, W) linear luminance in [0, 1] (reflectance x the
    lighting's colour gains), as linear reflectance. ``encoded`` averages sRGB-encoded values
    (a meter reading its preview) instead of linear ones."""
    enc = linear_to_srgb if encoded else np.asarray
    dec = srgb_to_linear if encoded else np.asarray
    if check_mode(mode) != "evaluative":
        return float(dec(np.sum(enc(lum) * metering_weights(lum.shape, mode))))
    weights, subject = zone_weights()
    levels = zone_means(lum)
    target = float(np.sum(levels * weights * subject) / np.sum(weights * subject))
    spread = 2.0**EVALUATIVE_RANGE_EV
    levels = np.clip(levels, target / spread, min(target * spread, 1.0))
    return float(dec(np.sum(enc(levels) * weights)))
