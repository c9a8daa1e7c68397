"""Lens: test-time sensor control driven by the deployed model's own VisiT score.

Per decision the controller picks up to K candidate settings from a grid (candidate selection,
"CSA"), captures each, scores all captures with VisiT in one batch and keeps the best (ties: the
lower grid index). CSA here is our own design (the paper does not publish one):

1. the prior: the previous decision (temporal reuse on streams);
2. the prior's grid neighbours (one step along one axis), lowest index first;
3. a coarse sweep across the exposure-value range (evenly spaced EV quantiles of the grid).

Neighbours and sweep points are interleaved after the prior; a cold start (no prior) spends the
whole budget on the sweep. That is ``strategy="ev-sweep"``. Two more CSAs (``STRATEGIES``):

- ``"metered"``: anchor on the camera's own meter (free: cameras meter from the preview stream):
  the grid EV level nearest the metered EV, then the levels 1, 2, ... steps below/above it;
  within a level (settings within ``EV_LEVEL_TOL`` stops) lower ISO, then faster shutter first.
  Without a meter (camera has no ``meter()``) it falls back to "ev-sweep".
- ``"two-stage"``: a coarse EV sweep of ceil(K/2) captures, scored, then the rest of K on the EV
  levels around the best of them (two VisiT batches).

With a per-decision latency budget
each candidate costs its shutter time plus the camera's readout (estimated from past frames, so
it includes the frames a camera drops waiting for a new setting to reach the sensor);
inference time (measured, last batch) is reserved up front; candidates that would overrun the
budget are skipped, shortest-shutter ones can still get in.

With a calibrated ``SettingPrior`` (lens.prior; not in the paper) candidates are ranked by
log VisiT + weight x log(calibration accuracy of the setting) instead of VisiT alone.

Time: a camera returns only a frame that carries the requested setting (devices/camera.py), and a
new setting reaches the sensor ``settle_frames`` frames late, so K candidates cost about
K x (settle_frames + 1) frame times (``lens_time_budget``): K = 6 at 30 fps with 3 settle frames
is 0.8 s per decision. ``Decision.capture_latency_s`` includes that wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, ControlRange
from edgekit.devices.settle import settle_time_s
from edgekit.errors import InputError

PAPER_ISO = (250.0, 2000.0, 16000.0)
PAPER_SHUTTER_S = (1 / 4, 1 / 60, 1 / 1000)
PAPER_APERTURE_F = (5.0, 9.0, 16.0)
AXES = ("iso", "shutter_s", "aperture_f")
STRATEGIES = ("ev-sweep", "metered", "two-stage")
# How a decision labels the scene: "select" (the paper's Lens: the prediction of the capture with
# the best VisiT) or "fuse" (a VisiT-weighted vote of all K captures' predictions; the best
# capture is still the one kept for temporal reuse). Not in the paper; see the README's Lens rows.
DECISIONS = ("select", "fuse")
DEFAULT_STRATEGY = "metered"  # best on the calibration scenes at K = 3, 6, 9 (all 3 bundles)
EV_LEVEL_TOL = 0.5  # stops; fixed a priori: settings this close in EV count as one EV level


def lens_time_budget(
    k: int, fps: float, settle_frames: int, shutter_s: float = 0.0, inference_s: float = 0.0
) -> float:
    """Seconds one decision of ``k`` captures takes at ``fps``: each candidate waits
    ``settle_frames`` frames for its setting and keeps the next (a frame lasts at least
    ``shutter_s``), plus ``inference_s``."""
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    frame_s = max(settle_time_s(0, fps), shutter_s)
    return k * (settle_frames + 1) * frame_s + inference_s


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


def camera_grid(capabilities: dict[str, ControlRange]) -> list[CaptureSettings]:
    """The grid Lens uses on a camera: the paper's 27 settings when the camera can apply them
    unchanged, else ``grid_from_capabilities`` (3 values per control it has)."""
    grid = paper_grid()
    if any(
        capabilities.get(a) is None
        or capabilities[a].clamp(getattr(grid[0], a)) != getattr(grid[0], a)
        for a in AXES
    ):
        return grid_from_capabilities(capabilities, 3)
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


def ev_levels(grid: list[CaptureSettings], tol: float = EV_LEVEL_TOL) -> list[list[int]]:
    """Grid indices grouped into EV levels, ascending EV: a level starts at its lowest EV and
    takes every setting within ``tol`` stops of it; members ordered lower ISO, then faster
    shutter (less noise, less blur), then lower index."""
    ev = grid_ev(grid)
    levels: list[list[int]] = []
    for i in np.argsort(ev, kind="stable").tolist():
        if levels and ev[i] - ev[levels[-1][0]] <= tol:
            levels[-1].append(i)
        else:
            levels.append([i])
    key = lambda i: (grid[i].iso or 0.0, grid[i].shutter_s or 0.0, i)  # noqa: E731
    return [sorted(level, key=key) for level in levels]


def around_level(levels: list[list[int]], centre: int) -> list[int]:
    """Grid indices ranked by EV-level distance from level ``centre``: each level's preferred
    setting first (centre, -1, +1, -2, +2, ...), then the levels' other members in that order."""
    order = [centre]
    for step in range(1, len(levels)):
        order.extend(c for c in (centre - step, centre + step) if 0 <= c < len(levels))
    firsts = [levels[c][0] for c in order]
    rest = [i for c in order for i in levels[c][1:]]
    return firsts + rest


def classifier_view(frame: Any) -> np.ndarray:
    """What the classifier is given of a capture (h, w, 3) uint8: the print region when the
    frame has one (``metadata["print_box"]``, a sim camera with a PrintMount), else the frame."""
    box = frame.metadata.get("print_box")
    if box is None:
        return frame.image
    y0, y1, x0, x1 = box
    return frame.image[y0:y1, x0:x1]


@dataclass
class Decision:
    """One Lens decision. ``image``: the chosen capture (H, W, 3) uint8; ``scores``: VisiT of
    each candidate (K,); latencies in seconds: ``capture_latency_s`` = the sum of the frames'
    latency_s (request to frame, the ``dropped_frames`` waited for each setting included; the
    camera's clock: wall time on hardware, modelled time on the simulator unless realtime),
    ``capture_wall_s`` = wall time this process spent in the captures."""

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
    decision: str = "select"
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    image: np.ndarray | None = None
    over_budget: bool = False
    prior_weight: float | None = None
    prior_form: str | None = None  # "log" or "offset" (lens.prior), None without a prior
    variant: str = "top1"  # the VisiT variant that scored the candidates
    dropped_frames: int = 0
    capture_wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_json(),
            "setting": self.settings.describe(),
            "score": round(float(self.score), 6),
            "captures": self.captures,
            "capture_latency_s": self.capture_latency_s,
            "capture_wall_s": self.capture_wall_s,
            "dropped_frames": self.dropped_frames,
            "inference_s": self.inference_s,
            "total_s": self.total_s,
            "candidates": self.candidates,
            "scores": [round(float(x), 6) for x in self.scores],
            "chosen_index": self.chosen_index,
            "pred": self.pred,
            "label": self.label,
            "decision": self.decision,
            "over_budget": self.over_budget,
            "prior_weight": self.prior_weight,
            "prior_form": self.prior_form,
            "variant": self.variant,
        }


class LensController:
    """Test-time sensor control: ``decide()`` -> the best of up to ``budget_k`` captures.

    ``runner``: a classifier session (VisiT scorer); ``camera``: any Camera; ``grid``: candidate
    settings (default ``paper_grid()``); ``variant``: VisiT variant; ``latency_budget_s``: per
    decision cap on shutter + readout + inference (None = no cap); ``labels``: class names;
    ``strategy``: candidate selection, one of ``STRATEGIES``; ``decision``: how the label is
    read from the captures, one of ``DECISIONS``; ``prior``: a calibrated SettingPrior
    (lens.prior) over this grid: candidates are then ranked by log VisiT + weight x log prior
    (None: VisiT alone, the paper's Lens).
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
        strategy: str = DEFAULT_STRATEGY,
        decision: str = "select",
        prior: Any = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise InputError(f"unknown strategy '{strategy}'; expected one of {STRATEGIES}")
        if decision not in DECISIONS:
            raise InputError(f"unknown decision '{decision}'; expected one of {DECISIONS}")
        self.strategy = strategy
        self.decision = decision
        self.runner = runner
        self.camera = camera
        self.grid = list(grid) if grid is not None else paper_grid()
        if budget_k < 1:
            raise InputError(f"budget_k must be >= 1, got {budget_k}")
        self.budget_k = min(budget_k, len(self.grid))
        from edgekit.lens.visit import check_variant

        check_variant(variant)
        self.variant = variant
        self.setting_prior = prior
        if prior is not None:
            prior.check_grid([s.describe() for s in self.grid])
            if prior.variant != variant:
                raise InputError(
                    f"the Lens prior was calibrated with VisiT '{prior.variant}', "
                    f"the controller uses '{variant}'"
                )
        self.latency_budget_s = latency_budget_s
        self.labels = labels
        self.neighbours = grid_neighbours(self.grid)
        self.ev = grid_ev(self.grid)
        self.levels = ev_levels(self.grid)
        self.level_of = {i: n for n, level in enumerate(self.levels) for i in level}
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

    def anchor(self, meter_ev: float) -> int:
        """The preferred setting of the EV level holding the grid setting nearest ``meter_ev``."""
        nearest = int(np.argmin(np.abs(self.ev - meter_ev)))
        return self.levels[self.level_of[nearest]][0]

    def stage_one_k(self, k: int) -> int:
        """Captures of the first (sweep) stage of "two-stage" for budget ``k``: ceil(k/2)."""
        return (k + 1) // 2

    def refine(self, best: int, taken: list[int], count: int) -> list[int]:
        """Second stage of "two-stage": up to ``count`` new indices around grid ``best``'s EV
        level (its neighbouring levels first), ascending."""
        ranked = [i for i in around_level(self.levels, self.level_of[best]) if i not in taken]
        return sorted(self._fit_budget(ranked[:count], spent=taken) if count > 0 else [])

    def plan(self, k: int | None = None, meter_ev: float | None = None) -> list[int]:
        """Candidate grid indices (<= K, within the latency budget), ascending; the budget drops
        the least promising first. "ev-sweep" ranking: prior, then neighbours and sweep
        interleaved; "metered" (with ``meter_ev``): the anchor, then EV levels around it;
        "two-stage": the first stage only (ceil(K/2) sweep points; see ``refine``)."""
        k = min(k or self.budget_k, len(self.grid))
        if k >= len(self.grid):
            ranked = list(range(len(self.grid)))
        elif self.strategy == "metered" and meter_ev is not None:
            ranked = around_level(self.levels, self.level_of[self.anchor(meter_ev)])[:k]
        elif self.strategy == "two-stage":
            ranked = list(dict.fromkeys([*self.sweep(self.stage_one_k(k)), *range(len(self.grid))]))
            ranked = ranked[: self.stage_one_k(k)]
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

    def _fit_budget(self, ranked: list[int], spent: list[int] | None = None) -> list[int]:
        if self.latency_budget_s is None:
            return ranked
        left = self.latency_budget_s - (self.inference_s or 0.0)
        left -= sum(self.capture_cost_s(i) for i in spent or [])
        kept = []
        for i in ranked:
            if self.capture_cost_s(i) <= left:
                kept.append(i)
                left -= self.capture_cost_s(i)
        if spent:  # second stage: nothing is forced in
            return kept
        return kept or [min(ranked, key=self.capture_cost_s)]

    def ranking(self, scores: np.ndarray, indices: list[int]) -> np.ndarray:
        """What candidates are ranked by: VisiT ``scores`` (K,) of grid ``indices``, or with a
        prior the log VisiT + weight x log prior of each."""
        if self.setting_prior is None:
            return scores
        return self.setting_prior.adjust(scores, indices)

    def commit(self, index: int) -> None:
        """Remember grid ``index`` as the last good decision (temporal reuse)."""
        self.last_index = index
        self.last_good = self.grid[index]

    # ---- the loop ------------------------------------------------------------------------
    def decide(self, scene_frame: np.ndarray | None = None) -> Decision:
        """Capture the planned candidates, score them with VisiT in one batch, keep the best
        (its prediction, or with ``decision="fuse"`` the VisiT-weighted vote of all captures).

        ``scene_frame`` (H, W, 3) uint8, when given, is set as the scene on cameras with
        ``set_scene`` (the simulator). VisiT scores the ``classifier_view`` of each capture. A
        camera that disconnects mid-decision leaves the last good setting in place and raises
        CameraDisconnected naming it.
        """
        from edgekit.lens.visit import best_index, fused_prediction, visit_scores

        if scene_frame is not None and hasattr(self.camera, "set_scene"):
            self.camera.set_scene(scene_frame)
        meter_ev = None
        if self.strategy == "metered" and hasattr(self.camera, "meter"):
            meter_ev = self.camera.meter().exposure_value()
        candidates = self.plan(meter_ev=meter_ev)
        wall = time.perf_counter()
        frames = self._capture(candidates, 0)
        wall = time.perf_counter() - wall
        started = time.perf_counter()
        scores, logits = visit_scores(
            self.runner,
            np.stack([classifier_view(f) for f in frames]),
            self.variant,
            return_logits=True,
        )
        k, first_s = min(self.budget_k, len(self.grid)), 0.0
        if self.strategy == "two-stage" and k < len(self.grid):
            first = best_index(self.ranking(scores, candidates))
            extra = self.refine(candidates[first], candidates, k - len(candidates))
            if extra:
                captured = time.perf_counter()
                first_s = captured - started
                frames += self._capture(extra, len(candidates))
                started = time.perf_counter()
                wall += started - captured
                more, more_logits = visit_scores(
                    self.runner, np.stack([classifier_view(f) for f in frames[len(candidates) :]]),
                    self.variant, return_logits=True,
                )  # fmt: skip
                scores = np.concatenate([scores, more])
                logits = np.concatenate([logits, more_logits])
                order = np.argsort(candidates + extra, kind="stable")  # ascending grid index
                candidates = [(candidates + extra)[i] for i in order]
                frames, scores, logits = [frames[i] for i in order], scores[order], logits[order]
        capture_s = float(sum(f.latency_s for f in frames))
        readout = [f.latency_s - float(f.settings.shutter_s or 0.0) for f in frames]
        self.readout_s = max(0.0, float(np.median(readout)))
        self.inference_s = first_s + time.perf_counter() - started  # every VisiT batch
        best = best_index(self.ranking(scores, candidates))
        chosen = candidates[best]
        self.commit(chosen)
        pred = int(np.argmax(logits[best]))
        if self.decision == "fuse":
            pred = int(fused_prediction(logits.argmax(1), scores))
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
            decision=self.decision,
            scores=scores,
            image=classifier_view(frames[best]),
            over_budget=self.latency_budget_s is not None
            and sum(self.capture_cost_s(i) for i in candidates) > self.latency_budget_s,
            prior_weight=None if self.setting_prior is None else self.setting_prior.weight,
            prior_form=None if self.setting_prior is None else self.setting_prior.form,
            variant=self.variant,
            dropped_frames=sum(getattr(f, "dropped_frames", 0) for f in frames),
            capture_wall_s=wall,
        )

    def _capture(self, candidates: list[int], done: int) -> list[Any]:
        frames = []
        for n, i in enumerate(candidates):
            try:
                frames.append(self.camera.capture(self.grid[i]))
            except CameraDisconnected as exc:
                keep = self.last_good.describe() if self.last_good else "none yet"
                raise CameraDisconnected(
                    f"camera disconnected during a Lens decision after {done + n} of "
                    f"{done + len(candidates)} planned captures; keeping the last good setting "
                    f"({keep}): {exc}"
                ) from exc
        return frames

    def decide_from_scores(
        self, all_scores: np.ndarray, k: int | None = None, meter_ev: float | None = None
    ) -> tuple[int, list[int]]:
        """Replay a decision on precomputed VisiT ``all_scores`` (N,) over the whole grid: plan
        (and, for "two-stage", refine), pick the best candidate (ties: lower index), commit.
        ``meter_ev``: the camera's metered EV ("metered"). Returns (grid index, candidates)."""
        k = min(k or self.budget_k, len(self.grid))
        ranked = self.ranking(np.asarray(all_scores), list(range(len(self.grid))))  # (N,)
        candidates = self.plan(k, meter_ev)
        if self.strategy == "two-stage" and k < len(self.grid):
            first = candidates[int(np.argmax(ranked[candidates]))]
            candidates = sorted(candidates + self.refine(first, candidates, k - len(candidates)))
        chosen = candidates[int(np.argmax(ranked[candidates]))]
        self.commit(chosen)
        return chosen, candidates
