"""A trained tiny LM and its training log, cached: ``NAME.pt`` (the state dict) beside
``NAME.json`` (the log and the config), looked up in the model's shipped ``weights/`` folder
first, then in the edgekit cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from edgekit.cache import atomic_write_bytes
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.weights_cache import load_weights, save_weights


class LMRecipe(Protocol):
    """A dataclass config that names its cache key and builds the untrained network."""

    def key(self) -> str: ...

    def build(self) -> TinyCausalLM: ...


def cached_lm(
    config: LMRecipe,
    folder: Path,
    shipped_dir: Path | None,
    train: Callable[[], tuple[TinyCausalLM, dict[str, Any]]],
) -> tuple[TinyCausalLM, dict[str, Any]]:
    """(model in eval mode, training log) of ``config``: ``lm-KEY.pt`` + ``lm-KEY.json`` from
    ``shipped_dir`` or ``folder``, else ``train()`` and write both (the JSON after the
    weights, so a present JSON means complete weights)."""
    weights = folder / f"lm-{config.key()}.pt"

    def load(state: dict[str, Any], found: Path) -> tuple[TinyCausalLM, dict[str, Any]]:
        log = json.loads(found.with_suffix(".json").read_text())
        model = config.build()
        model.load_state_dict(state)
        return model.eval(), log

    cached = load_weights(weights, shipped_dir, load)
    if cached is not None:
        return cached
    model, log = train()
    save_weights(weights, model.state_dict())
    meta = {**log, "config": asdict(config)}  # type: ignore[call-overload]
    atomic_write_bytes(weights.with_suffix(".json"), json.dumps(meta, indent=1).encode())
    return model, log
