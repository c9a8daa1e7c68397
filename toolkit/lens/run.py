"""``edgekit run lens``: the Lens controller live on a camera, one JSON line per decision."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _session_and_labels(bundle_or_model: str) -> tuple[Any, list[str] | None]:
    """A classifier session from a bundle directory, or from a registered model name, optionally
    with a recipe ("photo-cnn:sensor-aware"; exported to onnx-fp32 into the edgekit cache on
    first use), plus its labels."""
    from edgekit.bundle.format import Bundle

    if Path(bundle_or_model).is_dir():
        bundle = Bundle.load(bundle_or_model)
    else:
        from edgekit.build.cache import parse_model_spec, target_name
        from edgekit.lens.bench import bench_bundles

        model, *recipe = parse_model_spec(bundle_or_model)
        target = (model, "onnx-fp32", *recipe)
        bundle = bench_bundles((target,))[target_name(*target)]
    labels = bundle.manifest.get("labels")
    return bundle.session(), list(labels) if labels else None


def run_lens(
    camera_spec: str,
    bundle_or_model: str,
    budget_k: int = 6,
    frames: int = 20,
    log: str | os.PathLike[str] = "lens-run.jsonl",
    variant: str = "top1",
    latency_budget_s: float | None = None,
    strip: str | os.PathLike[str] | None = None,
    decision: str = "select",
    prior: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """Run Lens for ``frames`` decisions on ``camera_spec`` (``sim``, ``v4l2:/dev/video0``, ...).

    Each decision (settings, VisiT score, captures, latency, prediction) is appended to ``log``
    as one JSON line; the chosen captures are written side by side to ``strip`` (default: the
    log's path with ``.png``). ``decision``: "select" or "fuse" (lens.DECISIONS); ``prior``: a
    lens.prior.SettingPrior JSON file (from ``edgekit eval lens``) over the same grid. The camera's
    own grid comes from its capabilities (the paper's grid when it offers the paper's ranges).
    Returns the decisions as dicts.
    """
    from edgekit.devices.camera import open_camera
    from edgekit.errors import InputError
    from edgekit.lens.controller import DECISIONS, LensController, camera_grid

    if decision not in DECISIONS:
        raise InputError(f"unknown decision '{decision}'; expected one of {', '.join(DECISIONS)}")
    from edgekit.lens.prior import SettingPrior

    setting_prior = SettingPrior.load(prior) if prior is not None else None  # before any export
    session, labels = _session_and_labels(bundle_or_model)
    camera = open_camera(camera_spec)
    try:
        grid = camera_grid(camera.capabilities())
        controller = LensController(
            session, camera, grid, budget_k, variant, latency_budget_s, labels,
            decision=decision, prior=setting_prior,
        )  # fmt: skip
    except InputError:
        camera.close()
        raise
    log_path = Path(log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    decisions, images = [], []
    with camera, open(log_path, "a", encoding="utf-8") as fh:
        for n in range(frames):
            decision = controller.decide()
            row = {"frame": n, "camera": camera_spec, **decision.to_json()}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            decisions.append(row)
            images.append(decision.image)
    write_strip(images, Path(strip) if strip else log_path.with_suffix(".png"))
    return decisions


def write_strip(images: list[Any], path: Path, max_frames: int = 16) -> Path:
    """Save up to ``max_frames`` captures (H, W, 3) uint8 side by side as a PNG."""
    import numpy as np
    from skimage.io import imsave

    picked = [im for im in images if im is not None][:max_frames]
    if not picked:
        return path
    h = max(im.shape[0] for im in picked)
    padded = [np.pad(im, ((0, h - im.shape[0]), (0, 2), (0, 0))) for im in picked]
    path.parent.mkdir(parents=True, exist_ok=True)
    imsave(path, np.concatenate(padded, axis=1), check_contrast=False)
    return path
