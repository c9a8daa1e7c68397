"""A self-test must compare something: golden sets without inputs or outputs, outputs that do not
cover the graph's, NaN or empty goldens, and tolerances outside sane bounds are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgekit.bundle.format import MANIFEST, Bundle, sha256_file
from edgekit.bundle.policy import TOLERANCE_BOUNDS
from edgekit.bundle.selftest import selftest
from edgekit.errors import BundleError, SelfTestError


def _manifest(path: Path) -> dict:
    return json.loads((path / MANIFEST).read_text())


def _write_manifest(path: Path, data: dict) -> None:
    data["files"] = {rel: sha256_file(path / rel) for rel in data["files"]}
    (path / MANIFEST).write_text(json.dumps(data))


# ---- (e) a self-test compares something, with sane tolerances --------------------------------
def _rewrite_golden(bundle: Path, arrays: dict[str, np.ndarray]) -> None:
    np.savez(bundle / "golden" / "main.npz", **arrays)
    _write_manifest(bundle, _manifest(bundle))


@pytest.mark.parametrize(
    ("keep", "match"),
    [
        ({}, "0 inputs and 0 outputs"),
        ({"input/x"}, "0 outputs"),
        ({"output/y", "reference/y"}, "0 inputs"),
        ({"input/x", "reference/y"}, "0 outputs"),
    ],
)
def test_selftest_refuses_golden_that_compares_nothing(
    tiny_bundle: Path, keep: set, match: str
) -> None:
    inputs, outputs, reference = Bundle.load(tiny_bundle).golden("main")
    every = {"input/x": inputs["x"], "output/y": outputs["y"], "reference/y": reference["y"]}
    _rewrite_golden(tiny_bundle, {k: v for k, v in every.items() if k in keep})
    with pytest.raises(SelfTestError, match=match):
        selftest(str(tiny_bundle))


def test_selftest_refuses_missing_nan_and_empty_golden_outputs(tiny_bundle: Path) -> None:
    inputs, outputs, _ = Bundle.load(tiny_bundle).golden("main")
    _rewrite_golden(tiny_bundle, {"input/x": inputs["x"], "output/z": outputs["y"]})
    with pytest.raises(SelfTestError, match=r"no value for output\(s\) \['y'\]"):
        selftest(str(tiny_bundle))
    _rewrite_golden(tiny_bundle, {"input/x": inputs["x"], "output/y": outputs["y"] * np.nan})
    with pytest.raises(SelfTestError, match="NaN or inf"):
        selftest(str(tiny_bundle))
    _rewrite_golden(tiny_bundle, {"input/x": inputs["x"][:0], "output/y": outputs["y"][:0]})
    with pytest.raises(SelfTestError, match="all empty"):
        selftest(str(tiny_bundle))
    (tiny_bundle / "golden" / "main.npz").write_bytes(b"PK\x03\x04 truncated zip")
    _write_manifest(tiny_bundle, _manifest(tiny_bundle))
    with pytest.raises(BundleError, match="not a readable golden .npz"):
        selftest(str(tiny_bundle))


@pytest.mark.parametrize(
    "tolerance",
    [
        {"atol": 1e9},
        {"atol": "1e9"},
        {"rtol": -0.1},
        {"rtol": 2.0},
        {"atol": True},
        {"atol": None},
        {"max_abs": 1.0},
        {"atol": 1e-4, "rtol": 1e-3, "budget": 0.5},
    ],
)
def test_absurd_tolerances_are_refused(tiny_bundle: Path, tolerance: dict) -> None:
    m = _manifest(tiny_bundle)
    m["graphs"]["main"]["tolerance"] = tolerance
    _write_manifest(tiny_bundle, m)
    with pytest.raises(BundleError, match="tolerance"):
        selftest(str(tiny_bundle))


def test_nan_tolerance_is_refused_and_every_card_tolerance_fits() -> None:
    from edgekit.bundle.policy import check_tolerance
    from edgekit.registry import card_class, names

    with pytest.raises(BundleError, match="finite"):
        check_tolerance(json.loads('{"atol": NaN}'))
    with pytest.raises(BundleError, match="finite"):
        check_tolerance(json.loads('{"rtol": Infinity}'))
    for name in names():
        for precision, tol in card_class(name).tolerances.items():
            assert check_tolerance(tol.to_json()) == tol.to_json(), (name, precision)
    assert TOLERANCE_BOUNDS["atol"][1] >= 3.0  # sae-polysemy int8, the largest card atol
