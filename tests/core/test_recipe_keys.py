"""Weight caches are keyed by declared recipe versions, never by the bytes of source files.

Editing a comment, reformatting or refactoring a model must not retrain it nor orphan the weights
a package ships; only a bumped ``RECIPE_VERSION`` (or a changed config) may change a key.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgekit.cache import find_weights, recipe_key

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class _Config:
    steps: int = 10
    lr: float = 1e-3


def test_recipe_key_is_stable_and_covers_name_version_and_config() -> None:
    key = recipe_key("photo-cnn", 1, _Config())
    assert key == recipe_key("photo-cnn", 1, _Config()) and len(key) == 16
    assert key == recipe_key("photo-cnn", 1, {"lr": 1e-3, "steps": 10})  # dataclass == its dict
    others = {
        recipe_key("photo-vit", 1, _Config()),
        recipe_key("photo-cnn", 2, _Config()),
        recipe_key("photo-cnn", 1, _Config(steps=11)),
        recipe_key("photo-cnn", 1, None),
    }
    assert key not in others and len(others) == 4


@dataclass(frozen=True)
class _Grown(_Config):  # _Config with a field added after its version was released
    mix: str = ""
    init: _Config | None = None


def test_an_optional_field_at_its_default_leaves_the_key_as_it_was() -> None:
    optional = {"mix": ""}
    first = {"lr": 1e-3, "steps": 10, "init": None}
    old = recipe_key("photo-cnn", 1, {"lr": 1e-3, "steps": 10, "init": first})
    assert recipe_key("photo-cnn", 1, _Grown(init=_Grown()), optional=optional) == old
    assert recipe_key("photo-cnn", 1, _Grown(init=_Grown())) != old  # without it: a new key
    assert recipe_key("photo-cnn", 1, _Grown(mix="a", init=_Grown()), optional=optional) != old
    nested = recipe_key("photo-cnn", 1, _Grown(init=_Grown(mix="a")), optional=optional)
    assert nested != old  # set in an earlier stage: changes the key too


@pytest.mark.parametrize("version", [0, -1, True, "1", 1.0])
def test_recipe_key_refuses_a_version_that_is_not_a_positive_int(version: object) -> None:
    with pytest.raises(ValueError, match="recipe version"):
        recipe_key("x", version, {})  # type: ignore[arg-type]


def test_find_weights_prefers_the_shipped_copy(tmp_path: Path) -> None:
    cached = tmp_path / "cache" / "net-0123.pt"
    shipped = tmp_path / "weights"
    assert find_weights(cached, shipped) == [cached]  # nothing shipped
    assert find_weights(cached, None) == [cached]
    shipped.mkdir()
    (shipped / "net-0123.pt").write_bytes(b"w")
    (shipped / "net-9999.pt").write_bytes(b"other recipe")
    assert find_weights(cached, shipped) == [shipped / "net-0123.pt", cached]


def _reads_bytes(node: ast.AST) -> list[int]:
    return [
        inner.lineno
        for inner in ast.walk(node)
        if isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Attribute)
        and inner.func.attr in ("read_bytes", "read_text")
    ]


def _hashes(node: ast.AST) -> bool:
    return any(
        isinstance(inner, ast.Attribute) and inner.attr in ("sha256", "sha1", "md5", "blake2b")
        for inner in ast.walk(node)
    )


def _source_hashing_sites(path: Path) -> list[str]:
    """``file:line (function)`` of every function that names a key, or hashes, and reads file
    bytes: how a cache key over source files is built."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
            "key" in node.name or _hashes(node)
        ):
            where = path.relative_to(ROOT)
            sites += [f"{where}:{line} ({node.name})" for line in _reads_bytes(node)]
    return sites


def test_no_cache_key_hashes_source_files() -> None:
    # models/ only: toolkit's module cards hash a user's checkpoint file, which is data, not code
    sites = [
        site
        for path in sorted((ROOT / "models").rglob("*.py"))
        for site in _source_hashing_sites(path)
    ]
    assert not sites, f"cache keys must use recipe_key(name, RECIPE_VERSION, config): {sites}"


def _shipped_recipes() -> dict[str, list[Path]]:
    """Package weights folder -> the cache paths of the recipes it must hold (default ones)."""
    from edgekit.models.bingoguard import train as bingoguard
    from edgekit.models.photo_cnn import train as photo_cnn
    from edgekit.models.photo_vit import recipe as photo_vit
    from edgekit.models.sam2_edge.card import (
        BLEND_RECIPE,
        DEFAULT_RECIPE,
        OCCLUDER_RECIPE,
        SYNTHETIC_RECIPE,
    )
    from edgekit.models.sam2_edge.train import weights_path as sam2_edge_path

    return {
        "photo_cnn": [photo_cnn.weights_path(photo_cnn.TrainConfig())],
        "photo_vit": [photo_vit.weights_path(photo_vit.ViTTrainConfig())],
        "bingoguard": [  # the default (query+response) and the response-only option
            bingoguard.weights_path(bingoguard.TrainConfig()),
            bingoguard.weights_path(bingoguard.TrainConfig(input="response")),
        ],
        "sam2_edge": [  # the default, the blend it continues, the blend's start, the synthetic
            sam2_edge_path(DEFAULT_RECIPE),
            sam2_edge_path(BLEND_RECIPE),
            sam2_edge_path(OCCLUDER_RECIPE),
            sam2_edge_path(SYNTHETIC_RECIPE),
        ],
    }


def test_shipped_weights_are_exactly_the_current_default_recipes() -> None:
    """A bumped RECIPE_VERSION or a changed default config orphans a shipped file: this fails
    then (retrain with ``edgekit train MODEL`` and ship the new file) instead of every fresh
    machine silently retraining during its first run."""
    expected = _shipped_recipes()
    folders = {p.parent.parent.name for p in (ROOT / "models").glob("*/weights/*.pt")}
    assert folders == set(expected), "a model ships weights this test does not know about"
    for model, paths in expected.items():
        shipped = {p.name for p in (ROOT / "models" / model / "weights").glob("*.pt")}
        assert shipped == {p.name for p in paths}, f"{model}: shipped {shipped}"
