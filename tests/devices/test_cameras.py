"""Cameras: the simulated sensor's physics, the sim/file cameras, and the hardware mappings."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from edgekit.devices.camera import CameraDisconnected, CaptureSettings, ControlRange, open_camera
from edgekit.devices.lighting import LIGHTINGS, get_lighting
from edgekit.devices.sensor import linear_to_srgb, simulate, srgb_to_linear
from edgekit.devices.sim_camera import PHOTOS, SimCamera
from edgekit.errors import InputError, MissingDependencyError

GRID = [
    CaptureSettings(iso=iso, shutter_s=t, aperture_f=n)
    for n in (5.0, 9.0, 16.0)
    for t in (1 / 4, 1 / 60, 1 / 1000)
    for iso in (250.0, 2000.0, 16000.0)
]


def mean_of(cam: SimCamera, **kw: float) -> float:
    return float(cam.capture(CaptureSettings(**kw)).image.mean())


def gradient_energy(image: np.ndarray) -> float:
    g = image.astype(np.float32).mean(axis=2)
    return float((np.diff(g, axis=0) ** 2).mean() + (np.diff(g, axis=1) ** 2).mean())


def test_sim_is_deterministic_under_a_seed() -> None:
    s = CaptureSettings(iso=2000, shutter_s=1 / 60, aperture_f=9)
    a = [SimCamera(seed=7).capture(s).image for _ in range(2)]
    cam = SimCamera(seed=7)
    b, c = cam.capture(s).image, cam.capture(s).image
    assert np.array_equal(a[0], a[1]) and np.array_equal(a[0], b)
    assert not np.array_equal(b, c)  # a new frame, new noise
    assert not np.array_equal(b, SimCamera(seed=8).capture(s).image)


def test_frame_contract_and_metadata() -> None:
    f = SimCamera(scene="coffee", lighting="dim-room", seed=3, size=(48, 80)).capture(
        CaptureSettings(iso=800, shutter_s=1 / 30, aperture_f=4)
    )
    assert f.image.shape == (48, 80, 3) and f.image.dtype == np.uint8
    assert f.clamped == {}
    assert f.latency_s == pytest.approx(1 / 30 + 0.02)
    md = f.metadata
    assert md["scene"] == "coffee" and md["lighting"] == "dim-room" and md["seed"] == 3
    assert md["exposure_ev"] == pytest.approx(math.log2(16 * 30) - 3)
    assert md["electrons_mean"] > 0


def test_brightness_monotone_in_each_control_until_clipping() -> None:
    cam = SimCamera(scene="astronaut", lighting="office", size=64)
    base = {"iso": 800.0, "shutter_s": 1 / 60, "aperture_f": 8.0}
    sweeps = {
        "shutter_s": [1 / 4000, 1 / 1000, 1 / 250, 1 / 60, 1 / 15, 1 / 4, 1.0],
        "iso": [100.0, 400.0, 1600.0, 6400.0, 25600.0],
        "aperture_f": [22.0, 16.0, 11.0, 8.0, 5.6, 4.0, 2.8],  # opening up
    }
    for name, values in sweeps.items():
        means = [mean_of(cam, **{**base, name: v}) for v in values]
        assert all(b >= a - 1.0 for a, b in zip(means, means[1:], strict=False)), (name, means)
        assert means[-1] > means[0] + 40, (name, means)


def test_noise_grows_with_iso_at_fixed_exposure() -> None:
    flat = np.full((64, 64, 3), 0.18, np.float32)
    stds = []
    for iso in (100.0, 800.0, 6400.0):
        out = simulate(
            flat,
            lux=50.0,
            iso=iso,
            shutter_s=1 / 500,
            aperture_f=8.0,
            rng=np.random.default_rng(0),
            white_balance="none",
        )
        stds.append(float(out.raw.astype(np.float32).std()))
    assert stds[0] < stds[1] < stds[2]


def test_extreme_exposure_clips_and_dark_settings_are_black() -> None:
    cam = SimCamera(scene="astronaut", lighting="daylight")
    blown = cam.capture(CaptureSettings(iso=25600, shutter_s=1.0, aperture_f=2.8))
    assert blown.metadata["clipped_fraction"] > 0.95 and blown.image.mean() > 250
    cam.set_lighting("dim-room")
    dark = cam.capture(CaptureSettings(iso=250, shutter_s=1 / 1000, aperture_f=16))
    assert dark.image.mean() < 8


def test_motion_blur_grows_with_shutter_time() -> None:
    scene = SimCamera(scene="brick", size=128).scene_linear
    energies = []
    for t in (1 / 1000, 1 / 4, 1 / 2, 1.0):
        out = simulate(  # same exposure (lux * t constant), noise off: only blur changes
            scene,
            lux=30.0 / t,
            iso=400,
            shutter_s=t,
            aperture_f=8.0,
            rng=np.random.default_rng(1),
            noise=False,
        )
        energies.append(gradient_energy(out.image))
    assert energies[0] > energies[1] > energies[2] > energies[3]
    assert energies[-1] < 0.92 * energies[0]


def test_wide_aperture_defocuses() -> None:
    scene = SimCamera(scene="brick", size=128).scene_linear
    energy = {}
    for n in (2.8, 11.0):
        out = simulate(
            scene,
            lux=100.0 * n * n,
            iso=400,
            shutter_s=1 / 1000,
            aperture_f=n,
            rng=np.random.default_rng(1),
            noise=False,
        )
        energy[n] = gradient_energy(out.image)
    assert energy[2.8] < energy[11.0]


def test_the_27_grid_spans_black_to_blown_out() -> None:
    cam = SimCamera(scene="chelsea", lighting="office")
    means = [cam.capture(s).image.mean() for s in GRID]
    assert sum(m < 20 for m in means) >= 3 and sum(m > 230 for m in means) >= 3
    evs = [s.exposure_value() for s in GRID]
    assert max(evs) - min(evs) > 16  # about 17 stops
    caps = cam.capabilities()
    for s in GRID:  # every grid value is inside the ranges: nothing clamped
        assert all(caps[k].clamp(getattr(s, k)) == getattr(s, k) for k in caps)


def test_clamping_is_reported() -> None:
    cam = SimCamera()
    f = cam.capture(CaptureSettings(iso=50, shutter_s=2.0, aperture_f=1.4))
    assert f.clamped == {"iso": (50.0, 100.0), "shutter_s": (2.0, 1.0), "aperture_f": (1.4, 2.8)}
    assert (f.settings.iso, f.settings.shutter_s, f.settings.aperture_f) == (100.0, 1.0, 2.8)
    f2 = cam.capture(CaptureSettings(iso=400))  # None fields keep the current value
    assert f2.settings.shutter_s == 1.0 and f2.settings.aperture_f == 2.8 and f2.clamped == {}
    with pytest.raises(InputError):
        cam.capture(CaptureSettings(iso=-1))


@pytest.mark.parametrize("lighting", list(LIGHTINGS))
def test_auto_exposure_lands_near_mid_grey(lighting: str) -> None:
    cam = SimCamera(lighting=lighting, seed=2)
    for scene in ("astronaut", "coffee", "rocket", "brick"):
        cam.set_scene(scene)
        f = cam.capture(CaptureSettings(auto_exposure=True))
        assert f.settings.auto_exposure and f.clamped == {}
        assert 55 < f.image.mean() < 175, (scene, f.settings.describe(), f.image.mean())
        assert f.latency_s > f.settings.shutter_s


def test_lightings_cover_dim_to_bright_and_colour() -> None:
    lux = sorted(lit.lux for lit in LIGHTINGS.values())
    assert len(lux) >= 6 and lux[0] <= 10 and lux[-1] >= 100_000
    r, g, b = get_lighting("sodium-lamp").gains()
    assert r > g > b
    warm, cool = get_lighting("dim-room").gains(), get_lighting("shade").gains()
    assert warm[0] / warm[2] > 1 > cool[0] / cool[2]
    with pytest.raises(InputError):
        get_lighting("moonlight-on-mars")


def test_disconnection_option_and_close() -> None:
    cam = SimCamera(fail_after=2)
    cam.capture()
    cam.capture()
    with pytest.raises(CameraDisconnected):
        cam.capture()
    closed = SimCamera()
    closed.close()
    with pytest.raises(CameraDisconnected):
        closed.capture()


def test_scenes_arrays_and_heldout_framing() -> None:
    from edgekit.models.photo_cnn import data

    assert data.PHOTOS is PHOTOS and tuple(data.HELDOUT_BAND) == (0.4, 0.6)  # one source
    cam = SimCamera(size=32)
    assert cam.next_scene() == PHOTOS[1]
    rng = np.random.default_rng(0)
    cam.set_scene(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8), name="noise")
    f = cam.capture(CaptureSettings(auto_exposure=True))
    assert f.metadata["scene"] == "noise" and f.image.shape == (32, 32, 3)
    with pytest.raises(InputError):
        cam.set_scene("not-a-photo")


def test_srgb_roundtrip() -> None:
    x = np.linspace(0, 1, 101, dtype=np.float32)
    assert np.allclose(linear_to_srgb(srgb_to_linear(x)), x, atol=1e-5)


def test_open_camera_specs() -> None:
    cam = open_camera("sim:seed=1,lighting=daylight,size=96x128")
    assert isinstance(cam, SimCamera) and cam.lighting.name == "daylight"
    assert cam.capture().image.shape == (96, 128, 3)
    with pytest.raises(InputError):
        open_camera("nope")
    with pytest.raises(InputError):
        open_camera("sim:colour=blue")


def test_file_camera_over_png_folder(tmp_path) -> None:
    import imageio.v3 as iio

    frames = [np.full((8, 10, 3), 40 * i, np.uint8) for i in range(3)]
    for i, frame in enumerate(frames):
        iio.imwrite(tmp_path / f"f{i:03d}.png", frame)
    iio.imwrite(tmp_path / "grey.png", np.full((8, 10), 200, np.uint8))  # sorts last
    (tmp_path / "notes.txt").write_text("not an image")
    cam = open_camera(f"file:{tmp_path}")
    assert cam.capabilities() == {}
    f = cam.capture(CaptureSettings(iso=800, shutter_s=0.01))
    assert np.array_equal(f.image, frames[0])
    assert f.metadata["ignored"] == {"iso": 800, "shutter_s": 0.01} and f.clamped == {}
    assert f.settings == CaptureSettings()
    assert cam.capture().image.mean() == 40 and cam.capture().image.mean() == 80
    assert cam.capture().image.shape == (8, 10, 3)
    with pytest.raises(CameraDisconnected):
        cam.capture()
    looped = open_camera(f"file:{tmp_path},loop=1")
    seen = [looped.capture().metadata["frame_index"] for _ in range(6)]
    assert seen == [0, 1, 2, 3, 0, 1]
    with pytest.raises(InputError):
        open_camera(f"file:{tmp_path / 'missing'}")


def test_v4l2_mapping_uses_100us_units() -> None:
    from edgekit.devices import v4l2_camera as v

    assert v.shutter_to_exposure_absolute(1 / 100) == 100  # 10 ms = 100 x 100 us
    assert v.shutter_to_exposure_absolute(1 / 8000) == 1
    assert v.exposure_absolute_to_shutter(333) == pytest.approx(0.0333)
    limits = {"exposure_time_absolute": (3.0, 2047.0, 1.0), "gain": (0.0, 255.0, 1.0)}
    caps = v.capabilities_from_controls(limits)
    assert caps["shutter_s"].minimum == pytest.approx(3e-4)
    assert caps["shutter_s"].maximum == pytest.approx(0.2047)
    assert (caps["iso"].minimum, caps["iso"].maximum) == (100.0, 1600.0)
    ctl = v.v4l2_controls_for(CaptureSettings(iso=400, shutter_s=0.02), limits)
    assert ctl == {"auto_exposure": 1, "exposure_time_absolute": 200, "gain": 128}
    assert v.gain_to_iso(128, limits["gain"]) == pytest.approx(400, rel=0.01)
    assert v.v4l2_controls_for(CaptureSettings(auto_exposure=True), limits) == {"auto_exposure": 3}
    iso_limits = {"iso_sensitivity": (100.0, 3200.0, 1.0)}
    assert v.v4l2_controls_for(CaptureSettings(iso=800), iso_limits)["iso_sensitivity"] == 800
    # YUYV: mid grey and pure white without chroma
    buf = bytes([126, 128, 126, 128, 235, 128, 235, 128])
    rgb = v.yuyv_to_rgb(buf, 4, 1)
    assert rgb[0, 0].tolist() == [128, 128, 128] and rgb[0, 3].tolist() == [255, 255, 255]


def test_picamera2_mapping_units() -> None:
    from edgekit.devices import picamera2_camera as p

    ctl = p.picamera2_controls(CaptureSettings(iso=800, shutter_s=1 / 60))
    assert ctl == {"AeEnable": False, "ExposureTime": 16667, "AnalogueGain": 8.0}
    assert p.picamera2_controls(CaptureSettings(auto_exposure=True)) == {"AeEnable": True}
    limits = (100, 33_333)
    long = p.picamera2_controls(CaptureSettings(iso=100, shutter_s=0.25), limits)
    assert long["FrameDurationLimits"] == (100, 250_000)
    short = p.picamera2_controls(CaptureSettings(iso=100, shutter_s=1 / 1000), limits)
    assert short["FrameDurationLimits"] == limits
    assert p.frame_limits({"controls": {"FrameDurationLimits": limits}}, {}) == limits
    assert p.frame_limits({}, {"FrameDurationLimits": (33, 11_000_000, None)}) == (33, 11_000_000)
    assert p.frame_limits({}, {}) is None
    caps = p.capabilities_from_camera_controls(
        {"ExposureTime": (75, 11766829, None), "AnalogueGain": (1.0, 16.0, None)}
    )
    assert caps["iso"].maximum == 1600.0 and caps["shutter_s"].minimum == pytest.approx(75e-6)
    back = p.settings_from_metadata({"ExposureTime": 10000, "AnalogueGain": 2.0})
    assert (back.iso, back.shutter_s) == (200.0, 0.01)


def test_gstreamer_pipeline_units() -> None:
    from edgekit.devices import gstreamer_camera as g

    pipe = g.argus_pipeline(CaptureSettings(iso=400, shutter_s=1 / 100), sensor_id=1)
    assert pipe.startswith("nvarguscamerasrc sensor-id=1 aelock=true")
    assert 'exposuretimerange="10000000 10000000"' in pipe and 'gainrange="4 4"' in pipe
    assert pipe.rstrip().endswith("appsink drop=true max-buffers=1")
    auto = g.argus_pipeline(CaptureSettings(auto_exposure=True))
    assert "aelock=false" in auto and "exposuretimerange" not in auto
    caps = g.argus_capabilities()
    assert caps["shutter_s"].minimum == pytest.approx(13e-6)
    assert caps["iso"] == ControlRange("iso", 100.0, 1062.5)


@pytest.mark.parametrize(
    ("spec", "package"),
    [("v4l2:/dev/video0", "linuxpy"), ("picamera2", "picamera2"), ("gstreamer", "opencv-python")],
)
def test_hardware_backends_give_one_clear_error(spec: str, package: str) -> None:
    module = {"linuxpy": "linuxpy", "picamera2": "picamera2", "opencv-python": "cv2"}[package]
    try:
        __import__(module)
    except ImportError:
        with pytest.raises(MissingDependencyError) as err:
            open_camera(spec)
        assert err.value.package == package and package in str(err.value)
    else:
        pytest.skip(f"{module} is installed here; the import guard is not reachable")


def test_speed_smoke() -> None:
    """Prints per-capture times; no assertion on them (shared CI machines)."""
    for size in (64, 256):
        cam = SimCamera(scene="astronaut", size=size)
        cam.capture(GRID[0])
        start = time.perf_counter()
        for s in GRID[:9]:
            assert cam.capture(s).image.shape == (size, size, 3)
        print(f"sim {size}x{size}: {(time.perf_counter() - start) / 9 * 1000:.2f} ms/capture")


# --- the ES-Diverse set-up: a print on a dark backdrop, dark-room lamps, metering modes --------


def test_print_mount_layout_and_reflectances() -> None:
    from edgekit.devices.print_mount import PrintMount

    mount = PrintMount()
    assert mount.box((128, 128)) == (32, 96, 32, 96)
    assert mount.box((96, 128)) == (24, 72, 40, 88)  # centred, side = half the short side
    image = np.zeros((64, 64, 3), np.float32)
    image[:, 32:] = 1.0  # half black ink, half paper white
    frame = mount.compose(image, (128, 128))
    assert frame.shape == (128, 128, 3) and frame.dtype == np.float32
    assert np.allclose(frame[:32], mount.backdrop) and np.allclose(frame[:, :32], mount.backdrop)
    assert np.allclose(frame[32:96, 32:64], mount.ink_black)
    assert np.allclose(frame[32:96, 64:96], mount.paper_white)
    with pytest.raises(InputError, match="print must be"):
        mount.compose(np.zeros((10, 10, 3)), (128, 128))
    with pytest.raises(InputError, match="print_fraction"):
        PrintMount(print_fraction=0.0)
    with pytest.raises(InputError, match="ink_black"):
        PrintMount(ink_black=0.9, paper_white=0.5)


def test_dark_room_lighting_set() -> None:
    from edgekit.devices.lighting import DARK_ROOM_LIGHTINGS, LIGHTING_SETS, lighting_set

    assert set(LIGHTING_SETS) == {"es-diverse", "wide-range"}
    assert lighting_set("wide-range") == tuple(LIGHTINGS)
    dark = [get_lighting(n) for n in lighting_set("es-diverse")]
    assert len(dark) == 6 and dark == list(DARK_ROOM_LIGHTINGS.values())
    lux = [lit.lux for lit in dark]
    assert lux == sorted(lux) and lux[0] >= 5 and lux[-1] <= 500  # indoor lamps, no daylight
    assert not set(DARK_ROOM_LIGHTINGS) & set(LIGHTINGS)  # names stay unique across sets
    with pytest.raises(InputError, match="unknown lighting set"):
        lighting_set("studio")


def test_metering_weights_and_modes() -> None:
    from edgekit.devices.metering import metered_reflectance, metering_weights

    avg = metering_weights((64, 64), "average")
    cw = metering_weights((64, 64), "center-weighted")
    assert avg.sum() == pytest.approx(1.0) and cw.sum() == pytest.approx(1.0, abs=1e-5)
    assert cw[32, 32] > 3 * avg[32, 32] and cw[0, 0] == pytest.approx(0.4 * avg[0, 0])
    flat = np.full((70, 90), 0.18, np.float32)
    for mode in ("average", "center-weighted", "evaluative"):  # a uniform frame reads its level
        assert metered_reflectance(flat, mode) == pytest.approx(0.18, rel=1e-4)
        assert metered_reflectance(flat, mode, encoded=False) == pytest.approx(0.18, rel=1e-5)
    with pytest.raises(InputError, match="metering must be one of average, center-weighted, eva"):
        SimCamera(metering="spot")
    with pytest.raises(InputError, match="at least 7x9"):
        metered_reflectance(np.zeros((6, 6), np.float32), "evaluative")


def test_evaluative_metering_reads_the_subject_at_the_af_point() -> None:
    """Zones: 9 x 7 split evenly, Gaussian weights around the centre AF zone; zones are limited
    to 2 stops around the subject (AF zone + neighbours), so a black backdrop and a lamp in a
    corner barely move the reading, while the average meter follows them."""
    from edgekit.devices.metering import metered_reflectance, zone_means, zone_weights

    weights, subject = zone_weights()
    assert weights.shape == subject.shape == (7, 9) and weights.sum() == pytest.approx(1.0)
    assert subject.sum() == 9 and subject[3, 4] and weights.argmax() == 3 * 9 + 4
    ramp = np.arange(14 * 18, dtype=np.float32).reshape(14, 18)  # 2 x 2 pixels per zone
    means = zone_means(ramp)
    assert means.shape == (7, 9) and means[0, 0] == pytest.approx(ramp[:2, :2].mean())
    assert means[6, 8] == pytest.approx(ramp[12:, 16:].mean())
    frame = np.full((140, 180), 0.01, np.float32)  # black backdrop, 4.2 stops under the print
    frame[35:105, 45:135] = 0.18  # the print covers the middle half of each side
    avg = metered_reflectance(frame, "average", encoded=False)
    evaluative = metered_reflectance(frame, "evaluative", encoded=False)
    assert avg < 0.06 and 0.1 < evaluative < 0.18  # the backdrop counts as 2 stops under, at most
    frame[:20, :20] = 1.0  # a lamp in a corner zone
    assert metered_reflectance(frame, "average", encoded=False) > avg + 0.01
    lamp = metered_reflectance(frame, "evaluative", encoded=False)
    assert lamp == pytest.approx(evaluative, abs=0.003)


def test_average_metering_over_exposes_a_print_on_a_dark_backdrop() -> None:
    """A print covering a quarter of the frame on a dark wall: the average meter sees mostly wall
    and over-exposes the print; centre-weighted and evaluative metering land closer to mid-grey."""
    from edgekit.devices.print_mount import PrintMount

    means = {}
    for metering in ("average", "center-weighted", "evaluative"):
        cam = SimCamera(
            scene="coffee", lighting="lamps-mixed", size=128, mount=PrintMount(), seed=1,
            metering=metering, aperture_range=(5.0, 22.0),
        )  # fmt: skip
        frame = cam.capture(CaptureSettings(auto_exposure=True))
        y0, y1, x0, x1 = frame.metadata["print_box"]
        assert frame.image.shape == (128, 128, 3) and (y0, y1, x0, x1) == (32, 96, 32, 96)
        assert frame.settings.aperture_f == 5.0  # dim room: wide open, the lens's f/5
        assert frame.settings.shutter_s == pytest.approx(1 / 60)  # hand-held floor, then ISO up
        assert frame.settings.iso > 1000
        means[metering] = float(frame.image[y0:y1, x0:x1].mean())
        assert frame.image[:16].mean() < means[metering]  # the backdrop stays dark
    assert means["average"] > 140 and means["average"] > means["center-weighted"] + 20, means
    assert 90 < means["evaluative"] < means["center-weighted"] + 5, means
    cam = SimCamera.from_spec("mount=print,metering=center-weighted,size=64")
    assert cam.mount is not None and cam.metering == "center-weighted"
    assert cam.capture(GRID[0]).metadata["print_box"] == (16, 48, 16, 48)
    with pytest.raises(InputError, match="mount"):
        SimCamera.from_spec("mount=poster")
