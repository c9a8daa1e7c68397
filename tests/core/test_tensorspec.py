"""Feed validation: every mistake names the input and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.tensorspec import TensorSpec, check_feeds

SPECS = [
    TensorSpec("input_ids", "int64", ("batch", "sequence")),
    TensorSpec("image", "float32", ("batch", 3, 8, 8)),
]


def feeds(**over: object) -> dict:
    base = {"input_ids": np.zeros((1, 5), np.int64), "image": np.zeros((1, 3, 8, 8), np.float32)}
    base.update(over)
    return base


def test_valid_feeds_pass_without_copy() -> None:
    f = feeds()
    out = check_feeds(SPECS, f)
    assert list(out) == ["input_ids", "image"] and out["image"] is f["image"]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            {"image": np.zeros((1, 3, 8, 8), np.float64)},
            r"'image' has dtype float64, expected image: float32\[batchx3x8x8\]",
        ),
        ({"image": np.zeros((1, 3, 9, 8), np.float32)}, r"'image' has shape 1x3x9x8, expected"),
        (
            {"input_ids": np.zeros((5,), np.int64)},
            r"'input_ids' has shape 5, expected input_ids: int64\[batchxsequence\]",
        ),
        ({"pixels": np.zeros(1)}, r"unknown input\(s\) \['pixels'\]"),
    ],
)
def test_bad_feeds_name_the_input(bad: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        check_feeds(SPECS, feeds(**bad))


def test_missing_input_and_non_mapping() -> None:
    f = feeds()
    del f["image"]
    with pytest.raises(InputError, match=r"missing input 'image'"):
        check_feeds(SPECS, f)
    with pytest.raises(InputError, match="must be a mapping"):
        check_feeds(SPECS, [np.zeros(1)])  # type: ignore[arg-type]


def test_json_round_trip() -> None:
    for spec in SPECS:
        assert TensorSpec.from_json(spec.to_json()) == spec
    with pytest.raises(InputError):
        TensorSpec.from_json({"name": "x"})
