"""ModuleCard: a card for any user ``nn.Module``, named as ``path/to/file.py:factory``.

The file is imported by path, ``factory`` is called (a function or class returning an
``nn.Module``, or already a module instance) and the module becomes one graph, "main", fed with
seeded random inputs of the shapes the user gives. Axis 0 of every input is the dynamic "batch"
axis, and of every output whose first dimension follows the batch. There is no task data, so
verification of a user module is tensor parity on seeded random inputs.

The factory runs under ``torch.manual_seed(0)`` (the caller's RNG state is restored), so a
model whose weights are randomly initialised is the same model when verify rebuilds it later.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard
from edgekit.errors import BundleError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import torch

GRAPH = "main"
FACTORY_SEED = 0
EXAMPLE_SEED, GOLDEN_SEED, CALIBRATION_SEED = 0, 1, 2
_SHAPE_ITEM = re.compile(r"^\s*(?:(?P<name>[A-Za-z_][\w.\-]*)\s*=\s*)?(?P<dims>[0-9xX, ]+)\s*$")
_DTYPES = ("float32", "float16", "float64", "int64", "int32", "bool")


def parse_input_shapes(items: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``["input=1x3x224x224", "mask=1x128"]`` into {"input": (1, 3, 224, 224), ...}.

    Dimensions are positive ints separated by "x" or ","; a single unnamed item ("1x3x32x32")
    is called "input". Raises InputError for anything else (with the offending item).
    """
    items = list(items)
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        match = _SHAPE_ITEM.match(item)
        if not match:
            raise InputError(
                f"malformed input shape {item!r}; expected NAME=DxDx..., e.g. x=1x3x224x224"
            )
        name = match.group("name")
        if name is None:
            if len(items) > 1:
                raise InputError(f"input shape {item!r} needs a name when several are given")
            name = "input"
        parts = re.split(r"[xX,]", match.group("dims").replace(" ", ""))
        if not parts or any(not p.isdigit() or int(p) < 1 for p in parts):
            raise InputError(f"malformed input shape {item!r}: every dimension must be an int >= 1")
        if name in shapes:
            raise InputError(f"input '{name}' is given twice")
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


def _split_spec(spec: str) -> tuple[Path, str]:
    path_text, sep, attr = str(spec).rpartition(":")
    if not sep or not path_text or not attr:
        raise InputError(f"module spec {spec!r} must be 'path/to/file.py:factory'")
    if not attr.isidentifier():
        raise InputError(f"module spec {spec!r}: {attr!r} is not a Python name")
    return Path(path_text).expanduser().resolve(), attr


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _sys_path(folder: Path) -> Iterator[None]:
    """Let the user file import its sibling modules while it is being loaded."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))


def load_factory_module(spec: str) -> torch.nn.Module:
    """Import ``file.py`` by path, resolve ``factory`` and return its nn.Module in eval mode.

    Raises InputError for a missing file, an import error inside it, a missing attribute, a
    factory that fails or one that does not produce an ``nn.Module``.
    """
    import torch

    path, attr = _split_spec(spec)
    if not path.is_file():
        raise InputError(f"module file {path} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", path.stem)
    module_name = f"edgekit_user_{stem}_{digest}"
    import_spec = importlib.util.spec_from_file_location(module_name, path)
    if import_spec is None or import_spec.loader is None:
        raise InputError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(import_spec)
    sys.modules[module_name] = module
    try:
        with _sys_path(path.parent):
            import_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise InputError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise InputError(f"{path} has no attribute '{attr}'; it defines {public}")
    factory = getattr(module, attr)
    if isinstance(factory, torch.nn.Module):
        obj = factory
    elif callable(factory):
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(FACTORY_SEED)
                obj = factory()
        except Exception as exc:
            raise InputError(
                f"calling {path.name}:{attr}() failed: {type(exc).__name__}: {exc}"
            ) from exc
    else:
        raise InputError(
            f"{path.name}:{attr} is a {type(factory).__name__}, not a factory or module"
        )
    if not isinstance(obj, torch.nn.Module):
        raise InputError(
            f"{path.name}:{attr} returned a {type(obj).__name__}; it must return a torch.nn.Module"
        )
    return obj.eval()


def random_feeds(
    shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str], seed: int
) -> dict[str, np.ndarray]:
    """Seeded random inputs: floats uniform in [0, 1), ints in [0, 4), bools 50/50."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        dtype = np.dtype(dtypes.get(name, "float32"))
        if dtype.kind == "f":
            feeds[name] = rng.random(shape, dtype=np.float64).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, 4, size=shape).astype(dtype)
        else:
            feeds[name] = rng.random(shape) < 0.5
    return feeds


def _flatten_outputs(result: Any) -> tuple[list[str] | None, list[torch.Tensor]]:
    import torch

    if isinstance(result, torch.Tensor):
        return None, [result]
    if isinstance(result, Mapping):
        names, values = [str(k) for k in result], list(result.values())
    elif isinstance(result, (tuple, list)):
        names, values = None, list(result)
    else:
        raise InputError(f"the module returned a {type(result).__name__}; expected tensors")
    bad = [type(v).__name__ for v in values if not isinstance(v, torch.Tensor)]
    if bad or not values:
        raise InputError(f"the module must return tensors (a tensor, tuple or dict); got {bad}")
    return names, values


class ModuleCard(ModelCard):
    """A user's nn.Module as a one-graph card ("main"); build with ``from_spec``."""

    name: ClassVar[str] = "module"
    tier: ClassVar[str] = "edge"
    task: ClassVar[str] = "custom"
    summary: ClassVar[str] = "a user nn.Module exported from its Python file"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        spec = options.get("spec")
        shapes = options.get("input_shapes")
        if not spec or not shapes:
            raise InputError(
                "a user module needs 'path/to/file.py:factory' and input shapes "
                "(--input-shape NAME=1x3x224x224)"
            )
        self.spec = str(spec)
        self.input_shapes = {str(k): tuple(int(d) for d in v) for k, v in dict(shapes).items()}
        if any(len(s) == 0 or min(s) < 1 for s in self.input_shapes.values()):
            raise InputError(f"input shapes must have dims >= 1, got {self.input_shapes}")
        self.dtypes = {
            n: str(np.dtype((options.get("dtypes") or {}).get(n, "float32")))
            for n in self.input_shapes
        }
        unknown = [d for d in self.dtypes.values() if d not in _DTYPES]
        if unknown:
            raise InputError(f"unsupported input dtype(s) {unknown}; use one of {_DTYPES}")
        path, attr = _split_spec(self.spec)
        self.path, self.attr = path, attr
        self.name = re.sub(r"[^\w.\-]", "_", path.stem) or "module"  # type: ignore[misc]
        self._graph: GraphSpec | None = None

    @classmethod
    def from_spec(
        cls,
        spec: str,
        input_shapes: Mapping[str, tuple[int, ...]] | None = None,
        dtypes: Mapping[str, str] | None = None,
    ) -> ModuleCard:
        """Card for ``spec`` = "path/to/file.py:factory" with ``input_shapes`` {name: shape}.

        ``dtypes`` maps input names to numpy dtype names (default "float32"). The module is
        imported and probed immediately, so a bad spec fails here with an InputError.
        """
        path, attr = _split_spec(spec)
        card = cls(
            spec=f"{path}:{attr}", input_shapes=dict(input_shapes or {}), dtypes=dict(dtypes or {})
        )
        card.graphs()
        return card

    @classmethod
    def from_source(cls, source: Mapping[str, Any]) -> ModuleCard:
        """Rebuild the card a bundle recorded in ``source()``; the file must be unchanged."""
        try:
            spec = str(source["spec"])
            shapes = {k: tuple(v) for k, v in dict(source["input_shapes"]).items()}
        except (KeyError, TypeError) as exc:
            raise BundleError(
                f"bundle source {dict(source)!r} lacks 'spec'/'input_shapes'"
            ) from exc
        path, _ = _split_spec(spec)
        if not path.is_file():
            raise BundleError(f"the bundle was exported from {path}, which no longer exists here")
        recorded = source.get("sha256")
        if recorded and recorded != _file_sha256(path):
            raise BundleError(f"{path} changed since the bundle was exported (sha256 differs)")
        return cls.from_spec(spec, shapes, dict(source.get("dtypes") or {}))

    def source(self) -> dict[str, Any]:
        return {
            "card": "module",
            "spec": self.spec,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "dtypes": dict(self.dtypes),
            "sha256": _file_sha256(self.path),
        }

    # ---- what to build -------------------------------------------------------------------
    def _tensors(self, seed: int, batch: int | None = None) -> dict[str, torch.Tensor]:
        import torch

        shapes = self.input_shapes
        if batch is not None:
            shapes = {k: (batch, *v[1:]) for k, v in shapes.items()}
        return {k: torch.from_numpy(v) for k, v in random_feeds(shapes, self.dtypes, seed).items()}

    def _probe(self, module: torch.nn.Module) -> GraphSpec:
        import torch

        example = self._tensors(EXAMPLE_SEED)
        try:
            with torch.inference_mode():
                names, outputs = _flatten_outputs(module(*example.values()))
        except InputError:
            raise
        except Exception as exc:
            shapes = {k: tuple(v.shape) for k, v in example.items()}
            raise InputError(
                f"{self.path.name}:{self.attr} failed on inputs {shapes}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if names is None:
            names = (
                ["output"] if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
            )
        return GraphSpec(GRAPH, module, example, list(names), self._batch_axes(module, names))

    def _batch_axes(self, module: torch.nn.Module, names: list[str]) -> dict[str, dict[int, str]]:
        """Axis 0 "batch" for every input and for each output whose dim 0 follows the batch.

        Found by running the module again with one more row; a module that rejects another
        batch size, inputs that disagree on dim 0, or no output following it: fixed shapes.
        """
        import torch

        batch = {shape[0] for shape in self.input_shapes.values()}
        if len(batch) != 1:
            return {}
        other = batch.pop() + 1
        try:
            with torch.inference_mode():
                _, again = _flatten_outputs(module(*self._tensors(EXAMPLE_SEED, other).values()))
        except Exception:
            return {}
        if len(again) != len(names):
            return {}
        followers = [
            name
            for name, out in zip(names, again, strict=True)
            if out.ndim >= 1 and int(out.shape[0]) == other
        ]
        if not followers:  # axis 0 is not a batch axis for this module
            return {}
        return {k: {0: "batch"} for k in [*self.input_shapes, *followers]}

    def graphs(self) -> list[GraphSpec]:
        """One graph "main": the user's module on the given input shapes, batch axis dynamic."""
        if self._graph is None:
            self._graph = self._probe(load_factory_module(self.spec))
        return [self._graph]

    # ---- data ------------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Seeded random inputs of the given shapes (floats in [0, 1), ints in [0, 4))."""
        return {GRAPH: random_feeds(self.input_shapes, self.dtypes, GOLDEN_SEED)}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` seeded random feeds (no real data is known for a user module)."""
        return {
            GRAPH: [
                random_feeds(self.input_shapes, self.dtypes, CALIBRATION_SEED + i)
                for i in range(limit)
            ]
        }

    def preprocessing(self) -> dict[str, Any]:
        return {"note": "user module: inputs are fed as given, no pre/post-processing known"}
