"""A physically based camera sensor model (pure numpy, vectorised): scene -> 8-bit sRGB capture.

Pipeline for one capture (ISO S, shutter t, f-number N, scene illuminance E in lux):

1. Optics: the scene (linear RGB reflectance in [0, 1]) is blurred by defocus (circle of confusion
   ~ 1/N around a tilted focus plane), diffraction (Airy core ~ lambda * N) and camera shake (a
   straight streak ~ t, direction drawn per capture).
2. Exposure: focal-plane illuminance E_v = E * rho * T / (4 N^2) (Lambertian scene, lens
   transmittance T), times t gives H in lux-seconds; photo-electrons = H * ELECTRONS_PER_LUX_S.
   Coloured illuminants scale the RGB channels; mains flicker modulates E over the exposure.
3. Sensor: full-well clipping, Poisson shot noise (signal + dark current ~ t), Gaussian read noise
   before the gain, analogue gain ~ S / 100 (saturation-based ISO: ISO 100 fills the ADC at
   H = 0.78 lux s), Gaussian ADC noise after the gain, black level, 12-bit quantisation.
4. ISP: black-level subtraction, white balance (grey world or given gains), a Reinhard-style tone
   curve that maps the metered mid-tone to 18 % grey, sRGB encoding, 8-bit output.

All constants below are documented with their physical meaning. ``simulate`` is deterministic for a
given ``np.random.Generator`` state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

# --- Physics constants -------------------------------------------------------------------------
PHOTONS_PER_LUX_S_M2 = 1.0e16  # broadband visible photons per (lux * s * m^2) (~4.1e15 at 555 nm)
REFLECTED_METER_K = 12.5  # ISO 2720 reflected-light meter calibration constant (cd s / m^2)
SATURATION_H_ISO100 = 0.78  # lux*s that saturates at ISO 100 (ISO 12232 saturation-based: 78/S)
WAVELENGTH_UM = 0.55  # wavelength used for diffraction (green, micrometres)
AIRY_SIGMA_PER_LAMBDA_N = 0.42  # Gaussian sigma of the Airy core = 0.42 * lambda * N
D65_CCT_K = 6504.0  # white point the illuminant colours are normalised to


@dataclass(frozen=True)
class SensorParams:
    """Sensor + lens constants of one simulated camera (defaults: a 1/2.3" 12-bit CMOS module)."""

    pixel_pitch_um: float = 2.4  # sensor pixel pitch (micrometres)
    sensor_short_mm: float = 4.55  # short side of the sensor (1/2.3" type: 6.17 x 4.55 mm)
    quantum_efficiency: float = 0.55  # mean photo-electrons per incident visible photon
    lens_transmittance: float = 0.9  # fraction of light passing the lens
    full_well_e: float = 30000.0  # electrons a pixel holds before it clips
    read_noise_e: float = 2.0  # read noise before the analogue gain (electrons, rms)
    adc_noise_dn: float = 1.5  # noise after the gain, at the ADC (12-bit DN, rms)
    dark_current_e_per_s: float = 8.0  # thermal electrons per pixel per second (~40 C)
    adc_bits: int = 12  # ADC resolution
    black_level_dn: float = 64.0  # ADC offset added before quantisation and subtracted by the ISP
    base_iso: float = 100.0  # ISO at unity analogue gain
    readout_s: float = 0.02  # rolling readout time of one frame (seconds)
    # Optics (blur sizes are fractions of the frame's short side, so any output size looks alike)
    focus_error: float = 0.25  # defocus at the frame centre, relative depth units (0 = in focus)
    focus_tilt: float = 0.4  # extra defocus from top to bottom edge (the scene plane is tilted)
    coc_frac_at_f1: float = 0.06  # CoC sigma at f/1 per unit focus error (fraction of short side)
    shake_frac_per_s: float = 0.04  # camera-shake streak per second of exposure (fraction of short)

    @property
    def electrons_per_lux_s(self) -> float:
        """Photo-electrons per pixel per lux-second of focal-plane exposure."""
        area_m2 = (self.pixel_pitch_um * 1e-6) ** 2
        return PHOTONS_PER_LUX_S_M2 * area_m2 * self.quantum_efficiency

    @property
    def adc_max(self) -> float:
        return float(2**self.adc_bits - 1)

    def gain_dn_per_e(self, iso: float) -> float:
        """Conversion gain (DN per electron) at ``iso``: ISO 100 puts SATURATION_H_ISO100 at full scale."""
        e_sat = SATURATION_H_ISO100 * self.electrons_per_lux_s
        return (iso / self.base_iso) * (self.adc_max - self.black_level_dn) / e_sat


DEFAULT_SENSOR = SensorParams()


@dataclass
class SensorOutput:
    """One simulated capture: ``image`` (H, W, 3) uint8 sRGB, ``raw`` (H, W, 3) uint16 DN."""

    image: np.ndarray
    raw: np.ndarray
    electrons_mean: float
    clipped_fraction: float
    exposure_lux_s: float
    info: dict[str, float] = field(default_factory=dict)


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] (any shape) -> linear light, float32."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    """Linear light in [0, 1] (any shape) -> sRGB-encoded values in [0, 1], float32."""
    x = np.clip(np.asarray(x, dtype=np.float32), 0.0, 1.0)
    return np.where(x <= 0.0031308, x * 12.92, 1.055 * np.power(x, 1 / 2.4) - 0.055).astype(
        np.float32
    )


def luminance(linear_rgb: np.ndarray) -> np.ndarray:
    """Rec. 709 relative luminance of (..., 3) linear RGB -> (...)."""
    return linear_rgb @ np.array([0.2126, 0.7152, 0.0722], dtype=np.float32)


def _lobe(lam: np.ndarray, mu: float, s1: float, s2: float) -> np.ndarray:
    s = np.where(lam < mu, s1, s2)
    return np.exp(-0.5 * ((lam - mu) / s) ** 2)


def _blackbody_rgb(cct_k: float) -> np.ndarray:
    """Linear sRGB (Y = 1) of a blackbody at ``cct_k`` (analytic CIE 1931 CMF fit, 380-780 nm)."""
    lam = np.arange(380.0, 781.0, 5.0)
    xb = 1.056 * _lobe(lam, 599.8, 37.9, 31.0) + 0.362 * _lobe(lam, 442.0, 16.0, 26.7)
    xb -= 0.065 * _lobe(lam, 501.1, 20.4, 26.2)
    yb = 0.821 * _lobe(lam, 568.8, 46.9, 40.5) + 0.286 * _lobe(lam, 530.9, 16.3, 31.1)
    zb = 1.217 * _lobe(lam, 437.0, 11.8, 36.0) + 0.681 * _lobe(lam, 459.0, 26.0, 13.8)
    m = lam * 1e-9
    planck = 1.0 / (m**5 * (np.exp(1.4388e-2 / (m * cct_k)) - 1.0))  # c2 = hc/k = 1.4388e-2 m K
    xyz = np.array([(planck * xb).sum(), (planck * yb).sum(), (planck * zb).sum()])
    xyz_to_rgb = np.array(
        [[3.2406, -1.5372, -0.4986], [-0.9689, 1.8758, 0.0415], [0.0557, -0.2040, 1.0570]]
    )
    return xyz_to_rgb @ (xyz / xyz[1])


def illuminant_rgb(cct_k: float) -> tuple[float, float, float]:
    """Per-channel gains (linear RGB, luminance 1) of a blackbody light relative to D65 white."""
    rgb = np.clip(_blackbody_rgb(cct_k) / _blackbody_rgb(D65_CCT_K), 0.005, None)
    rgb = rgb / float(luminance(rgb.astype(np.float32)))
    return (float(rgb[0]), float(rgb[1]), float(rgb[2]))


def flicker_factor(
    shutter_s: float, depth: float, freq_hz: float, rng: np.random.Generator
) -> float:
    """Mean of 1 + depth*sin(2 pi f tau + phi) over an exposure [0, t] with a random phase."""
    if depth <= 0 or freq_hz <= 0:
        return 1.0
    phi = rng.uniform(0.0, 2 * math.pi)
    w = 2 * math.pi * freq_hz
    return 1.0 + depth * (math.cos(phi) - math.cos(w * shutter_s + phi)) / (w * shutter_s)


def _gaussian_blur(image: np.ndarray, sigma_px: float) -> np.ndarray:
    if sigma_px < 0.2:
        return image
    from scipy.ndimage import gaussian_filter

    return gaussian_filter(image, sigma=(sigma_px, sigma_px, 0), mode="nearest", truncate=3.0)


def blur_sigmas(
    shape: tuple[int, int], aperture_f: float, params: SensorParams = DEFAULT_SENSOR
) -> tuple[float, float, float]:
    """(defocus sigma at the top row, at the bottom row, diffraction sigma) in output pixels."""
    short = min(shape)
    top = abs(params.focus_error - params.focus_tilt / 2)
    bottom = abs(params.focus_error + params.focus_tilt / 2)
    coc = params.coc_frac_at_f1 * short / aperture_f
    diff_um = AIRY_SIGMA_PER_LAMBDA_N * WAVELENGTH_UM * aperture_f
    diff_px = diff_um / (params.sensor_short_mm * 1000.0) * short
    return coc * top, coc * bottom, diff_px


def optical_blur(
    image: np.ndarray, aperture_f: float, params: SensorParams = DEFAULT_SENSOR
) -> np.ndarray:
    """Defocus (depth ramp, blended per row between two Gaussians) + diffraction; (H, W, 3)."""
    h, w, _ = image.shape
    top, bottom, diff = blur_sigmas((h, w), aperture_f, params)
    s_top, s_bot = math.hypot(top, diff), math.hypot(bottom, diff)
    a = _gaussian_blur(image, s_top)
    if abs(s_bot - s_top) < 0.05:
        return a
    b = _gaussian_blur(image, s_bot)
    ramp = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    return a * (1 - ramp) + b * ramp


def streak_kernel(length_px: float, angle_rad: float) -> dict[tuple[int, int], float]:
    """A straight blur streak as {(dy, dx): weight}: points every 0.25 px, bilinearly splatted."""
    samples = max(2, int(math.ceil(length_px * 4)) + 1)
    weights: dict[tuple[int, int], float] = {}
    for s in np.linspace(-length_px / 2, length_px / 2, samples):
        y, x = s * math.sin(angle_rad), s * math.cos(angle_rad)
        y0, x0 = math.floor(y), math.floor(x)
        fy, fx = y - y0, x - x0
        for dy, dx, wgt in (
            (y0, x0, (1 - fy) * (1 - fx)),
            (y0 + 1, x0, fy * (1 - fx)),
            (y0, x0 + 1, (1 - fy) * fx),
            (y0 + 1, x0 + 1, fy * fx),
        ):
            if wgt > 1e-6:
                weights[(dy, dx)] = weights.get((dy, dx), 0.0) + wgt / samples
    return weights


def motion_blur(image: np.ndarray, length_px: float, angle_rad: float) -> np.ndarray:
    """Average of (H, W, 3) ``image`` along a straight streak of ``length_px`` (edge padded).

    Sub-pixel exact (bilinear splatting), so blur grows smoothly with the streak length.
    """
    if length_px < 0.05:
        return image
    h, w, _ = image.shape
    kernel = streak_kernel(length_px, angle_rad)
    pad = max(max(abs(dy), abs(dx)) for dy, dx in kernel)
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
    out = np.zeros_like(image)
    for (dy, dx), wgt in kernel.items():
        out += np.float32(wgt) * padded[pad + dy : pad + dy + h, pad + dx : pad + dx + w]
    return out


POISSON_EXACT_BELOW = 3.0  # mean electrons below which shot noise is drawn exactly (Poisson)


def shot_noise(mean_e: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Poisson photon/dark-current counts for float32 means (any shape), vectorised.

    Means >= POISSON_EXACT_BELOW use the Gaussian limit mean + sqrt(mean) * z (mean and variance
    exact, skew 1/sqrt(mean) ignored; ~5x faster); smaller means get exact Poisson draws
    (``Generator.poisson``, ~60 ns each, so nearly black 256x256 frames cost ~10 ms).
    """
    out = mean_e + np.sqrt(mean_e) * rng.standard_normal(mean_e.shape, dtype=np.float32)
    small = mean_e < POISSON_EXACT_BELOW
    if small.any():
        out[small] = rng.poisson(mean_e[small])
    return np.maximum(out, 0.0)


TONE_A = 1.383  # Reinhard shoulder x(1+a)/(x+a): maps the meter's 11.3 % of full scale to 18 %


def tone_curve(x: np.ndarray) -> np.ndarray:
    """Camera tone curve on linear values in [0, 1]: lifts mid-tones, keeps 0 -> 0 and 1 -> 1."""
    x = np.clip(x, 0.0, 1.0)
    return x * (1 + TONE_A) / (x + TONE_A)


_LUT_SIZE = 16384  # output look-up table entries (finer than the 12-bit raw after WB gains)


@lru_cache(maxsize=1)
def _output_lut() -> np.ndarray:
    """(_LUT_SIZE,) uint8: linear [0, 1] -> tone curve -> sRGB -> 8 bits, in one table."""
    x = np.linspace(0.0, 1.0, _LUT_SIZE, dtype=np.float32)
    return np.clip(np.rint(linear_to_srgb(tone_curve(x)) * 255.0), 0, 255).astype(np.uint8)


def simulate(
    scene_linear: np.ndarray,
    *,
    lux: float,
    iso: float,
    shutter_s: float,
    aperture_f: float,
    rng: np.random.Generator,
    illuminant: tuple[float, float, float] = (1.0, 1.0, 1.0),
    flicker_depth: float = 0.0,
    flicker_hz: float = 100.0,
    white_balance: str | tuple[float, float, float] = "auto",
    noise: bool = True,
    params: SensorParams = DEFAULT_SENSOR,
) -> SensorOutput:
    """Capture ``scene_linear`` (H, W, 3) float linear reflectance in [0, 1] -> SensorOutput.

    ``white_balance``: "auto" (grey world on the raw frame), "none", or per-channel gains.
    ``noise=False`` gives the noise-free expectation (same optics and clipping) for tests.
    """
    scene = np.asarray(scene_linear, dtype=np.float32)
    if scene.ndim != 3 or scene.shape[2] != 3:
        raise ValueError(f"scene must be (H, W, 3) linear RGB, got shape {scene.shape}")
    h, w, _ = scene.shape
    short = min(h, w)
    # 1. optics: shake direction is drawn first so it does not depend on the noise draws
    angle = rng.uniform(0.0, math.pi)
    blurred = optical_blur(scene, aperture_f, params)
    shake_px = params.shake_frac_per_s * short * shutter_s
    blurred = motion_blur(blurred, shake_px, angle)
    # 2. exposure: lux at the focal plane times shutter, coloured by the illuminant
    flick = flicker_factor(shutter_s, flicker_depth, flicker_hz, rng)
    h_grey = lux * flick * params.lens_transmittance * shutter_s / (4 * aperture_f**2)  # lux s
    rgb = np.asarray(illuminant, dtype=np.float32)
    electrons = blurred * (rgb * np.float32(h_grey * params.electrons_per_lux_s))
    dark = params.dark_current_e_per_s * shutter_s
    gain = params.gain_dn_per_e(iso)
    # 3. sensor: shot noise on signal + dark current, full well, read noise, gain, ADC
    if noise:
        collected = shot_noise(electrons + np.float32(dark), rng)
    else:
        collected = electrons + np.float32(dark)
    collected = np.minimum(collected, params.full_well_e)
    dn = collected * np.float32(gain) + np.float32(params.black_level_dn)
    if noise:
        # read noise (electrons, before the gain) and ADC noise (DN, after it) are independent
        # Gaussians added after the full-well clip, so one draw with the summed variance is exact
        sigma_dn = math.hypot(params.read_noise_e * gain, params.adc_noise_dn)
        dn += rng.standard_normal(dn.shape, dtype=np.float32) * np.float32(sigma_dn)
    raw = np.clip(np.rint(dn), 0, params.adc_max).astype(np.uint16)
    clipped = float(np.mean(raw >= params.adc_max))
    # 4. ISP
    lin = (raw.astype(np.float32) - params.black_level_dn) / (
        params.adc_max - params.black_level_dn
    )
    lin = np.clip(lin, 0.0, 1.0)
    if isinstance(white_balance, str):
        if white_balance == "auto":
            means = lin.reshape(-1, 3).mean(axis=0) + 1e-6
            wb = np.clip(means[1] / means, 0.25, 4.0)
        elif white_balance == "none":
            wb = np.ones(3, dtype=np.float32)
        else:
            raise ValueError(
                f"white_balance must be 'auto', 'none' or 3 gains, got {white_balance!r}"
            )
    else:
        wb = np.asarray(white_balance, dtype=np.float32)
    # saturated pixels stay white after white balance (as in-camera ISPs do)
    balanced = np.where(lin >= 1.0, 1.0, lin * wb.astype(np.float32))
    index = np.rint(np.clip(balanced, 0.0, 1.0) * (_LUT_SIZE - 1)).astype(np.int32)
    image = _output_lut()[index]
    return SensorOutput(
        image=image,
        raw=raw,
        electrons_mean=float(collected.mean()),
        clipped_fraction=clipped,
        exposure_lux_s=float(h_grey),
        info={
            "gain_dn_per_e": float(gain),
            "shake_px": float(shake_px),
            "shake_angle_rad": float(angle),
            "flicker": float(flick),
        },
    )
