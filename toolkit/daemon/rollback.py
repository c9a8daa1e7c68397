"""Automatic rollback: a swapped-in bundle on which a pipeline fails on every frame for
``after_s`` seconds is replaced by the version it replaced, by the daemon itself.

The watch starts when a pipeline puts a newly *deployed* version of its bundle in service
while the daemon runs (not the version it started with, and not a version a rollback restored,
so rollbacks never cascade down the history). The first frame that succeeds ends the watch.
Frames the camera got wrong (``FrameError``, a disconnect) count neither way: not the bundle's
fault. When the watch runs out, ``BundleStore.auto_rollback`` swaps back (only if the bad version is
still current), the history and ``/health`` record from, to, reason and time, and
``edgekit_auto_rollbacks_total{bundle}`` counts it. With no previous version the bundle stays
and the pipeline's status says why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from edgekit.daemon.metrics import DaemonMetrics
from edgekit.daemon.pipelines import Pipeline
from edgekit.daemon.store import BundleStore
from edgekit.errors import InputError

DEFAULT_ROLLBACK_AFTER_S = 10.0


@dataclass
class SwapWatch:
    """One pipeline's watch over a version it has not yet run a frame on successfully."""

    bundle: str
    version: str
    since: float  # time.monotonic() when the pipeline put the version in service
    failures: int = 0


class AutoRollback:
    """Watches every pipeline after a swap and rolls back a version that never works.

    ``statuses``: the frame loop's per-pipeline status dicts (shown by ``/health``), where the
    watch (``auto_rollback_watch``) and the outcome (``auto_rollback``) are published.
    ``after_s`` <= 0 turns automatic rollback off.
    """

    def __init__(
        self,
        store: BundleStore,
        metrics: DaemonMetrics,
        pipelines: list[Pipeline],
        statuses: dict[str, dict[str, Any]],
        after_s: float = DEFAULT_ROLLBACK_AFTER_S,
    ) -> None:
        self.store, self.metrics, self.after_s = store, metrics, float(after_s)
        self.pipelines, self.statuses = pipelines, statuses
        # the versions the daemon starts with are in service already: not a swap
        self.seen: dict[str, str | None] = {p.name: _current(store, p.bundle) for p in pipelines}
        self.watches: dict[str, SwapWatch] = {}

    def loaded(self, pipe: Pipeline) -> None:
        """After ``pipe`` (re)loaded, or tried to: a new version of its bundle starts a watch
        when it arrived by a deploy."""
        version = pipe.version
        if version == self.seen.get(pipe.name):
            return  # the same version reloaded (another bundle was swapped)
        self.seen[pipe.name] = version
        self._end(pipe)
        if self.after_s <= 0 or version is None or not self._deployed(pipe.bundle, version):
            return
        self.watches[pipe.name] = SwapWatch(pipe.bundle, version, time.monotonic())
        self.statuses[pipe.name]["auto_rollback_watch"] = {
            "version": version,
            "since_utc": _utc(),
            "rollback_after_s": self.after_s,
            "failures": 0,
        }

    def succeeded(self, pipe: Pipeline) -> None:
        """A frame worked: the version in service is good, the watch ends."""
        if pipe.name in self.watches:
            self._end(pipe)

    def failed(self, pipe: Pipeline, error: str) -> dict[str, Any] | None:
        """A frame (or a load) failed; rolls back when the watch has run ``after_s`` seconds
        without a success. Returns the published ``auto_rollback`` event, if any."""
        watch = self.watches.get(pipe.name)
        if watch is None:
            return None
        watch.failures += 1
        self.statuses[pipe.name]["auto_rollback_watch"]["failures"] = watch.failures
        elapsed = time.monotonic() - watch.since
        if elapsed < self.after_s:
            return None
        self._end(pipe)
        reason = (
            f"pipeline '{pipe.name}' failed on all {watch.failures} frames in {elapsed:.1f} s "
            f"after the swap to {watch.version}; last error: {error}"
        )
        try:
            done = self.store.auto_rollback(watch.bundle, watch.version, reason)
        except InputError as exc:  # nothing to go back to: keep serving, say so
            event = {"from": watch.version, "to": None, "reason": reason, "utc": _utc()}
            event["skipped"] = str(exc)
            self.statuses[pipe.name]["auto_rollback"] = event
            return event
        if done is None:  # a later swap replaced the version first; that one is watched anew
            return None
        event = {k: done[k] for k in ("from", "to", "utc")}
        event.update(reason=reason, pipeline=pipe.name)
        self.metrics.auto_rollbacks.labels(watch.bundle).inc()
        self.metrics.swaps.labels(watch.bundle, "auto-rollback").inc()
        for other in self.pipelines:
            if other.bundle == watch.bundle:
                self.statuses[other.name]["auto_rollback"] = event
        return event

    def _end(self, pipe: Pipeline) -> None:
        self.watches.pop(pipe.name, None)
        self.statuses[pipe.name].pop("auto_rollback_watch", None)

    def _deployed(self, bundle: str, version: str) -> bool:
        """True when the latest event of ``bundle``'s history is the deploy of ``version``."""
        history = self.store.describe(bundle).get("history") or []
        last = history[-1] if history else {}
        return last.get("version") == version and last.get("event") == "deploy"


def _current(store: BundleStore, bundle: str) -> str | None:
    path = store.current_path(bundle)
    return path.name if path is not None else None


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
