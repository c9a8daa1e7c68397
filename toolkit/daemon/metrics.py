"""The daemon's Prometheus metrics (prometheus-client), one registry per daemon."""

from __future__ import annotations

from typing import Any

LATENCY_BUCKETS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip


class DaemonMetrics:
    """Counters, gauges and latency histograms exported at ``GET /metrics``.

    - ``edgekit_frames_total``: frames the camera delivered;
    - ``edgekit_frames_dropped_total{pipeline}``: frames a pipeline skipped because it was busy;
    - ``edgekit_frames_processed_total{pipeline}`` and ``edgekit_pipeline_errors_total{pipeline}``;
    - ``edgekit_stage_seconds{pipeline,stage}``: per-stage latency (capture, preprocess, infer...);
    - ``edgekit_capture_to_decision_seconds{pipeline}``: frame capture to result published;
    - ``edgekit_queue_depth{pipeline}``: frames waiting for the pipeline (0 or 1: latest-frame slot);
    - ``edgekit_camera_reconnects_total``, ``edgekit_camera_connected``;
    - ``edgekit_camera_settle_dropped_frames_total``: frames the camera driver discarded while
      newly requested settings reached the sensor (``Frame.dropped_frames``);
    - ``edgekit_bundle_swaps_total{name,event}`` (event: deploy, rollback, auto-rollback);
    - ``edgekit_auto_rollbacks_total{bundle}``: swaps the daemon undid by itself because a
      pipeline failed on every frame after them (``edgekit.daemon.rollback``);
    - ``edgekit_rss_bytes``.
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        reg = {"registry": self.registry}
        self.frames = Counter("edgekit_frames", "Frames delivered by the camera", **reg)
        self.dropped = Counter(
            "edgekit_frames_dropped", "Frames skipped by a busy pipeline", ["pipeline"], **reg
        )
        self.processed = Counter(
            "edgekit_frames_processed", "Frames a pipeline finished", ["pipeline"], **reg
        )
        self.errors = Counter(
            "edgekit_pipeline_errors", "Frames on which a pipeline raised", ["pipeline"], **reg
        )
        self.stage = Histogram(
            "edgekit_stage_seconds",
            "Per-stage latency",
            ["pipeline", "stage"],
            buckets=LATENCY_BUCKETS,
            **reg,
        )
        self.capture_to_decision = Histogram(
            "edgekit_capture_to_decision_seconds",
            "Time from a frame's capture to its result being published",
            ["pipeline"],
            buckets=LATENCY_BUCKETS,
            **reg,
        )
        self.queue_depth = Gauge(
            "edgekit_queue_depth", "Frames waiting for a pipeline", ["pipeline"], **reg
        )
        self.reconnects = Counter(
            "edgekit_camera_reconnects", "Camera reopen attempts after a disconnect", **reg
        )
        self.settle_dropped = Counter(
            "edgekit_camera_settle_dropped_frames",
            "Frames discarded while new capture settings reached the sensor",
            **reg,
        )
        self.camera_connected = Gauge(
            "edgekit_camera_connected", "1 while the camera delivers frames", **reg
        )
        self.swaps = Counter(
            "edgekit_bundle_swaps", "Bundle deploys and rollbacks", ["name", "event"], **reg
        )
        self.auto_rollbacks = Counter(
            "edgekit_auto_rollbacks",
            "Swaps rolled back by the daemon after a pipeline failed on every frame",
            ["bundle"],
            **reg,
        )
        self.rss = Gauge("edgekit_rss_bytes", "Resident set size of the daemon", **reg)
        self.rss.set_function(_rss_bytes)

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of the Prometheus text exposition."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _rss_bytes() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)


def parse_prometheus(text: str) -> dict[str, float]:
    """{"metric{labels}": value} of a Prometheus text exposition (comments skipped)."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out
