"""Cameras return the frame that was asked for: fakes of linuxpy and picamera2 whose frames carry
the old settings for ``k`` frames after a change, as a real sensor pipeline does."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgekit.devices.camera import CaptureSettings, SettingsTimeout, SettleTolerance, open_camera
from edgekit.devices.settle import DelayedControls, settle_time_s, wait_for_settings
from edgekit.devices.sim_camera import SimCamera
from edgekit.errors import InputError
from edgekit.lens.controller import lens_time_budget

LATENCY = 3  # frames a control change takes to reach the fakes' frames


# --- a fake linuxpy: controls read back at once, frames carry them LATENCY frames later ---------
class FakeControl:
    def __init__(self, device: FakeV4L2Device, name: str, lo: int, hi: int, value: int) -> None:
        self.device, self.config_name = device, name
        self.minimum, self.maximum, self.step = lo, hi, 1
        self._value = value

    @property
    def value(self) -> int:
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        if self.device.stuck and self.config_name == "exposure_time_absolute":
            return  # a driver that ignores the control: the readback keeps the old value
        self._value = int(new)
        self.device.writes.append((self.device.produced + self.device.latency, self.snapshot()))

    def snapshot(self) -> dict[str, int]:
        return {n: c.value for n, c in self.device.controls.items()}


class FakeV4L2Device:
    """linuxpy.video.device.Device: 4 x 1 YUYV frames whose luma encodes the frame number."""

    def __init__(self, path: str, latency: int = LATENCY, stuck: bool = False) -> None:
        self.path, self.latency, self.stuck = path, latency, stuck
        self.controls: dict[str, FakeControl] = {}
        for name, lo, hi, value in (
            ("auto_exposure", 0, 3, 3),
            ("exposure_time_absolute", 1, 2047, 100),
            ("gain", 0, 255, 0),
        ):
            self.controls[name] = FakeControl(self, name, lo, hi, value)
        self.produced = 0
        self.writes: list[tuple[int, dict[str, int]]] = [(0, self.controls["gain"].snapshot())]
        self.carried: list[dict[str, int]] = []  # what frame n really had

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __iter__(self) -> Any:
        while True:
            n = self.produced
            self.produced += 1
            self.carried.append([s for first, s in self.writes if first <= n][-1])
            y0, y1 = 16 + n % 200, 16 + n // 200
            data = bytes([y0, 128, y1, 128, y0, 128, y1, 128])
            yield types.SimpleNamespace(data=data, width=4, height=1, pixel_format="YUYV")


def frame_number(image: np.ndarray) -> int:
    """The fake's frame number from a returned (1, 4, 3) RGB image."""
    from edgekit.devices.v4l2_camera import yuyv_to_rgb

    for n in range(400):
        y0, y1 = 16 + n % 200, 16 + n // 200
        if np.array_equal(yuyv_to_rgb(bytes([y0, 128, y1, 128] * 2), 4, 1), image):
            return n
    raise AssertionError("not a frame of the fake")


@pytest.fixture
def fake_linuxpy(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Installs a fake ``linuxpy.video.device``; returns {"path", "devices", "options"}."""
    made: dict[str, Any] = {"path": "/dev/null", "devices": [], "options": {}}  # a path that exists

    def device_factory(path: str) -> FakeV4L2Device:
        made["devices"].append(FakeV4L2Device(path, **made["options"]))
        return made["devices"][-1]

    device = types.ModuleType("linuxpy.video.device")
    device.Device = device_factory  # type: ignore[attr-defined]
    video = types.ModuleType("linuxpy.video")
    video.device = device  # type: ignore[attr-defined]
    root = types.ModuleType("linuxpy")
    root.video = video  # type: ignore[attr-defined]
    for name, module in (("linuxpy", root), ("linuxpy.video", video), (device.__name__, device)):
        monkeypatch.setitem(sys.modules, name, module)
    return made


def test_fake_v4l2_really_delivers_old_settings_for_k_frames(fake_linuxpy) -> None:
    from edgekit.devices.v4l2_camera import V4L2Camera

    fake = FakeV4L2Device("x")
    frames = iter(fake)
    fake.controls["exposure_time_absolute"].value = 200
    for _ in range(LATENCY + 1):
        next(frames)
    assert [c["exposure_time_absolute"] for c in fake.carried] == [100] * LATENCY + [200]
    # the old driver behaviour (no settle): the next frame after the change has the old exposure
    cam = V4L2Camera(fake_linuxpy["path"], settle_frames=0)
    frame = cam.capture(CaptureSettings(iso=100, shutter_s=0.05))
    dev = fake_linuxpy["devices"][-1]
    assert dev.carried[frame_number(frame.image)]["exposure_time_absolute"] == 100  # not 500


@pytest.mark.parametrize("settle", [LATENCY, LATENCY + 1])
def test_v4l2_waits_for_the_requested_settings(fake_linuxpy, settle: int) -> None:
    cam = open_camera(f"v4l2:{fake_linuxpy['path']},settle_frames={settle}")
    dev = fake_linuxpy["devices"][-1]
    requests = ((0.05, 400.0), (0.01, 100.0), (0.01, 100.0), (0.002, 1600.0))
    for (shutter, iso), dropped in zip(requests, (settle, settle, 0, settle), strict=True):
        frame = cam.capture(CaptureSettings(iso=iso, shutter_s=shutter))
        carried = dev.carried[frame_number(frame.image)]
        assert carried["exposure_time_absolute"] == round(shutter / 100e-6)
        assert carried["auto_exposure"] == 1
        assert frame.settings.shutter_s == pytest.approx(shutter)
        assert frame.settings.iso == pytest.approx(iso, rel=0.02)  # gain read back, ~1 % steps
        assert frame.requested == CaptureSettings(iso=iso, shutter_s=shutter)
        assert frame.settings_source == "readback"
        assert frame.dropped_frames == dropped  # unchanged controls: nothing to wait for


def test_v4l2_readback_that_never_matches_is_a_settings_timeout(fake_linuxpy) -> None:
    fake_linuxpy["options"] = {"stuck": True}
    cam = open_camera(f"v4l2:{fake_linuxpy['path']}", max_wait_frames=5)
    with pytest.raises(SettingsTimeout, match=r"ISO 100 1/50 s.*after 5 frames.*1/100 s") as err:
        cam.capture(CaptureSettings(iso=100, shutter_s=0.02))
    assert err.value.requested.shutter_s == 0.02 and err.value.last_seen.shutter_s == 0.01
    with pytest.raises(InputError, match="unknown v4l2 camera option 'fps'"):
        open_camera(f"v4l2:{fake_linuxpy['path']},fps=30")


# --- a fake picamera2: per-request metadata, quantised like an IMX219 ---------------------------
LINE_US = 18.9  # IMX219 line time at 1080p


class FakeRequest:
    def __init__(self, cam: FakePicamera2, n: int, metadata: dict[str, Any]) -> None:
        self.cam, self.n, self.metadata = cam, n, metadata
        cam.outstanding += 1

    def make_array(self, stream: str) -> np.ndarray:
        return np.full((2, 2, 3), self.n, np.uint8)

    def get_metadata(self) -> dict[str, Any]:
        return dict(self.metadata)

    def release(self) -> None:
        self.cam.outstanding -= 1


class FakePicamera2:
    """Exposures are cut to the longest frame the FrameDurationLimits allow (200 ms as
    configured, like a video configuration), as libcamera does."""

    configured_limits_us = (100, 200_000)

    def __init__(self, index: int = 0) -> None:
        self.camera_controls = {
            "ExposureTime": (75, 1_000_000, None),
            "AnalogueGain": (1, 16, None),
            "FrameDurationLimits": (33, 11_000_000, None),
        }
        self.produced, self.outstanding = 0, 0
        self.writes: list[tuple[int, dict[str, Any]]] = [(0, {"ExposureTime": 10_000, "Gain": 1})]
        self.carried: list[dict[str, Any]] = []
        self.frame_limits_us = self.configured_limits_us
        self.controls_set: list[dict[str, Any]] = []

    def create_still_configuration(self, main: dict[str, Any]) -> dict[str, Any]:
        return {"main": main, "controls": {"FrameDurationLimits": self.configured_limits_us}}

    def configure(self, config: dict[str, Any]) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass

    def set_controls(self, controls: dict[str, Any]) -> None:
        self.controls_set.append(dict(controls))
        self.frame_limits_us = controls.get("FrameDurationLimits", self.frame_limits_us)
        exposure = min(controls.get("ExposureTime", 10_000), self.frame_limits_us[1])
        gain_code = round(256 - 256 / controls.get("AnalogueGain", 1.0))  # IMX219 gain codes
        state = {
            "ExposureTime": round(exposure / LINE_US) * LINE_US,
            "Gain": 256 / (256 - gain_code),
        }
        self.writes.append((self.produced + LATENCY, state))

    def capture_request(self) -> FakeRequest:
        n = self.produced
        self.produced += 1
        state = [s for first, s in self.writes if first <= n][-1]
        self.carried.append(state)
        meta = {"ExposureTime": int(state["ExposureTime"]), "AnalogueGain": state["Gain"]}
        return FakeRequest(self, n, meta)


@pytest.fixture
def fake_picamera2(monkeypatch: pytest.MonkeyPatch) -> list[FakePicamera2]:
    made: list[FakePicamera2] = []
    module = types.ModuleType("picamera2")
    module.Picamera2 = lambda index: made.append(FakePicamera2(index)) or made[-1]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "picamera2", module)
    return made


def test_picamera2_waits_for_metadata_with_the_requested_settings(fake_picamera2) -> None:
    cam = open_camera("picamera2")
    fake = fake_picamera2[-1]
    fake.set_controls({"ExposureTime": 40_000, "AnalogueGain": 4.0})  # the fake itself:
    raw = [fake.capture_request() for _ in range(LATENCY + 1)]  # k old frames after a change
    old = [r.get_metadata()["ExposureTime"] for r in raw]
    assert old[:LATENCY] == [10_000] * LATENCY and abs(old[-1] - 40_000) < LINE_US
    for r in raw:
        r.release()
    requests = ((1 / 60, 800.0), (1 / 1000, 1000.0), (1 / 1000, 1000.0), (0.1, 100.0))
    for (shutter, iso), dropped in zip(requests, (LATENCY, LATENCY, 0, LATENCY), strict=True):
        frame = cam.capture(CaptureSettings(iso=iso, shutter_s=shutter))
        carried = fake.carried[int(frame.image[0, 0, 0])]
        assert abs(carried["ExposureTime"] - shutter * 1e6) <= LINE_US
        assert carried["Gain"] == pytest.approx(iso / 100, rel=0.02)
        assert frame.settings.shutter_s == pytest.approx(shutter, abs=LINE_US * 1e-6)
        assert frame.settings.iso == pytest.approx(iso, rel=0.02)
        assert frame.settings_source == "metadata" and fake.outstanding == 0
        assert frame.dropped_frames == dropped


def test_picamera2_setting_never_reached_is_a_settings_timeout(fake_picamera2) -> None:
    from edgekit.devices.picamera2_camera import PiCamera2Camera

    cam = PiCamera2Camera(max_wait_frames=LATENCY - 1, tolerance=SettleTolerance(iso_rel=0.05))
    with pytest.raises(SettingsTimeout, match=r"1/4 s\).*after 3 frames.*the last frame had ISO"):
        cam.capture(CaptureSettings(iso=200, shutter_s=0.25))  # the change needs LATENCY frames
    assert fake_picamera2[-1].outstanding == 0  # every dropped request went back to the camera


def test_picamera2_exposure_longer_than_the_frame_limit_is_reached(fake_picamera2) -> None:
    """0.5 s against a 200 ms frame limit: the request widens FrameDurationLimits (without it
    libcamera cuts the exposure to 200 ms and the capture times out); auto exposure restores
    the configuration's limits."""
    from edgekit.devices.picamera2_camera import PiCamera2Camera

    cam = PiCamera2Camera()
    fake = fake_picamera2[-1]
    assert cam.frame_limits_us == FakePicamera2.configured_limits_us
    frame = cam.capture(CaptureSettings(iso=100, shutter_s=0.5))
    assert frame.settings.shutter_s == pytest.approx(0.5, abs=LINE_US * 1e-6)
    assert frame.dropped_frames == LATENCY
    assert fake.controls_set[-1]["FrameDurationLimits"] == (100, 500_000)
    cam.capture(CaptureSettings(iso=100, shutter_s=0.01))  # shorter: the configured limit holds
    assert fake.controls_set[-1]["FrameDurationLimits"] == (100, 200_000)
    cam.capture(CaptureSettings(auto_exposure=True))
    assert fake.controls_set[-1] == {
        "AeEnable": True,
        "FrameDurationLimits": FakePicamera2.configured_limits_us,
    }
    cam.frame_limits_us = None  # the limit left alone: the sensor cuts 0.5 s to 0.2 s
    with pytest.raises(SettingsTimeout):
        PiCamera2Camera.capture(cam, CaptureSettings(iso=100, shutter_s=0.5))


# --- the pieces: tolerance, the wait loop, the simulator's delay --------------------------------
def test_tolerance_wait_loop_and_time_budget() -> None:
    tol = SettleTolerance()
    want = CaptureSettings(iso=800, shutter_s=1 / 1000)
    assert tol.matches(CaptureSettings(iso=812, shutter_s=1 / 1000 + 25e-6), want)
    assert not tol.matches(CaptureSettings(iso=840, shutter_s=1 / 1000), want)
    assert not tol.matches(CaptureSettings(iso=800, shutter_s=1 / 900), want)
    assert not tol.matches(CaptureSettings(shutter_s=1 / 1000), want)
    assert tol.matches(CaptureSettings(), CaptureSettings(auto_exposure=True))
    ticks = iter(range(100))
    with pytest.raises(SettingsTimeout, match="after 3 frames / 3.000 s"):
        wait_for_settings(
            lambda: (None, CaptureSettings(iso=100)), want, tol, camera="x",
            timeout_s=2.5, clock=lambda: float(next(ticks)),
        )  # fmt: skip
    pipe = DelayedControls(CaptureSettings(iso=100), latency=2)
    pipe.write(want)
    assert [pipe.next_frame() for _ in range(3)] == [CaptureSettings(iso=100)] * 2 + [want]
    assert settle_time_s(3, 30) == pytest.approx(4 / 30)
    assert lens_time_budget(6, 30, 3) == pytest.approx(0.8)
    assert lens_time_budget(2, 30, 0, shutter_s=0.25, inference_s=0.1) == pytest.approx(0.6)
    with pytest.raises(InputError):
        DelayedControls(want, latency=-1)


def test_sim_settings_latency_drops_frames_like_hardware() -> None:
    grid = [CaptureSettings(iso=i, shutter_s=1 / 500, aperture_f=8) for i in (200.0, 800.0)]
    plain, slow = (
        SimCamera(seed=2),
        SimCamera.from_spec("seed=2,settings_latency=2,frame_interval_ms=33"),
    )
    for s, dropped in zip([*grid, grid[1]], (2, 2, 0), strict=True):
        a, b = plain.capture(s), slow.capture(s)
        assert a.dropped_frames == 0 and a.latency_s == pytest.approx(1 / 500 + 0.02)
        assert np.array_equal(a.image, b.image) and b.settings == b.requested == s
        assert b.dropped_frames == dropped
        assert b.latency_s >= (b.dropped_frames + 1) * 0.033
    assert slow.controls.frames == 3 + 2 * 2
    with pytest.raises(SettingsTimeout, match="after 2 frames"):
        SimCamera(settings_latency=2, max_wait_frames=1).capture(grid[0])
    with pytest.raises(InputError, match="frame_interval_s"):
        SimCamera(frame_interval_s=0)


def test_file_camera_says_its_settings_were_not_applied(tmp_path: Path) -> None:
    from skimage.io import imsave

    imsave(tmp_path / "0.png", np.zeros((8, 8, 3), np.uint8), check_contrast=False)
    frame = open_camera(f"file:{tmp_path}").capture(CaptureSettings(iso=400))
    assert frame.settings_source == "none" and frame.settings == CaptureSettings()
    assert frame.requested == CaptureSettings(iso=400) and frame.dropped_frames == 0
