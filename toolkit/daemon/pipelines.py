"""Frame pipelines the daemon runs: each turns the latest camera frame into a JSON result.

A pipeline names the deployed bundles it uses; when a deploy or rollback swaps one of them
(``BundleStore.generation`` changes) the pipeline rebuilds its sessions before the next frame,
so a swap never interrupts the stream. Specs on the command line: ``lens``, ``lens:photo-vit``,
``classify:photo-cnn`` (``kind[:bundle]``).

Each kind also states what it needs from a bundle (``fits``: task, graphs, input and output
names, dtypes, ranks, channels, labels), read from the manifest alone, so a deploy can refuse a
bundle that would not run in a pipeline before it replaces the one that does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.bundle.format import Bundle
from edgekit.daemon.store import BundleStore
from edgekit.devices.camera import Camera, CaptureSettings, Frame
from edgekit.errors import BundleError, InputError

IMAGE_CLASSIFICATION = "image-classification"


class BundleMisfitError(BundleError):
    """A bundle does not fit a pipeline that would run it (wrong task, graphs, I/O or labels)."""

    def __init__(self, message: str, problems: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.problems = problems  # pipeline name -> what does not fit


class FrameError(InputError):
    """A camera frame no pipeline can use (shape, dtype): the camera's fault, not the bundle's."""


@dataclass
class Context:
    """What a pipeline may touch besides its frame: the shared camera (for pipelines that
    control the sensor), a setter for the stream's sensor settings, and a stage timer."""

    camera: Camera
    set_stream_settings: Callable[[CaptureSettings], None]
    stage: Callable[[str, float], None] = lambda stage, seconds: None


@dataclass
class Pipeline:
    """Base: ``kind``, instance ``name``, the ``bundle`` it runs (a deployed name)."""

    kind: str
    bundle: str
    name: str = ""
    store: BundleStore | None = None
    profile: Any = None  # DeviceProfile: picks the runtime each graph loads on
    runtime: str | None = None  # the runtime the current session runs on
    version: str | None = None  # the deployed version of ``bundle`` the sessions run
    _generation: int = field(default=-1, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or self.kind

    def ensure_loaded(self, store: BundleStore) -> bool:
        """(Re)build sessions when the store changed since the last load; True if it did.

        ``version`` names the deployed version being loaded from the moment the load starts,
        so a load that raises is attributed to the version that raised."""
        generation = store.generation  # read first: a swap during the load reloads again
        if generation == self._generation:
            return False
        self.store = store
        path = store.current_path(self.bundle)
        self.version = path.name if path is not None else None
        self.load(store)
        self._generation = generation
        return True

    def load(self, store: BundleStore) -> None:
        raise NotImplementedError

    def fits(self, bundle: Bundle) -> list[str]:
        """What keeps ``bundle`` from running in this pipeline, from its manifest (empty: it
        fits). Each kind states its own needs."""
        raise NotImplementedError

    def check_fits(self, bundle: Bundle) -> None:
        """BundleMisfitError listing the problems unless ``bundle`` fits this pipeline."""
        problems = self.fits(bundle)
        if problems:
            raise BundleMisfitError(
                f"bundle '{bundle.model}' does not fit pipeline '{self.name}' ({self.kind}): "
                + "; ".join(problems),
                {self.name: problems},
            )

    def render_extras(self) -> dict[str, Any]:
        """What the rendered frame needs besides the JSON result (e.g. "_masks")."""
        return {}

    def open_session(self, bundle: Any, graph: str | None = None) -> Any:
        """A session for ``graph`` of ``bundle`` on the runtime the device profile picks."""
        session, self.runtime = profile_session(bundle, self.profile, graph)
        return session

    def process(self, frame: Frame, ctx: Context) -> dict[str, Any]:
        raise NotImplementedError


def profile_session(bundle: Any, profile: Any, graph: str | None = None) -> tuple[Any, str]:
    """(session, runtime name) for ``graph`` of ``bundle``: the profile's first runtime that
    reads the graph's format here, else the bundle's default runtime."""
    from edgekit.devices.profiles import pick_runtime

    entry = bundle.graph(graph)
    runtime, device = pick_runtime(entry.format, profile) if profile else (None, None)
    runtime = runtime or bundle.default_runtime(entry.name)
    return bundle.session(entry.name, runtime=runtime, device=device), runtime


def check_frame(image: Any) -> np.ndarray:
    """``image`` as an (H, W, 3) uint8 RGB array, or FrameError saying what arrived."""
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise FrameError(
            f"frame must be (H, W, 3) uint8 RGB, got shape {arr.shape} dtype {arr.dtype}"
        )
    return arr


def classifier_problems(bundle: Bundle, batch: int | None) -> list[str]:
    """What keeps ``bundle`` from being the image classifier of a camera pipeline.

    It needs task "image-classification"; a first graph with one float32 image input
    (B, 3, H, W) that takes ``batch`` frames at once (None: any number, so the batch axis must
    be dynamic); logits (B, C) float (the output "logits", else the first); C == len(labels)
    when the manifest has labels; RGB NCHW when its preprocessing says."""
    manifest = bundle.manifest
    problems = []
    task = manifest.get("task")
    if task != IMAGE_CLASSIFICATION:
        problems.append(f"task is {task!r}, not {IMAGE_CLASSIFICATION!r}")
    entry = bundle.graph()
    if len(entry.inputs) != 1:
        names = [s.name for s in entry.inputs]
        problems.append(f"graph '{entry.name}' takes {names}; it needs one image (B, 3, H, W)")
    else:
        image = entry.inputs[0]
        if image.dtype != "float32" or len(image.shape) != 4:
            problems.append(f"input {image.describe()} is not a float32 image (B, 3, H, W)")
        else:
            first, channels = image.shape[0], image.shape[1]
            if isinstance(channels, int) and channels != 3:
                problems.append(f"input {image.describe()} has {channels} channels, not 3 (RGB)")
            if isinstance(first, int) and (batch is None or first != batch):
                wanted = "a dynamic batch axis" if batch is None else f"batch {batch}"
                problems.append(f"input {image.describe()} has fixed batch {first}; needs {wanted}")
    if not entry.outputs:
        problems.append(f"graph '{entry.name}' has no outputs")
        return problems
    names = [s.name for s in entry.outputs]
    logits = entry.outputs[names.index("logits")] if "logits" in names else entry.outputs[0]
    if not np.issubdtype(np.dtype(logits.dtype), np.floating) or len(logits.shape) != 2:
        problems.append(f"output {logits.describe()} is not float logits (B, C)")
    labels = manifest.get("labels") or []  # a list of strings: the manifest policy checks it
    if labels and len(logits.shape) == 2:
        width = logits.shape[1]
        if isinstance(width, int) and width != len(labels):
            problems.append(
                f"output {logits.describe()} has {width} classes but {len(labels)} labels"
            )
    pre = manifest.get("preprocessing") or {}
    for key, want in (("layout", "NCHW"), ("color", "RGB")):
        if pre.get(key) not in (None, want):
            problems.append(f"preprocessing {key} is {pre[key]!r}; this pipeline feeds {want}")
    return problems


class ClassifyPipeline(Pipeline):
    """Classify every frame with a deployed classifier: label, probability, VisiT score."""

    def fits(self, bundle: Bundle) -> list[str]:
        """An image classifier (``classifier_problems``) that takes one frame at a time."""
        return classifier_problems(bundle, batch=1)

    def load(self, store: BundleStore) -> None:
        bundle = store.get(self.bundle)
        self.session = self.open_session(bundle)
        self.labels = list(bundle.manifest.get("labels") or [])

    def process(self, frame: Frame, ctx: Context) -> dict[str, Any]:
        from edgekit.lens.visit import classify, softmax, visit_from_logits

        image = check_frame(frame.image)
        start = time.perf_counter()
        logits = classify(self.session, image[None])  # (1, C)
        ctx.stage("infer", time.perf_counter() - start)
        probs = softmax(logits)[0]
        pred = int(np.argmax(probs))
        return {
            "pred": pred,
            "label": self.labels[pred] if pred < len(self.labels) else str(pred),
            "prob": round(float(probs[pred]), 6),
            "visit": round(float(visit_from_logits(logits)[0]), 6),
            "settings": frame.settings.describe(),
        }


class LensPipeline(Pipeline):
    """Lens on the live camera: each decision captures up to K candidate settings, keeps the
    best by VisiT and applies it to the stream, so every other pipeline sees frames taken
    with the setting the model itself prefers (the closed loop)."""

    budget_k: int = 6
    prior: Any = None  # a lens.prior.SettingPrior over the camera's grid (daemon --lens-prior)

    def fits(self, bundle: Bundle) -> list[str]:
        """An image classifier (``classifier_problems``) that scores a decision's candidate
        captures in one batch, so its batch axis must be dynamic."""
        return classifier_problems(bundle, batch=None)

    def load(self, store: BundleStore) -> None:
        bundle = store.get(self.bundle)
        self.session = self.open_session(bundle)
        self.labels = list(bundle.manifest.get("labels") or []) or None
        self.controller = None  # rebuilt on the next frame with the new session

    def process(self, frame: Frame, ctx: Context) -> dict[str, Any]:
        from edgekit.lens.controller import LensController, camera_grid

        check_frame(frame.image)
        if self.controller is None:
            grid = camera_grid(ctx.camera.capabilities())
            self.controller = LensController(
                self.session, ctx.camera, grid, self.budget_k, labels=self.labels,
                prior=self.prior, variant=self.prior.variant if self.prior else "top1",
            )  # fmt: skip
        decision = self.controller.decide()
        ctx.stage("captures", decision.capture_latency_s)
        ctx.stage("infer", decision.inference_s)
        ctx.set_stream_settings(decision.settings)
        return decision.to_json()


PIPELINE_KINDS: dict[str, tuple[str, str]] = {  # kind: (class "module:name", default bundle)
    "lens": ("edgekit.daemon.pipelines:LensPipeline", "photo-cnn"),
    "classify": ("edgekit.daemon.pipelines:ClassifyPipeline", "photo-cnn"),
    "sam2-stream": ("edgekit.daemon.sam2_pipeline:Sam2StreamPipeline", "sam2-edge"),
}


def parse_pipelines(spec: str | list[str]) -> list[Pipeline]:
    """Pipelines from ``"lens,classify:photo-vit"`` (``kind[:bundle]``, comma separated).

    Unknown kinds are an InputError listing the known ones; names must be unique."""
    items = spec if isinstance(spec, list) else [s for s in spec.split(",")]
    out: list[Pipeline] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        kind, _, bundle = item.partition(":")
        if kind not in PIPELINE_KINDS:
            raise InputError(
                f"unknown pipeline '{kind}'; this daemon runs {', '.join(PIPELINE_KINDS)}"
            )
        import importlib

        path, default_bundle = PIPELINE_KINDS[kind]
        module, _, attr = path.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        pipe = cls(kind=kind, bundle=bundle or default_bundle)
        if any(p.name == pipe.name for p in out):
            pipe.name = f"{kind}-{pipe.bundle}"
        if any(p.name == pipe.name for p in out):
            raise InputError(f"pipeline '{item}' is listed twice")
        out.append(pipe)
    return out
