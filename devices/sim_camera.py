"""A simulated camera: real photos (scikit-image's bundled ones) through the physical sensor model.

``SimCamera`` looks at one scene at a time (a photo, lit by a ``Lighting`` environment) and captures
it with the requested ISO / shutter / aperture via ``sensor.simulate``. Named photos are framed on
the band the photo classifier holds out (40-60 % of the long side, models/photo_cnn/data.py), so
classifier accuracy on captures is measured on pixels it never trained on. No sleeping unless
``realtime=True``; ``Frame.latency_s`` reports shutter + readout (+ AE convergence) anyway.

With ``mount=PrintMount()`` the scene is a photographic print on a dark backdrop (ImageNet-ES
Diverse's set-up, devices/print_mount.py): the frame shows the backdrop, the print fills the box
``Frame.metadata["print_box"]``.

Auto-exposure (``meter``) models a compact camera's program mode with auto ISO: (1) the meter
reads the frame in the gamma-encoded preview by its metering mode (devices/metering.py:
"average" over the whole frame, "center-weighted", or "evaluative" zone metering linked to a
central AF point) and aims it at the reflected-meter calibration (K = 12.5, ~12 %
reflectance renders as mid-grey), with a 0.15-stop rms metering error; (2) the aperture is
Av = EV100 / 2 - 1 (APEX), kept between wide open (the lens's smallest f-number) and f/11, so it
is wide open in dim light; (3) the shutter follows down to the hand-held floor of 1/60 s;
(4) then the ISO rises (auto ISO up to 12800); (5) only then does the shutter get slower than
1/60 s; (6) in light too bright for 1/8000 s the aperture closes further. The camera does not
know it is on a tripod, and a dark backdrop around a bright subject makes an average meter
over-expose the subject, as real cameras do.

Settings latency (off by default): with ``settings_latency=N`` a new setting reaches the sensor N
frames after it is written (devices/settle.py ``DelayedControls``), as on hardware; ``capture``
then drops the N frames that still carry the old settings (each costs a frame time:
max(``frame_interval_s``, shutter + readout)) and returns the first frame with the new ones,
with ``Frame.dropped_frames`` = N and their time in ``latency_s``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

from edgekit.devices.camera import (
    Camera,
    CameraDisconnected,
    CaptureSettings,
    ControlRange,
    Frame,
)
from edgekit.devices.lighting import LIGHTINGS, Lighting, get_lighting
from edgekit.devices.metering import check_mode, metered_reflectance
from edgekit.devices.print_mount import PrintMount
from edgekit.devices.scenes import HELDOUT_BAND, PHOTOS, load_photo
from edgekit.devices.sensor import (
    DEFAULT_SENSOR,
    REFLECTED_METER_K,
    SensorParams,
    luminance,
    simulate,
    srgb_to_linear,
)
from edgekit.devices.settle import DEFAULT_MAX_WAIT_FRAMES, DelayedControls
from edgekit.errors import InputError

ISO_RANGE = (100.0, 25600.0)
SHUTTER_RANGE = (1 / 8000, 1.0)
APERTURE_RANGE = (2.8, 22.0)
DEFAULT_SETTINGS = CaptureSettings(iso=100.0, shutter_s=1 / 60, aperture_f=5.6)

# Auto-exposure (program mode)
METERING_ERROR_EV = 0.15  # rms error of the camera's average meter (stops)
HANDHELD_SHUTTER_S = 1 / 60  # program mode raises ISO before going slower than this
AUTO_ISO_MAX = 12800.0  # auto-ISO ceiling before the shutter gets longer than HANDHELD_SHUTTER_S
AE_CONVERGENCE_FRAMES = 3  # preview frames the AE loop needs before the capture
PREVIEW_FRAME_S = 1 / 30  # preview frame interval during AE convergence


def _frame_box(h: int, w: int, aspect: float, region: str) -> tuple[int, int, int, int]:
    """(y0, y1, x0, x1): the largest centred box of ``aspect`` (W/H) inside the region."""
    y0, y1, x0, x1 = 0.0, float(h), 0.0, float(w)
    if region == "heldout":
        if w >= h:
            x0, x1 = HELDOUT_BAND[0] * w, HELDOUT_BAND[1] * w
        else:
            y0, y1 = HELDOUT_BAND[0] * h, HELDOUT_BAND[1] * h
    elif region != "full":
        raise InputError(f"region must be 'heldout' or 'full', got {region!r}")
    bh, bw = y1 - y0, x1 - x0
    if bw / bh > aspect:
        bw = bh * aspect
    else:
        bh = bw / aspect
    cy, cx = (y0 + y1) / 2, (x0 + x1) / 2
    return round(cy - bh / 2), round(cy + bh / 2), round(cx - bw / 2), round(cx + bw / 2)


def _prepare(srgb: np.ndarray, size: tuple[int, int], region: str) -> np.ndarray:
    """(h, w, 3) sRGB float -> (H, W, 3) float32 linear reflectance framed and resized to size."""
    from skimage.transform import resize

    y0, y1, x0, x1 = _frame_box(srgb.shape[0], srgb.shape[1], size[1] / size[0], region)
    crop = srgb[y0:y1, x0:x1]
    out = resize(crop, (*size, 3), order=1, anti_aliasing=True, preserve_range=True)
    return srgb_to_linear(np.clip(out, 0.0, 1.0))


@lru_cache(maxsize=64)
def _named_scene(name: str, size: tuple[int, int], region: str) -> np.ndarray:
    scene = _prepare(load_photo(name), size, region)
    scene.setflags(write=False)
    return scene


def _as_srgb(array: np.ndarray) -> np.ndarray:
    a = np.asarray(array)
    if a.ndim == 2:
        a = np.stack([a] * 3, axis=-1)
    if a.ndim != 3 or a.shape[2] < 3:
        raise InputError(f"a scene array must be (H, W, 3) RGB, got shape {a.shape}")
    a = a[..., :3]
    return a.astype(np.float32) / 255.0 if a.dtype == np.uint8 else a.astype(np.float32)


class SimCamera(Camera):
    """Simulated camera. ``size`` = (H, W) of frames; scenes: photo names or (H, W, 3) arrays.

    ``fail_after=N`` raises CameraDisconnected on capture N+1 (fault tests); ``glitch_every=N``
    delivers every Nth frame as a single-channel (H, W) image, as a sensor switched to the
    wrong pixel format would (consumers must refuse it, not crash); ``tour_every=N`` moves to
    the next scene and the next lighting environment every N captures (a live-looking stream
    for the daemon); ``realtime=True``
    sleeps for the capture latency; ``region`` = "heldout" (default) or "full" framing of photos;
    ``mount``: None (the scene fills the frame) or a PrintMount (a print on a dark backdrop);
    ``metering``: "average", "center-weighted" or "evaluative" (auto-exposure,
    devices/metering.py); ``aperture_range``: the lens's (smallest, largest) f-number;
    ``settings_latency``: frames before a new setting reaches the sensor (0: the next frame);
    ``frame_interval_s``: the sensor's frame period (None: a frame takes shutter + readout);
    ``max_wait_frames``: frames dropped waiting for a setting before SettingsTimeout.
    """

    name = "sim"

    def __init__(
        self,
        scene: str | np.ndarray | None = None,
        lighting: str | Lighting = "office",
        seed: int = 0,
        size: int | tuple[int, int] = (64, 64),
        scenes: Sequence[str | np.ndarray] = PHOTOS,
        *,
        region: str = "heldout",
        fail_after: int | None = None,
        glitch_every: int | None = None,
        tour_every: int | None = None,
        realtime: bool = False,
        sensor: SensorParams = DEFAULT_SENSOR,
        mount: PrintMount | None = None,
        metering: str = "average",
        aperture_range: tuple[float, float] = APERTURE_RANGE,
        settings_latency: int = 0,
        frame_interval_s: float | None = None,
        max_wait_frames: int = DEFAULT_MAX_WAIT_FRAMES,
    ) -> None:
        self.size = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        if min(self.size) < 8:
            raise InputError(f"size must be at least 8x8, got {self.size}")
        self.seed = int(seed)
        self.region = region
        self.fail_after = fail_after
        if glitch_every is not None and glitch_every < 1:
            raise InputError(f"glitch_every must be >= 1, got {glitch_every}")
        self.glitch_every = glitch_every
        if tour_every is not None and tour_every < 1:
            raise InputError(f"tour_every must be >= 1, got {tour_every}")
        self.tour_every = tour_every
        self.realtime = realtime
        self.sensor = sensor
        self.metering = check_mode(metering)
        lo, hi = float(aperture_range[0]), float(aperture_range[1])
        if not 0 < lo <= hi:
            raise InputError(
                f"aperture_range must be (smallest, largest) f-number > 0, got {aperture_range}"
            )
        self.aperture_range = (lo, hi)
        self.mount = mount
        self.print_box = mount.box(self.size) if mount is not None else None
        self.scenes = list(scenes)
        if not self.scenes and scene is None:
            raise InputError("SimCamera needs a scene or a non-empty scenes list")
        self.lighting = get_lighting(lighting)
        self.current = DEFAULT_SETTINGS
        if frame_interval_s is not None and not frame_interval_s > 0:
            raise InputError(f"frame_interval_s must be > 0, got {frame_interval_s}")
        self.frame_interval_s = frame_interval_s
        self.max_wait_frames = int(max_wait_frames)
        self.controls = DelayedControls(DEFAULT_SETTINGS, int(settings_latency))
        self.captures = 0
        self._clock = 0.0
        self._closed = False
        self._scene_index = 0
        self.set_scene(self.scenes[0] if scene is None else scene)

    @classmethod
    def from_spec(cls, arg: str, **options: Any) -> SimCamera:
        """``seed=3,lighting=dim-room,size=128`` (or ``size=96x128``, ``scene=coffee``,
        ``fail_after=5``, ``realtime=1``, ``region=full``, ``mount=print``,
        ``metering=center-weighted``, ``settings_latency=2,frame_interval_ms=33``); keyword
        ``options`` win."""
        kwargs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in arg.split(","))):
            key, sep, value = part.partition("=")
            if not sep:
                raise InputError(f"sim camera option '{part}' must be key=value")
            key = key.strip().replace("-", "_")
            value = value.strip()
            if key in (
                "seed", "fail_after", "glitch_every", "tour_every", "settings_latency",
                "max_wait_frames",
            ):  # fmt: skip
                kwargs[key] = int(value)
            elif key == "frame_interval_ms":
                kwargs["frame_interval_s"] = float(value) / 1000.0
            elif key == "size":
                h, _, w = value.lower().partition("x")
                kwargs[key] = (int(h), int(w or h))
            elif key == "realtime":
                kwargs[key] = value.lower() in ("1", "true", "yes")
            elif key in ("lighting", "scene", "region", "metering"):
                kwargs[key] = value
            elif key == "mount":
                if value not in ("print", "none"):
                    raise InputError(f"sim camera mount must be 'print' or 'none', got {value!r}")
                kwargs[key] = PrintMount() if value == "print" else None
            else:
                raise InputError(
                    f"unknown sim camera option '{key}'; expected seed, lighting, size, scene, "
                    "region, fail_after, glitch_every, tour_every, realtime, mount, metering, "
                    "settings_latency, frame_interval_ms, max_wait_frames"
                )
        kwargs.update(options)
        return cls(**kwargs)

    # --- scene and lighting ---------------------------------------------------------------------
    def set_scene(self, scene: str | int | np.ndarray, name: str | None = None) -> None:
        """Look at a photo (name or index into ``scenes``) or an (H, W, 3) sRGB array."""
        if isinstance(scene, (int, np.integer)):
            self._scene_index = int(scene) % len(self.scenes)
            scene = self.scenes[self._scene_index]
        size = self.size
        if self.print_box is not None:
            y0, y1, x0, x1 = self.print_box
            size = (y1 - y0, x1 - x0)
        if isinstance(scene, str):
            linear = _named_scene(scene, size, self.region)
            self.scene_name = scene
        else:
            linear = _prepare(_as_srgb(scene), size, "full")
            self.scene_name = name or "array"
        self.scene_linear = linear if self.mount is None else self.mount.compose(linear, self.size)

    def next_scene(self) -> str:
        """Move to the next entry of ``scenes`` (cyclic); returns its name."""
        self.set_scene(self._scene_index + 1)
        return self.scene_name

    def set_lighting(self, lighting: str | Lighting) -> None:
        self.lighting = get_lighting(lighting)

    # --- the Camera contract ----------------------------------------------------------------------
    def capabilities(self) -> dict[str, ControlRange]:
        return {
            "iso": ControlRange("iso", *ISO_RANGE),
            "shutter_s": ControlRange("shutter_s", *SHUTTER_RANGE),
            "aperture_f": ControlRange("aperture_f", *self.aperture_range),
        }

    def scene_luminance(self, encoded: bool = False, metering: str = "average") -> float:
        """Mean scene luminance in cd/m^2 (Lambertian: L = E * rho / pi) under the lighting,
        as the meter of mode ``metering`` (devices/metering.py) reads it.

        ``encoded=True`` averages in the sRGB-encoded domain (then decodes), as a camera meter
        that reads its gamma-encoded preview does: a typical photo then renders near mid-grey.
        """
        gains = np.asarray(self.lighting.gains(), dtype=np.float32)
        lum = np.clip(luminance(self.scene_linear * gains), 0.0, 1.0)  # (H, W)
        rho = metered_reflectance(lum, metering, encoded=encoded)
        return self.lighting.lux * rho / math.pi

    def meter(self, rng: np.random.Generator | None = None) -> CaptureSettings:
        """Program-mode auto-exposure (module docstring) from this camera's metering mode, with
        metering error drawn from ``rng`` (none when None)."""
        wide, closed = self.aperture_range
        lum = max(self.scene_luminance(encoded=True, metering=self.metering), 1e-6)
        ev100 = math.log2(lum * 100.0 / REFLECTED_METER_K)
        if rng is not None:
            ev100 += float(rng.normal(0.0, METERING_ERROR_EV))
        # aperture: wide open in the dark, stopping down to f/11 as the light grows
        av = min(max(ev100 / 2 - 1, 2 * math.log2(wide)), 2 * math.log2(max(11.0, wide)))
        n = 2 ** (av / 2)
        t = 2 ** (av - ev100)  # at ISO 100
        iso = 100.0
        if t > HANDHELD_SHUTTER_S:
            iso, t = 100.0 * t / HANDHELD_SHUTTER_S, HANDHELD_SHUTTER_S
            if iso > AUTO_ISO_MAX:
                t, iso = t * iso / AUTO_ISO_MAX, AUTO_ISO_MAX
            if t > SHUTTER_RANGE[1]:
                iso, t = iso * t / SHUTTER_RANGE[1], SHUTTER_RANGE[1]
        elif t < SHUTTER_RANGE[0]:
            # too bright even at 1/8000 s: stop down (N^2 / t = 2^EV100 at ISO 100)
            n = min(math.sqrt(2**ev100 * SHUTTER_RANGE[0]), closed)
            t = n**2 / 2**ev100
        applied, _ = self.clamp(CaptureSettings(iso=iso, shutter_s=t, aperture_f=n))
        return replace(applied, auto_exposure=True)

    def frame_time_s(self, settings: CaptureSettings) -> float:
        """Seconds one sensor frame at ``settings`` takes: max(frame interval, shutter + readout)."""
        exposure = float(settings.shutter_s or 0.0) + self.sensor.readout_s
        return max(self.frame_interval_s or 0.0, exposure)

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        """Clamp ``settings`` (None fields keep the current value), wait for a frame carrying
        them (``settings_latency``), simulate it, return it."""
        if self._closed:
            raise CameraDisconnected("the sim camera was closed")
        if self.fail_after is not None and self.captures >= self.fail_after:
            raise CameraDisconnected(
                f"sim camera disconnected after {self.fail_after} captures (fail_after)"
            )
        if self.tour_every and self.captures and self.captures % self.tour_every == 0:
            self.next_scene()
            names = list(LIGHTINGS)
            self.lighting = LIGHTINGS[names[(names.index(self.lighting.name) + 1) % len(names)]]
        settings = settings or CaptureSettings()
        rng = np.random.default_rng((self.seed, self.captures))
        latency = 0.0
        clamped: dict[str, tuple[float, float]] = {}
        if settings.auto_exposure:
            applied = self.meter(rng)
            latency += AE_CONVERGENCE_FRAMES * PREVIEW_FRAME_S
        else:
            merged = CaptureSettings(
                iso=self.current.iso if settings.iso is None else settings.iso,
                shutter_s=self.current.shutter_s
                if settings.shutter_s is None
                else settings.shutter_s,
                aperture_f=self.current.aperture_f
                if settings.aperture_f is None
                else settings.aperture_f,
            )
            applied, clamped = self.clamp(merged)
        self.current = replace(applied, auto_exposure=False)
        dropped, waited = self.controls.settle(
            self.current, self.frame_time_s, self.max_wait_frames
        )
        latency += waited
        lit = self.lighting
        out = simulate(
            self.scene_linear,
            lux=lit.lux,
            iso=float(applied.iso),  # type: ignore[arg-type]
            shutter_s=float(applied.shutter_s),  # type: ignore[arg-type]
            aperture_f=float(applied.aperture_f),  # type: ignore[arg-type]
            rng=rng,
            illuminant=lit.gains(),
            flicker_depth=lit.flicker_depth,
            flicker_hz=lit.flicker_hz,
            params=self.sensor,
        )
        latency += self.frame_time_s(applied)
        if self.realtime:
            time.sleep(latency)
            timestamp = time.time()
        else:
            self._clock += latency
            timestamp = self._clock
        self.captures += 1
        image = out.image
        if self.glitch_every and self.captures % self.glitch_every == 0:
            image = image[..., 1].copy()  # (H, W): the wrong pixel format
        return Frame(
            image=image,
            timestamp_s=timestamp,
            settings=applied,
            latency_s=latency,
            clamped=clamped,
            requested=applied,
            dropped_frames=dropped,
            settings_source="sim",
            metadata={
                "camera": self.name,
                "scene": self.scene_name,
                "lighting": lit.name,
                "lux": lit.lux,
                "exposure_ev": applied.exposure_value(),
                "scene_ev100": math.log2(
                    max(self.scene_luminance(), 1e-6) * 100 / REFLECTED_METER_K
                ),
                "electrons_mean": out.electrons_mean,
                "clipped_fraction": out.clipped_fraction,
                "seed": self.seed,
                "capture_index": self.captures - 1,
                "print_box": self.print_box,
                **out.info,
            },
        )

    def close(self) -> None:
        self._closed = True
