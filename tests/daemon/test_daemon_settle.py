"""The daemon counts the frames camera drivers discard while new settings reach the sensor:
``/health``'s camera block and ``edgekit_camera_settle_dropped_frames_total``."""

from __future__ import annotations

import pytest

from edgekit.daemon.loop import FrameLoop
from edgekit.daemon.metrics import DaemonMetrics
from edgekit.devices.camera import CaptureSettings
from edgekit.devices.sim_camera import SimCamera


@pytest.mark.parametrize("latency", [0, 2])
def test_settle_drops_are_counted_across_every_user_of_the_camera(latency: int) -> None:
    loop = FrameLoop(
        lambda: SimCamera.from_spec(f"seed=2,settings_latency={latency}"),
        [],
        store=None,  # type: ignore[arg-type] - no pipelines, no bundles
        metrics=DaemonMetrics(),
    )
    camera = loop._connect()
    assert loop.camera_state["settle_dropped_frames"] == 0
    settings = [CaptureSettings(iso=i, shutter_s=1 / 500, aperture_f=8) for i in (200.0, 800.0)]
    for s in [*settings, settings[1]]:  # two changes, then the same settings again
        camera.capture(s)
    want = 2 * latency
    assert loop.camera_state["settle_dropped_frames"] == want
    body = loop.metrics.render()[0].decode()
    assert f"edgekit_camera_settle_dropped_frames_total {float(want)}" in body
    camera.close()
