"""RandLoRA for any ``nn.Linear``: frozen shared random bases, trained diagonal scalings.

For a weight W of shape (out, in) let m = min(out, in), M = max(out, in), r the basis rank and
N = ceil(m / r). N frozen random pairs A_i (r, m), B_i (M, r) are drawn from a seed and shared
by every adapted layer with the same (M, m); each layer trains Lambda (N, r) and Gamma (N, m):

    dW' = (alpha / r) * sum_i B_i diag(Lambda_i) A_i diag(Gamma_i)        (M, m)

and dW = dW' when out >= in, else dW'^T. Lambda starts at 0, so the update starts at exactly
zero; Gamma starts at 1 / M. The ranks of the N terms add up to N * r >= m, so the update can be
full rank, while a layer trains only N * (r + m) numbers. ``merge_adapters`` folds dW into W:
the exported model is a plain network with no extra cost.

Bases are non-persistent buffers (never in a state dict); each adapted layer stores only the
seed (``basis_seed``), and loading a state dict saved under another seed is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from edgekit.errors import InputError

BASIS_KINDS = ("dense", "sparse")
LayerFilter = Callable[[str, nn.Linear], bool]


class RandomBases(nn.Module):
    """N frozen random pairs for weights of shape (M, m) (or its transpose), from one seed.

    ``a`` is (N * r, m): the A_i stacked by rows; ``b`` is (M, N * r): the B_i side by side.
    Entries have unit variance: "dense" draws uniform values, "sparse" draws ternary values
    {-1, 0, +1} * sqrt(s) with P(0) = 1 - 1/s (s = ``sparsity``), as in sparse random projections.
    """

    def __init__(
        self,
        big: int,
        small: int,
        rank: int,
        seed: int = 0,
        kind: str = "dense",
        sparsity: float = 3.0,
    ) -> None:
        super().__init__()
        if rank < 1 or small < 1 or big < small:
            raise InputError(
                f"random bases need rank >= 1 and big >= small >= 1, got rank={rank}, "
                f"big={big}, small={small}"
            )
        if kind not in BASIS_KINDS:
            raise InputError(f"basis kind must be one of {BASIS_KINDS}, got {kind!r}")
        if kind == "sparse" and sparsity <= 1.0:
            raise InputError(f"sparse bases need sparsity s > 1 (P(0) = 1 - 1/s), got {sparsity}")
        self.big, self.small, self.rank, self.seed = big, small, rank, seed
        self.kind, self.sparsity = kind, float(sparsity)
        self.count = math.ceil(small / rank)  # N
        generator = torch.Generator().manual_seed(seed)
        width = self.count * rank
        a = self._draw((width, small), generator)  # (N r, m)
        b = self._draw((big, width), generator)  # (M, N r)
        self.register_buffer("a", a, persistent=False)
        self.register_buffer("b", b, persistent=False)

    def _draw(self, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
        if self.kind == "dense":
            return (torch.rand(shape, generator=generator) * 2 - 1) * math.sqrt(3.0)
        u = torch.rand(shape, generator=generator)
        half = 0.5 / self.sparsity
        signs = (u < half).float() - (u > 1 - half).float()  # +1, -1 with P = 1/(2s) each
        return signs * math.sqrt(self.sparsity)

    def extra_repr(self) -> str:
        return (
            f"M={self.big}, m={self.small}, r={self.rank}, N={self.count}, kind={self.kind}, "
            f"seed={self.seed}"
        )


class Mergeable(Protocol):
    """An adapter around a linear layer that can fold its update into a plain ``nn.Linear``."""

    def merged(self) -> nn.Linear: ...


class RandLoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a RandLoRA update; forward(x (..., in)) -> (..., out).

    Trainable: ``lam`` (N, r), zero at start, and ``gamma`` (N, m), 1/M at start.
    """

    def __init__(self, base: nn.Linear, bases: RandomBases, alpha: float) -> None:
        super().__init__()
        out_f, in_f = base.out_features, base.in_features
        if (bases.big, bases.small) != (max(out_f, in_f), min(out_f, in_f)):
            raise InputError(
                f"bases for (M={bases.big}, m={bases.small}) do not fit a Linear({in_f}, {out_f})"
            )
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.bases = bases
        self.transposed = out_f < in_f
        self.scale = float(alpha) / bases.rank
        self.lam = nn.Parameter(torch.zeros(bases.count, bases.rank))  # (N, r)
        self.gamma = nn.Parameter(torch.full((bases.count, bases.small), 1.0 / bases.big))
        self.register_buffer("basis_seed", torch.tensor(bases.seed, dtype=torch.int64))

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def trainable_count(self) -> int:
        """N * (r + m): the numbers this layer trains."""
        return self.bases.count * (self.bases.rank + self.bases.small)

    def delta_weight(self) -> torch.Tensor:
        """The update dW, shaped like the base weight (out, in)."""
        r = self.bases.rank
        gamma_rows = self.gamma.repeat_interleave(r, dim=0)  # (N r, m): row j uses Gamma_{j // r}
        a = self.bases.a * gamma_rows  # (N r, m) = stacked A_i diag(Gamma_i)
        b = self.bases.b * self.lam.reshape(1, -1)  # (M, N r) = [B_i diag(Lambda_i)]
        delta = (b @ a) * self.scale  # (M, m)
        return delta.T if self.transposed else delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.base.weight + self.delta_weight()  # (out, in)
        return nn.functional.linear(x, weight, self.base.bias)

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with weight W + dW and the base bias (a copy)."""
        return linear_with_weight(self.base, self.base.weight + self.delta_weight())

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        key = prefix + "basis_seed"
        if key in state_dict and int(state_dict[key]) != self.bases.seed:
            raise InputError(
                f"{key}: the state dict was trained on random bases of seed "
                f"{int(state_dict[key])}, but this layer's bases use seed {self.bases.seed}; "
                f"apply RandLoRA with seed={int(state_dict[key])} before loading"
            )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, scale={self.scale:g}"


def linear_with_weight(base: nn.Linear, weight: torch.Tensor) -> nn.Linear:
    """A new ``nn.Linear`` shaped like ``base`` with ``weight`` (out, in) and a copy of its bias."""
    layer = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None)
    layer = layer.to(device=base.weight.device, dtype=base.weight.dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if base.bias is not None:
            layer.bias.copy_(base.bias)
    return layer


def replace_module(model: nn.Module, name: str, module: nn.Module) -> None:
    """Put ``module`` at the dotted ``name`` inside ``model``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def linear_targets(model: nn.Module, include: LayerFilter | None) -> list[tuple[str, nn.Linear]]:
    """(name, layer) of every plain ``nn.Linear`` that ``include`` keeps; none found is an error."""
    found = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and (include is None or include(name, module))
    ]
    if not found:
        raise InputError("no nn.Linear layer of the model matches; nothing to adapt")
    return found


def freeze(model: nn.Module) -> None:
    """Set requires_grad False on every parameter of ``model``."""
    for p in model.parameters():
        p.requires_grad_(False)


def apply_randlora(
    model: nn.Module,
    rank: int = 8,
    alpha: float | None = None,
    *,
    kind: str = "dense",
    sparsity: float = 3.0,
    seed: int = 0,
    include: LayerFilter | None = None,
) -> dict[str, RandLoRALinear]:
    """Freeze ``model`` and wrap its ``nn.Linear`` layers (those ``include(name, layer)`` keeps)
    in ``RandLoRALinear``, in place. Layers of one shape share one ``RandomBases``.

    ``alpha`` defaults to ``rank`` (update scale alpha / r = 1). Returns name -> wrapped layer.
    """
    if rank < 1:
        raise InputError(f"RandLoRA rank must be >= 1, got {rank}")
    alpha = float(rank if alpha is None else alpha)
    freeze(model)
    banks: dict[tuple[int, int], RandomBases] = {}
    wrapped: dict[str, RandLoRALinear] = {}
    for name, layer in linear_targets(model, include):
        key = (
            max(layer.out_features, layer.in_features),
            min(layer.out_features, layer.in_features),
        )
        if key not in banks:
            banks[key] = RandomBases(*key, rank=rank, seed=seed, kind=kind, sparsity=sparsity)
            banks[key] = banks[key].to(device=layer.weight.device, dtype=layer.weight.dtype)
        wrapped[name] = RandLoRALinear(layer, banks[key], alpha)
        replace_module(model, name, wrapped[name])
    return wrapped


def merge_adapters(model: nn.Module) -> nn.Module:
    """Replace every adapter (anything with ``merged()``: RandLoRA, LoRA) by its merged
    ``nn.Linear``, in place; returns ``model``. The result holds no adapter parameters."""
    names = [name for name, m in model.named_modules() if name and hasattr(m, "merged")]
    for name in sorted(names, key=len):
        try:
            module: Mergeable = model.get_submodule(name)  # type: ignore[assignment]
        except AttributeError:  # inside an adapter already merged away
            continue
        replace_module(model, name, module.merged())
    return model


def trainable_parameters(model: nn.Module) -> int:
    """Number of parameter entries with requires_grad (shared tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total
