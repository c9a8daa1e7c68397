"""Bundles built on demand and cached: ``cached_bundles((("photo-cnn", "onnx-int8"),))``.

Each (model, target) is exported and verified once (toolkit/build/pipeline.py) into the edgekit cache,
keyed by the trained weights' id (and a SAM 2 card's stream options), and reused after that.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any


def target_name(model: str, target: str, recipe: str | None = None) -> str:
    """Report name of a cached bundle: "photo-cnn onnx-int8", "photo-cnn:sensor-aware onnx-int8"."""
    return f"{model} {target}" if recipe is None else f"{model}:{recipe} {target}"


def parse_model_spec(spec: str) -> tuple[str, ...]:
    """A model name with an optional recipe, "photo-cnn" or "photo-cnn:sensor-aware", as the
    start of a cached_bundles target: ("photo-cnn",) or ("photo-cnn", "sensor-aware")."""
    from edgekit.errors import InputError

    name, sep, recipe = spec.partition(":")
    if sep and (not name or not recipe or ":" in recipe):
        raise InputError(
            f"model '{spec}': expected NAME or NAME:RECIPE, e.g. photo-cnn:sensor-aware"
        )
    return (name, recipe) if sep else (name,)


def cached_bundles(
    targets: tuple[tuple[str, ...], ...],
    root: Path | None = None,
    notes: list[str] | None = None,
    verify_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Bundles {target_name: Bundle} built with build_bundle into ``root`` (default: the edgekit
    cache), reused when already there. A target is (model, target) or (model, target, recipe):
    the card's ``recipe`` option (e.g. "sensor-aware"). Models not registered are skipped
    (noted); a bundle built here is noted with the seconds it took. ``verify_options``: card
    options a build verifies with (e.g. fewer evaluation clips; they are recorded in the
    bundle's manifest); ``progress``: show the build's progress bar."""
    from edgekit.build.pipeline import build_bundle
    from edgekit.bundle.format import Bundle
    from edgekit.cache import cache_dir
    from edgekit.errors import BundleError
    from edgekit.exporters import ExportOptions, Target
    from edgekit.registry import get_card, names

    root = root or cache_dir("bundles")
    bundles = {}
    for model, target, *rest in targets:
        recipe = rest[0] if rest else None
        if model not in names():
            if notes is not None:
                notes.append(f"{model} is not registered here; run without it")
            continue
        card = get_card(model, **({"recipe": recipe} if recipe else {}))
        # key the cached bundle by the trained weights (their cache file names carry a hash of
        # the training recipe), so retrained weights never reuse a stale bundle
        weights = getattr(card.train(), "path", None)
        key = Path(weights).stem if weights else "pretrained"
        options = getattr(card, "stream_options", None)
        if options and getattr(card, "tracker", "sam2") != "sam2":
            options = {**options, "tracker": card.tracker}
        if options:  # and by the stream options a SAM 2 card records in its bundles
            key += (
                "-" + hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
            )
        dest = root / f"{model}-{target}" / key
        try:
            bundles[target_name(model, target, recipe)] = Bundle.load(dest)
        except BundleError:
            started = time.perf_counter()
            if verify_options:
                card = get_card(model, **({"recipe": recipe} if recipe else {}), **verify_options)
            bundles[target_name(model, target, recipe)], _ = build_bundle(
                card, Target.parse(target), dest, ExportOptions(), progress=progress
            )
            if notes is not None:
                seconds = time.perf_counter() - started
                notes.append(f"built {model} {target} in {seconds:.0f} s (first use) into {dest}")
    return bundles
