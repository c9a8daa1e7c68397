"""The daemon's frame loop: one camera thread, one worker thread per pipeline, no queues.

The camera thread captures with the stream's current settings and puts each frame in a
one-slot "latest frame" box; a pipeline worker always takes the newest frame, and every frame
that arrived while it was busy is counted as dropped for that pipeline. Memory is bounded by
construction (one frame per slot, one result per pipeline). A camera that disconnects is
closed and reopened with backoff; a pipeline that raises on a frame (or cannot load its
bundle) is counted and keeps going. After a swap, a pipeline that fails on every frame for
``rollback_after_s`` seconds gets the previous version back (``edgekit.daemon.rollback``).
The HTTP server runs elsewhere (the event loop) and only reads snapshots from here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from edgekit.daemon.metrics import DaemonMetrics
from edgekit.daemon.pipelines import Context, FrameError, Pipeline
from edgekit.daemon.rollback import DEFAULT_ROLLBACK_AFTER_S, AutoRollback
from edgekit.daemon.store import BundleNotDeployed, BundleStore
from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, Frame


class SharedCamera(Camera):
    """A camera several threads use: captures are serialised by a lock (one sensor).

    ``on_frame`` sees every captured frame (the frame loop counts the frames a driver
    discarded while new settings reached the sensor, ``Frame.dropped_frames``).
    """

    def __init__(self, inner: Camera, on_frame: Callable[[Frame], None] | None = None) -> None:
        self.inner = inner
        self.on_frame = on_frame
        self.name = inner.name
        self.lock = threading.RLock()
        if hasattr(inner, "meter"):
            self.meter = self._meter

    def _meter(self, *args: Any, **kwargs: Any) -> CaptureSettings:
        with self.lock:
            return self.inner.meter(*args, **kwargs)  # type: ignore[attr-defined]

    def capabilities(self) -> dict:
        return self.inner.capabilities()

    def capture(self, settings: CaptureSettings | None = None) -> Frame:
        with self.lock:
            frame = self.inner.capture(settings)
        if self.on_frame is not None:
            self.on_frame(frame)
        return frame

    def close(self) -> None:
        with self.lock:
            self.inner.close()


class LatestFrame:
    """A one-slot box: ``put`` replaces, ``wait_newer(seq)`` blocks until a newer frame."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.frame: Frame | None = None
        self.seq = 0
        self.captured_at = 0.0  # time.monotonic() of the newest frame

    def put(self, frame: Frame) -> None:
        with self._cond:
            self.frame, self.seq, self.captured_at = frame, self.seq + 1, time.monotonic()
            self._cond.notify_all()

    def wait_newer(self, seq: int, timeout: float) -> tuple[Frame | None, int, float]:
        with self._cond:
            self._cond.wait_for(lambda: self.seq > seq, timeout)
            return self.frame, self.seq, self.captured_at


class FrameLoop:
    """Runs the camera and the pipelines until ``stop()``.

    ``open_camera``: a zero-argument factory (reopened after a disconnect); ``fps``: cap on the
    camera thread's rate (0 = as fast as the camera delivers); ``max_frames``: stop capturing
    after this many frames (None = forever); ``rollback_after_s``: roll a swap back when a
    pipeline fails on every frame for this long after it (<= 0: never).
    """

    def __init__(
        self,
        open_camera: Callable[[], Camera],
        pipelines: list[Pipeline],
        store: BundleStore,
        metrics: DaemonMetrics,
        fps: float = 0.0,
        max_frames: int | None = None,
        profile: Any = None,
        rollback_after_s: float = DEFAULT_ROLLBACK_AFTER_S,
    ) -> None:
        self.open_camera = open_camera
        self.pipelines = pipelines
        for pipe in pipelines:
            pipe.profile = profile
        self.store = store
        self.metrics = metrics
        self.fps = fps
        self.max_frames = max_frames
        self.latest = LatestFrame()
        self.results: dict[str, dict[str, Any]] = {}
        self.status: dict[str, dict[str, Any]] = {
            p.name: {"state": "starting", "processed": 0, "dropped": 0, "errors": 0}
            for p in pipelines
        }
        self.rollbacks = AutoRollback(store, metrics, pipelines, self.status, rollback_after_s)
        self.camera_state: dict[str, Any] = {
            "connected": False,
            "reconnects": 0,
            "error": None,
            "settle_dropped_frames": 0,  # frames drivers discarded waiting for new settings
        }
        self.stream_settings = CaptureSettings()
        self.camera: SharedCamera | None = None
        self._stop = threading.Event()
        self._pauses = 0
        self._running = threading.Event()
        self._running.set()
        self._pause_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.frames = 0
        self._busy: dict[str, bool] = {p.name: False for p in pipelines}

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._threads = [threading.Thread(target=self._camera_loop, name="camera", daemon=True)]
        self._threads += [
            threading.Thread(target=self._pipeline_loop, args=(p,), name=p.name, daemon=True)
            for p in self.pipelines
        ]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        if self.camera is not None:
            with contextlib.suppress(Exception):  # a broken device must not stop shutdown
                self.camera.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the camera and the pipelines (e.g. while benchmarking, so the numbers are the
        model's alone); nested holds are counted. Waits for in-flight frames to finish."""
        with self._pause_lock:
            self._pauses += 1
            self._running.clear()
        time.sleep(0.05)
        deadline = time.monotonic() + 30.0
        while any(self._busy.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            yield
        finally:
            with self._pause_lock:
                self._pauses -= 1
                if self._pauses == 0:
                    self._running.set()

    def _wait_running(self) -> None:
        while not self._running.is_set() and not self._stop.is_set():
            self._running.wait(0.2)

    def set_stream_settings(self, settings: CaptureSettings) -> None:
        self.stream_settings = CaptureSettings(
            iso=settings.iso, shutter_s=settings.shutter_s, aperture_f=settings.aperture_f
        )

    # ---- camera -----------------------------------------------------------------------------
    def _count_settle_drops(self, frame: Frame) -> None:
        dropped = int(getattr(frame, "dropped_frames", 0) or 0)
        if dropped > 0:
            self.camera_state["settle_dropped_frames"] += dropped
            self.metrics.settle_dropped.inc(dropped)

    def _connect(self) -> SharedCamera:
        backoff = 0.05
        while not self._stop.is_set():
            try:
                camera = SharedCamera(self.open_camera(), self._count_settle_drops)
                self.camera_state.update(connected=True, error=None)
                self.metrics.camera_connected.set(1)
                return camera
            except Exception as exc:  # noqa: BLE001 - any open failure is retried
                self.camera_state.update(connected=False, error=f"{type(exc).__name__}: {exc}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
        raise CameraDisconnected("daemon stopping")

    def _camera_loop(self) -> None:
        period = 1.0 / self.fps if self.fps > 0 else 0.0
        try:
            self.camera = self._connect()
        except CameraDisconnected:
            return
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._wait_running()
            if self.max_frames is not None and self.frames >= self.max_frames:
                self._stop.wait(0.05)
                continue
            try:
                start = time.perf_counter()
                frame = self.camera.capture(self.stream_settings)
                self.metrics.stage.labels("camera", "capture").observe(time.perf_counter() - start)
            except (CameraDisconnected, OSError) as exc:
                self.camera_state.update(connected=False, error=f"{type(exc).__name__}: {exc}")
                self.metrics.camera_connected.set(0)
                self.metrics.reconnects.inc()
                self.camera_state["reconnects"] += 1
                with contextlib.suppress(Exception):
                    self.camera.close()
                try:
                    self.camera = self._connect()
                except CameraDisconnected:
                    return
                continue
            self.frames += 1
            self.metrics.frames.inc()
            self.latest.put(frame)
            if period:
                next_at = max(next_at + period, time.monotonic() - period)
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    # ---- pipelines --------------------------------------------------------------------------
    def _pipeline_loop(self, pipe: Pipeline) -> None:
        status = self.status[pipe.name]
        seen = 0
        waiting = False  # frames that pass while no bundle is deployed are not drops
        metrics = self.metrics
        while not self._stop.is_set():
            self._wait_running()
            frame, seq, captured_at = self.latest.wait_newer(seen, timeout=0.2)
            if frame is None or seq <= seen:
                metrics.queue_depth.labels(pipe.name).set(0)
                continue
            if seen and seq - seen > 1 and not waiting:
                metrics.dropped.labels(pipe.name).inc(seq - seen - 1)
                status["dropped"] += seq - seen - 1
            seen = seq
            metrics.queue_depth.labels(pipe.name).set(0)
            ctx = Context(
                camera=self.camera,  # type: ignore[arg-type]
                set_stream_settings=self.set_stream_settings,
                stage=lambda stage, s, n=pipe.name: metrics.stage.labels(n, stage).observe(s),
            )
            self._busy[pipe.name] = True
            try:
                pipe.ensure_loaded(self.store)
            except BundleNotDeployed as exc:  # not an error: waiting for a deploy
                status.update(state="waiting for bundle", waiting_for=str(exc))
                self._busy[pipe.name] = False
                waiting = True
                self._stop.wait(0.2)
                continue
            except Exception as exc:  # noqa: BLE001 - a bundle that will not load
                self._busy[pipe.name] = False
                self.rollbacks.loaded(pipe)
                self._failed(pipe, exc, "load failed")
                self._stop.wait(0.2)
                continue
            self.rollbacks.loaded(pipe)
            waiting = False
            try:
                status.update(state="running", runtime=pipe.runtime)
                status.pop("waiting_for", None)
                start = time.perf_counter()
                result = pipe.process(frame, ctx)
                metrics.stage.labels(pipe.name, "total").observe(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - one bad frame must not stop the daemon
                self._failed(pipe, exc)
                continue
            finally:
                self._busy[pipe.name] = False
            self.rollbacks.succeeded(pipe)
            # a newer frame already waiting while this one was processed: the slot is full
            metrics.queue_depth.labels(pipe.name).set(int(self.latest.seq > seen))
            metrics.capture_to_decision.labels(pipe.name).observe(time.monotonic() - captured_at)
            metrics.processed.labels(pipe.name).inc()
            status["processed"] += 1
            self.results[pipe.name] = {
                "pipeline": pipe.name,
                "kind": pipe.kind,
                "bundle": pipe.bundle,
                "frame_seq": seq,
                "frame_timestamp_s": frame.timestamp_s,
                "published_utc": time.time(),
                "capture_to_decision_s": time.monotonic() - captured_at,
                "result": result,
                "_frame": frame,
                **pipe.render_extras(),
            }

    def _failed(self, pipe: Pipeline, exc: Exception, state: str | None = None) -> None:
        """Count a frame (or load) ``pipe`` failed on; the swap watch hears of it unless the
        camera was at fault (a malformed frame, a disconnect during a pipeline's captures)."""
        status = self.status[pipe.name]
        self.metrics.errors.labels(pipe.name).inc()
        status["errors"] += 1
        status["last_error"] = f"{type(exc).__name__}: {exc}"
        status["last_error_trace"] = traceback.format_exc(limit=5)[-2000:]
        if state:
            status["state"] = state
        if not isinstance(exc, (FrameError, CameraDisconnected)):
            self.rollbacks.failed(pipe, status["last_error"])
