"""Bundles built on demand and cached: ``cached_bundles((("photo-cnn", "onnx-int8"),))``.

Each (model, target) is exported and verified once (toolkit/build.py) into the edgekit cache,
keyed by the trained weights' id, and reused after that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cached_bundles(
    targets: tuple[tuple[str, str], ...], root: Path | None = None, notes: list[str] | None = None
) -> dict[str, Any]:
    """Bundles {"<model> <target>": Bundle} built with build_bundle into ``root`` (default: the
    edgekit cache), reused when already there. Models not registered are skipped (noted)."""
    from edgekit.build import build_bundle
    from edgekit.bundle import Bundle
    from edgekit.cache import cache_dir
    from edgekit.errors import BundleError
    from edgekit.exporters import ExportOptions, Target
    from edgekit.registry import get_card, names

    root = root or cache_dir("bundles")
    bundles = {}
    for model, target in targets:
        if model not in names():
            if notes is not None:
                notes.append(f"{model} is not registered here; run without it")
            continue
        card = get_card(model)
        # key the cached bundle by the trained weights (their cache file names carry a hash of
        # the training recipe), so retrained weights never reuse a stale bundle
        weights = getattr(card.train(), "path", None)
        dest = root / f"{model}-{target}" / (Path(weights).stem if weights else "pretrained")
        try:
            bundles[f"{model} {target}"] = Bundle.load(dest)
        except BundleError:
            bundles[f"{model} {target}"], _ = build_bundle(
                card, Target.parse(target), dest, ExportOptions(), progress=False
            )
    return bundles
