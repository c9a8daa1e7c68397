"""Export + verify + self-test of sam2-edge (int8) and the official sam2 (random weights, fp32)
(model_exports.py holds the check and the coverage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_exports import cases, check_export


@pytest.mark.parametrize(("model", "target"), cases("sam2"))
def test_export_verify_selftest(model: str, target: str, tmp_path: Path) -> None:
    check_export(model, target, tmp_path)
