"""Hugging Face models in local folders: checking a folder, naming it in cache keys, loading it.

A card option that names a model folder (e.g. sdlg's ``lm=FOLDER`` / ``nli=FOLDER``) goes
through ``model_folder`` (one InputError naming the option, what is expected and what is
missing), ``folder_fingerprint`` (its cache-key part) and the loaders, which read with
``local_files_only`` and ``HF_HUB_OFFLINE`` set: nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from edgekit.errors import InputError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CAUSAL_LM = "a Hugging Face causal LM"
SEQUENCE_CLASSIFIER = "a Hugging Face sequence classifier"
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError)


def folder_error(option: str, kind: str, value: object, reason: str) -> InputError:
    """The InputError of a bad model folder: ``option`` (e.g. "sdlg option lm") expected a
    local folder holding ``kind`` and got ``value``, because ``reason``."""
    return InputError(
        f"{option}: expected a local folder holding {kind} (config.json, weights such as "
        f"model.safetensors, a fast tokenizer's tokenizer.json), got {value!r}: {reason}"
    )


def model_folder(value: object, option: str, kind: str = CAUSAL_LM) -> Path:
    """The resolved folder ``value`` names, checked: a folder with a config.json that
    transformers reads and a weight file (``WEIGHT_SUFFIXES``); InputError otherwise."""
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise folder_error(option, kind, value, "not a path")
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise folder_error(option, kind, value, "no such folder")
    if not (folder / "config.json").is_file():
        raise folder_error(option, kind, value, "no config.json there")
    if not any(p.name.endswith(WEIGHT_SUFFIXES) for p in folder.iterdir()):
        raise folder_error(option, kind, value, f"no weight file ({', '.join(WEIGHT_SUFFIXES)})")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except LOAD_ERRORS as exc:
        raise folder_error(option, kind, value, f"its config.json does not load ({exc})") from exc
    return folder.resolve()


def folder_fingerprint(folder: Path) -> str:
    """16 hex over ``folder``'s resolved path and its files' names, sizes and modification
    times: a rewritten or moved model gets new cache entries, and no weights are hashed."""
    files = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()
    )
    blob = json.dumps({"path": str(folder.resolve()), "files": files})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_fast_tokenizer(folder: Path, option: str, kind: str = CAUSAL_LM) -> Any:
    """The folder's fast tokenizer (transformers ``AutoTokenizer``); InputError when it does
    not load or is a slow one (offsets and the Rust decoder are needed)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except LOAD_ERRORS as exc:
        raise folder_error(
            option, kind, str(folder), f"its tokenizer does not load ({exc})"
        ) from exc
    if not getattr(tokenizer, "is_fast", False):
        raise folder_error(option, kind, str(folder), "its tokenizer is not a fast one")
    return tokenizer


def load_model(folder: Path, option: str, kind: str = CAUSAL_LM) -> Any:
    """The folder's network, float32, eval mode, gradients off: ``AutoModelForCausalLM`` for
    ``CAUSAL_LM``, ``AutoModelForSequenceClassification`` for ``SEQUENCE_CLASSIFIER``."""
    import torch
    import transformers

    auto = {
        CAUSAL_LM: transformers.AutoModelForCausalLM,
        SEQUENCE_CLASSIFIER: transformers.AutoModelForSequenceClassification,
    }[kind]
    try:
        model = auto.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    except LOAD_ERRORS as exc:
        reason = f"it does not load as {kind} ({exc})"
        raise folder_error(option, kind, str(folder), reason) from exc
    model.requires_grad_(False)
    return model.eval()
