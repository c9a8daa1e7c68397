"""Lens: test-time sensor control driven by the deployed model's own VisiT score.

Per decision the controller picks up to K candidate settings from a grid (candidate selection,
"CSA"), captures each, scores all captures with VisiT in one batch and keeps the best (ties: the
lower grid index). CSA here is our own design (the paper does not publish one):

1. the prior: the previous decision (temporal reuse on streams);
2. the prior's grid neighbours (one step along one axis), lowest index first;
3. a coarse sweep across the exposure-value range (evenly spaced EV quantiles of the grid).

Neighbours and sweep points are interleaved after the prior; a cold start (no prior) spends the
whole budget on the sweep. With a per-decision latency budget
each candidate costs its shutter time plus the camera's readout (estimated from past frames);
inference time (measured, last batch) is reserved up front; candidates that would overrun the
budget are skipped, shortest-shutter ones can still get in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, ControlRange
from edgekit.errors import InputError

PAPER_ISO = (250.0, 2000.0, 16000.0)
PAPER_SHUTTER_S = (1 / 4, 1 / 60, 1 / 1000)
PAPER_APERTURE_F = (5.0, 9.0, 16.0)
AXES = ("iso", "shutter_s", "aperture_f")


def _cartesian(iso: tuple, shutter: tuple, aperture: tuple) -> list[CaptureSettings]:
    """ISO varies fastest, then shutter, then aperture."""
    return [
        CaptureSettings(iso=i, shutter_s=s, aperture_f=a)
        for a in aperture
        for s in shutter
        for i in iso
    ]


def paper_grid() -> list[CaptureSettings]:
    """The paper's 27 test settings: ISO {250, 2000, 16000} x shutter {1/4, 1/60, 1/1000} s x
    aperture {f/5, f/9, f/16}; index = iso_i + 3 * shutter_i + 9 * aperture_i."""
    return _cartesian(PAPER_ISO, PAPER_SHUTTER_S, PAPER_APERTURE_F)


def _axis_values(control: ControlRange | None, n: int, descending: bool) -> tuple:
    if control is None:
        return (None,)
    if control.values:
        values = sorted(set(control.values))
        picks = np.linspace(0, len(values) - 1, min(n, len(values))).round().astype(int)
        out = [float(values[i]) for i in dict.fromkeys(picks.tolist())]
    else:
        raw = np.geomspace(control.minimum, control.maximum, n) if n > 1 else [control.minimum]
        out = list(dict.fromkeys(control.clamp(float(v)) for v in raw))
    return tuple(sorted(out, reverse=descending))


def grid_from_capabilities(
    capabilities: dict[str, ControlRange], n_per_axis: int = 3
) -> list[CaptureSettings]:
    """A grid of ``n_per_axis`` log-spaced values per control the camera has (ISO ascending,
    shutter descending, aperture ascending, as in the paper); a missing control stays None."""
    if n_per_axis < 1:
        raise InputError("n_per_axis must be >= 1")
    iso = _axis_values(capabilities.get("iso"), n_per_axis, False)
    shutter = _axis_values(capabilities.get("shutter_s"), n_per_axis, True)
    aperture = _axis_values(capabilities.get("aperture_f"), n_per_axis, False)
    grid = _cartesian(iso, shutter, aperture)
    if len(grid) == 1 and grid[0] == CaptureSettings():
        raise InputError("this camera has no ISO/shutter/aperture controls for Lens to set")
    return grid


def grid_neighbours(grid: list[CaptureSettings]) -> list[list[int]]:
    """For each grid index, the indices one step away along exactly one axis (ascending)."""
    coords = []
    levels = {a: sorted({getattr(s, a) or 0.0 for s in grid}) for a in AXES}
    for s in grid:
        coords.append([levels[a].index(getattr(s, a) or 0.0) for a in AXES])
    c = np.asarray(coords)  # (N, 3)
    dist = np.abs(c[:, None, :] - c[None, :, :]).sum(axis=2)  # (N, N)
    return [np.flatnonzero(row == 1).tolist() for row in dist]


def grid_ev(grid: list[CaptureSettings]) -> np.ndarray:
    """EV100 (N,) of each grid setting (0 where a control is unset)."""
    return np.array([s.exposure_value() or 0.0 for s in grid])


@dataclass
class Decision:
    """One Lens decision. ``image``: the chosen capture (H, W, 3) uint8; ``scores``: VisiT of
    each candidate (K,); latencies in seconds (capture = sum of the frames' latency_s)."""

    settings: CaptureSettings
    score: float
    captures: int
    capture_latency_s: float
    inference_s: float
    total_s: float
    candidates: list[int]
    chosen_index: int
    pred: int
    label: str | None = None
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    image: np.ndarray | None = None
    over_budget: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_json(),
            "setting": self.settings.describe(),
            "score": round(float(self.score), 6),
            "captures": self.captures,
            "capture_latency_s": self.capture_latency_s,
            "inference_s": self.inference_s,
            "total_s": self.total_s,
            "candidates": self.candidates,
            "chosen_index": self.chosen_index,
            "pred": self.pred,
            "label": self.label,
            "over_budget": self.over_budget,
        }


class LensController:
    """Test-time sensor control: ``decide()`` -> the best of up to ``budget_k`` captures.

    ``runner``: a classifier session (VisiT scorer); ``camera``: any Camera; ``grid``: candidate
    settings (default ``paper_grid()``); ``variant``: VisiT variant; ``latency_budget_s``: per
    decision cap on shutter + readout + inference (None = no cap); ``labels``: class names.
    """

    def __init__(
        self,
        runner: Any,
        camera: Camera,
        grid: list[CaptureSettings] | None = None,
        budget_k: int = 27,
        variant: str = "top1",
        latency_budget_s: float | None = None,
        labels: list[str] | None = None,
        readout_s: float = 0.0,
    ) -> None:
        self.runner = runner
        self.camera = camera
        self.grid = list(grid) if grid is not None else paper_grid()
        if budget_k < 1:
            raise InputError(f"budget_k must be >= 1, got {budget_k}")
        self.budget_k = min(budget_k, len(self.grid))
        self.variant = variant
        self.latency_budget_s = latency_budget_s
        self.labels = labels
        self.neighbours = grid_neighbours(self.grid)
        self.ev = grid_ev(self.grid)
        self.readout_s = readout_s  # per-capture estimate, updated from frames
        self.inference_s: float | None = None  # last measured batch inference
        self.last_index: int | None = None
        self.last_good: CaptureSettings | None = None

    # ---- candidate selection -------------------------------------------------------------
    def sweep(self, count: int) -> list[int]:
        """Up to ``count`` grid indices at evenly spaced EV quantiles (the lowest index among
        settings of equal EV, i.e. the lowest ISO)."""
        if count <= 0:
            return []
        order = np.argsort(self.ev, kind="stable")  # (N,) grid indices by EV
        positions = ((np.arange(count) + 0.5) / count * len(order)).astype(int)  # (count,)
        chosen = [int(np.flatnonzero(np.isclose(self.ev, self.ev[order[p]]))[0]) for p in positions]
        return list(dict.fromkeys(chosen))

    def prior(self) -> int:
        """The previous decision, else the setting at the middle of the EV range."""
        return self.last_index if self.last_index is not None else self.sweep(1)[0]

    def plan(self, k: int | None = None) -> list[int]:
        """Candidate grid indices (<= K, within the latency budget), ascending; the budget drops
        the least promising first (ranking: prior, then neighbours and sweep interleaved)."""
        k = min(k or self.budget_k, len(self.grid))
        if k >= len(self.grid):
            ranked = list(range(len(self.grid)))
        elif self.last_index is None:  # cold start: spread the budget over the EV range
            ranked = list(dict.fromkeys([*self.sweep(k), *range(len(self.grid))]))[:k]
        else:
            first = self.prior()
            near = list(self.neighbours[first])
            far = self.sweep(max(k, 2))
            ranked = [first]
            for pair in zip(near, far, strict=False):
                ranked.extend(pair)
            ranked.extend(near[len(far) :] + far[len(near) :])
            ranked.extend(range(len(self.grid)))  # fill-up when the lists are short
            ranked = list(dict.fromkeys(ranked))[:k]
        return sorted(self._fit_budget(ranked))

    def capture_cost_s(self, index: int) -> float:
        """Expected capture time of grid setting ``index``: shutter + readout estimate."""
        return float(self.grid[index].shutter_s or 0.0) + self.readout_s

    def _fit_budget(self, ranked: list[int]) -> list[int]:
        if self.latency_budget_s is None:
            return ranked
        left = self.latency_budget_s - (self.inference_s or 0.0)
        kept = []
        for i in ranked:
            if self.capture_cost_s(i) <= left:
                kept.append(i)
                left -= self.capture_cost_s(i)
        return kept or [min(ranked, key=self.capture_cost_s)]

    def commit(self, index: int) -> None:
        """Remember grid ``index`` as the last good decision (temporal reuse)."""
        self.last_index = index
        self.last_good = self.grid[index]

    # ---- the loop ------------------------------------------------------------------------
    def decide(self, scene_frame: np.ndarray | None = None) -> Decision:
        """Capture the planned candidates, score them with VisiT in one batch, keep the best.

        ``scene_frame`` (H, W, 3) uint8, when given, is set as the scene on cameras with
        ``set_scene`` (the simulator). A camera that disconnects mid-decision leaves the last
        good setting in place and raises CameraDisconnected naming it.
        """
        from edgekit.visit import best_index, visit_scores

        if scene_frame is not None and hasattr(self.camera, "set_scene"):
            self.camera.set_scene(scene_frame)
        candidates = self.plan()
        frames = []
        for n, i in enumerate(candidates):
            try:
                frames.append(self.camera.capture(self.grid[i]))
            except CameraDisconnected as exc:
                keep = self.last_good.describe() if self.last_good else "none yet"
                raise CameraDisconnected(
                    f"camera disconnected during a Lens decision after {n} of {len(candidates)} "
                    f"captures; keeping the last good setting ({keep}): {exc}"
                ) from exc
        capture_s = float(sum(f.latency_s for f in frames))
        extra = [f.latency_s - float(f.settings.shutter_s or 0.0) for f in frames]
        self.readout_s = max(0.0, float(np.median(extra)))
        started = time.perf_counter()
        scores, logits = visit_scores(
            self.runner, np.stack([f.image for f in frames]), self.variant, return_logits=True
        )
        self.inference_s = time.perf_counter() - started
        best = best_index(scores)
        chosen = candidates[best]
        self.commit(chosen)
        pred = int(np.argmax(logits[best]))
        return Decision(
            settings=frames[best].settings,
            score=float(scores[best]),
            captures=len(frames),
            capture_latency_s=capture_s,
            inference_s=self.inference_s,
            total_s=capture_s + self.inference_s,
            candidates=candidates,
            chosen_index=chosen,
            pred=pred,
            label=self.labels[pred] if self.labels and pred < len(self.labels) else None,
            scores=scores,
            image=frames[best].image,
            over_budget=self.latency_budget_s is not None
            and sum(self.capture_cost_s(i) for i in candidates) > self.latency_budget_s,
        )

    def decide_from_scores(
        self, all_scores: np.ndarray, k: int | None = None
    ) -> tuple[int, list[int]]:
        """Replay a decision on precomputed VisiT ``all_scores`` (N,) over the whole grid: plan,
        pick the best candidate (ties: lower index), commit. Returns (grid index, candidates)."""
        candidates = self.plan(k)
        chosen = candidates[int(np.argmax(all_scores[candidates]))]
        self.commit(chosen)
        return chosen, candidates
