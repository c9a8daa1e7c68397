"""Tensor specifications and feed validation shared by bundles and runtime sessions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgekit.errors import InputError

Dim = int | str  # an int is a fixed size, a str names a dynamic axis ("batch", "sequence")


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one graph input or output.

    ``shape`` holds ints for fixed sizes and strings for dynamic axes, e.g.
    ``("batch", "sequence")`` for token ids or ``("batch", 3, 64, 64)`` for images.
    ``dtype`` is a numpy dtype name ("float32", "int64", ...).
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        try:
            shape = tuple(d if isinstance(d, str) else int(d) for d in data["shape"])
            return cls(name=str(data["name"]), dtype=str(np.dtype(data["dtype"])), shape=shape)
        except (KeyError, TypeError) as exc:
            raise InputError(f"tensor spec {dict(data)!r} needs name, dtype and shape") from exc

    def matches_shape(self, shape: Sequence[int]) -> bool:
        """True when ``shape`` fits: same rank, fixed dims equal, dynamic dims any size >= 1."""
        if len(shape) != len(self.shape):
            return False
        return all(
            (s >= 1) if isinstance(d, str) else d == s
            for d, s in zip(self.shape, shape, strict=True)
        )

    def describe(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"{self.name}: {self.dtype}[{dims}]"


def check_feeds(specs: Sequence[TensorSpec], feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Validate ``feeds`` against ``specs`` and return them as numpy arrays in spec order.

    Raises InputError naming the input and what was expected when a name is missing or unknown,
    or a dtype or shape does not match. Arrays already of the right dtype are not copied.
    """
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a mapping name -> array, got {type(feeds).__name__}")
    expected = {s.name for s in specs}
    unknown = [k for k in feeds if k not in expected]
    if unknown:
        raise InputError(
            f"unknown input(s) {unknown}; this graph takes {[s.describe() for s in specs]}"
        )
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.name not in feeds:
            raise InputError(f"missing input '{spec.name}' (expected {spec.describe()})")
        value = feeds[spec.name]
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.name != spec.dtype:
            raise InputError(
                f"input '{spec.name}' has dtype {arr.dtype.name}, expected {spec.describe()}"
            )
        if not spec.matches_shape(arr.shape):
            got = "x".join(str(s) for s in arr.shape) or "scalar"
            raise InputError(f"input '{spec.name}' has shape {got}, expected {spec.describe()}")
        out[spec.name] = arr
    return out
