"""Export workarounds as context managers; each says why it exists.

The training module is never edited for export: every patch changes a setting for the
duration of the ``with`` block and restores it afterwards, also when the export fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch


@contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Put ``module`` in eval mode (dropout off, batch-norm running stats) and restore its flags.

    Why: a module handed over straight from training is still in train mode; exporting it would
    bake dropout / batch statistics into the graph. The per-submodule flags are restored so the
    caller's training loop is not disturbed.
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes:
            m.training = training


@contextmanager
def eager_attention(module: torch.nn.Module) -> Iterator[list[str]]:
    """Switch Hugging Face transformers models inside ``module`` to the "eager" attention.

    Why: transformers 5 defaults to ``attn_implementation="sdpa"``. Traced to ONNX, SDPA becomes
    a MatMul/Softmax chain wrapped in IsNaN/Where guards and mask re-expansions that ONNX Runtime's
    transformer optimizer does not recognise (measured on BERT: 0 Attention and 0
    EmbedLayerNormalization fusions instead of 6 and 1, and a slower fp32 graph). The eager
    implementation is numerically the same computation and exports to the plain pattern every
    backend fuses. Transformers reads ``config._attn_implementation`` at every forward (and when
    it builds the attention mask), so setting it on the configs for the export is enough.

    Yields the previous implementation names that were changed (empty for non-transformers
    modules, which pass through untouched).
    """
    changed: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if config is None or id(config) in seen or not hasattr(config, "_attn_implementation"):
            continue
        seen.add(id(config))
        previous = config._attn_implementation
        if previous not in (None, "eager"):
            changed.append((config, previous))
            config._attn_implementation = "eager"
    try:
        yield [str(previous) for _, previous in changed]
    finally:
        for config, previous in reversed(changed):
            config._attn_implementation = previous


@contextmanager
def size_oblivious_shapes() -> Iterator[None]:
    """Keep dynamic axes dynamic when the example has size 1 on them (torch.export, dynamo ONNX).

    Why: torch.export "0/1-specialises" every dimension whose example size is 0 or 1, so a
    batch-1 example input turns the declared dynamic batch axis into the constant 1 (export then
    fails with "marked batch as dynamic but your code specialized it to be a constant (1)").
    ``backed_size_oblivious`` makes the tracer treat such sizes as general symbols.
    """
    import torch.fx.experimental._config as fx_config

    with fx_config.patch(backed_size_oblivious=True):
        yield


@contextmanager
def export_patches(module: torch.nn.Module, *, dynamic: bool = False) -> Iterator[None]:
    """Every patch an export of ``module`` needs, in one block; no gradients are recorded.

    ``dynamic=True`` adds the torch.export shape patch (torch.export and the dynamo ONNX path).
    """
    import torch

    with ExitStack() as stack:
        stack.enter_context(eval_mode(module))
        stack.enter_context(eager_attention(module))
        stack.enter_context(torch.no_grad())
        if dynamic:
            stack.enter_context(size_oblivious_shapes())
        yield
