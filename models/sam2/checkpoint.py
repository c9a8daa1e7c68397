"""Load an official SAM 2.1 checkpoint (``sam2.1_hiera_*.pt``) from a local path.

The official files are ``torch.save({"model": state_dict, ...})``; a bare state dict is accepted
too. Loading is strict: missing keys, unexpected keys and shape mismatches raise one InputError
naming them (a checkpoint of another size or of SAM 2.0 fails here, not later).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from edgekit.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

_SHOWN = 12  # names listed per kind of problem before "... and N more"


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict stored in the checkpoint at ``path`` (under "model" when present)."""
    import torch

    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"SAM 2 checkpoint not found: {path} (give the path of a local .pt file)")
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for unreadable / non-torch files
        raise InputError(
            f"cannot read SAM 2 checkpoint {path}: {type(exc).__name__}: {exc}"
        ) from exc
    state = obj.get("model", obj) if isinstance(obj, Mapping) else None
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise InputError(
            f"{path} is not a SAM 2 checkpoint: expected a dict with a 'model' state dict "
            "(name -> tensor), as in Meta's sam2.1_hiera_*.pt files"
        )
    return dict(state)


def check_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor], source: str = "") -> None:
    """Raise InputError naming every missing key, unexpected key and shape mismatch."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mismatched = sorted(
        f"{k} {tuple(state[k].shape)} (expected {tuple(own[k].shape)})"
        for k in set(own) & set(state)
        if tuple(own[k].shape) != tuple(state[k].shape)
    )
    problems = [
        _listing("missing keys", missing),
        _listing("unexpected keys", unexpected),
        _listing("shape mismatches", mismatched),
    ]
    problems = [p for p in problems if p]
    if problems:
        where = f" {source}" if source else ""
        raise InputError(f"SAM 2 checkpoint{where} does not fit the model: " + "; ".join(problems))


def _listing(kind: str, names: list[str]) -> str:
    if not names:
        return ""
    shown = ", ".join(names[:_SHOWN])
    more = f" ... and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return f"{len(names)} {kind}: {shown}{more}"


def load_state_dict_strict(
    model: nn.Module, state: Mapping[str, torch.Tensor], source: str = ""
) -> None:
    """Check ``state`` against ``model`` (see ``check_state_dict``), then load it."""
    check_state_dict(model, state, source)
    model.load_state_dict(dict(state), strict=True)


def load_checkpoint(model: nn.Module, path: str | Path) -> None:
    """Load the official checkpoint at ``path`` into ``model`` strictly."""
    load_state_dict_strict(model, read_state_dict(path), str(path))
