"""Where a card comes from: a registered model name, a user module file, or a bundle's record."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edgekit.card import ModelCard
from edgekit.errors import BundleError


def is_module_spec(text: str) -> bool:
    """True for "path/to/file.py:factory" (a user module), False for a registered model name."""
    path, sep, attr = text.rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(attr)


def card_from_spec(
    text: str, input_shapes: Mapping[str, tuple[int, ...]] | None = None, **options: Any
) -> ModelCard:
    """A card for a registered model name or for ``file.py:factory`` with ``input_shapes``."""
    if is_module_spec(text):
        from edgekit.module_card import ModuleCard

        return ModuleCard.from_spec(text, input_shapes=dict(input_shapes or {}))
    from edgekit.registry import get_card

    return get_card(text, **options)


def card_from_source(source: Mapping[str, Any]) -> ModelCard:
    """Rebuild the card a bundle was exported from, from its manifest's ``source`` record."""
    name = source.get("card")
    if not name:
        raise BundleError(
            "bundle.json records no source model, so there is no reference to verify against"
        )
    if name == "module":
        from edgekit.module_card import ModuleCard

        return ModuleCard.from_source(source)
    from edgekit.registry import get_card

    return get_card(str(name), **dict(source.get("options") or {}))


def weights_record(card: ModelCard) -> dict[str, str]:
    """{"weights": id} for cards trained in-repo: the cached weight file's name, which carries a
    hash of the training recipe; {} for pretrained cards and user modules."""
    from pathlib import Path

    trained = card.train() if card.name != "module" else None
    path = getattr(trained, "path", None)
    return {"weights": Path(path).stem} if path else {}


def check_weights(card: ModelCard, source: Mapping[str, Any]) -> None:
    """BundleError when the bundle was exported from other trained weights than this card has
    (the training recipe changed since), so verify does not blame the artifact for it."""
    recorded = source.get("weights")
    if not recorded:
        return
    current = weights_record(card).get("weights")
    if current != recorded:
        raise BundleError(
            f"the bundle was exported from {card.name} weights '{recorded}' but this machine's "
            f"{card.name} weights are '{current}' (the training recipe changed): re-export the "
            "bundle, or run `edgekit selftest` to check it against its own golden I/O"
        )
