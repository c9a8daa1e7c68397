"""Model registry: an explicit name -> "module:Class" table, imported on first use.

Built-in cards are listed in ``BUILTIN_CARDS``; third-party code registers with ``@register``.
Nothing heavy is imported until a card is asked for, so ``edgekit models`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from edgekit.card import ModelCard
from edgekit.errors import InputError

BUILTIN_CARDS: dict[str, str] = {
    "agents-room": "edgekit.models.agents_room.card:AgentsRoomCard",
    "bingoguard": "edgekit.models.bingoguard.card:BingoGuardCard",
    "certified-unlearning": "edgekit.models.certified_unlearning.card:CertifiedUnlearningCard",
    "con-j": "edgekit.models.con_j.card:ConJCard",
    "d3u": "edgekit.models.d3u.card:D3UCard",
    "hissd": "edgekit.models.hissd.card:HiSSDCard",
    "llmcert-b": "edgekit.models.llmcert_b.card:LLMCertBCard",
    "minilm": "edgekit.models.minilm.card:MiniLMCard",
    "mm15": "edgekit.models.mm15.card:MM15Card",
    "mmie-score": "edgekit.models.mmie.card:MMIEScoreCard",
    "mtid": "edgekit.models.mtid.card:MTIDCard",
    "omniedit": "edgekit.models.omniedit.card:OmniEditCard",
    "photo-cnn": "edgekit.models.photo_cnn.card:PhotoCNNCard",
    "photo-vit": "edgekit.models.photo_vit.card:PhotoViTCard",
    "poison-audit": "edgekit.models.poison_audit.card:PoisonAuditCard",
    "randlora": "edgekit.models.randlora.card:RandLoRACard",
    "sae-polysemy": "edgekit.models.sae_polysemy.card:SAEPolysemyCard",
    "sam2": "edgekit.models.sam2.card:SAM21Card",
    "sam2-edge": "edgekit.models.sam2_edge.card:SAM2EdgeCard",
    "sdlg": "edgekit.models.sdlg.card:SDLGCard",
    "spectral-reg": "edgekit.models.spectral_reg.card:SpectralRegCard",
    "wlks": "edgekit.models.wlks.card:WLKSCard",
}

_REGISTERED: dict[str, type[ModelCard]] = {}


def register(cls: type[ModelCard]) -> type[ModelCard]:
    """Class decorator: make a card available by its ``name``."""
    if not cls.name:
        raise InputError(f"{cls.__qualname__} must set a non-empty class attribute 'name'")
    _REGISTERED[cls.name] = cls
    return cls


def names() -> list[str]:
    """All registered model names (built-in and decorated), sorted."""
    return sorted(set(BUILTIN_CARDS) | set(_REGISTERED))


def card_class(name: str) -> type[ModelCard]:
    """The card class for ``name``; imports its module on first use."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN_CARDS:
        raise InputError(f"unknown model '{name}'; known models: {', '.join(names())}")
    module_name, _, attr = BUILTIN_CARDS[name].partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    _REGISTERED.setdefault(name, cls)
    return cls


def get_card(name: str, **options: Any) -> ModelCard:
    """Instantiate the card registered as ``name``."""
    return card_class(name)(**options)
