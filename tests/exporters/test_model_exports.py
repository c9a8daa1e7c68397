"""Every registered model exports to real bundles that verify against torch on this machine
(the server methods here; sam2 / sam2-edge and the other edge models in
test_model_exports_sam2.py / test_model_exports_edge.py, split so test workers share them).

The registry-completeness test fails when a model is registered without an entry in COVERAGE
(model_exports.py), so no card can ship without export + verify coverage.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from model_exports import CARD_OPTIONS, COVERAGE, GROUPS, cases, check_export

from edgekit.build.pipeline import build_bundle
from edgekit.bundle.selftest import selftest
from edgekit.exporters import ExportOptions, Target
from edgekit.registry import get_card, names


def test_registry_is_complete() -> None:
    missing = sorted(set(names()) - set(COVERAGE))
    assert not missing, f"registered models without export + verify coverage: {missing}"
    for name in names():
        card = get_card(name, **CARD_OPTIONS.get(name, {}))
        assert card.tier in ("edge", "server") and card.task and card.summary
        assert card.primary_metric, f"{name} declares no primary_metric"
        assert card.agreement_floors, f"{name} declares no agreement floors"
    grouped = [m for models in GROUPS.values() for m in models]
    assert sorted(grouped) == sorted(COVERAGE), "each covered model in exactly one test file"


@pytest.mark.parametrize(("model", "target"), cases("server"))
def test_export_verify_selftest(model: str, target: str, tmp_path: Path) -> None:
    check_export(model, target, tmp_path)


@pytest.mark.parametrize("saturating", [True, False])
def test_int8_falls_back_to_uint8_weights_where_int8_sums_saturate(
    saturating: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On x86 without VNNI (``saturating``), a static ONNX int8 build that fails verification
    with the default u8 x s8 scheme is rebuilt once with uint8 weights; the manifest says why
    and no failed report is left. Elsewhere, or with the weight options set, it just fails."""
    import edgekit.build.pipeline as build
    from edgekit.errors import ParityError
    from edgekit.exporters import onnx_int8

    monkeypatch.setattr(onnx_int8, "reduce_range_default", lambda *a, **k: saturating)
    card = get_card("photo-cnn")  # a fresh card: its floors are changed below
    real, tries = build._build_bundle, []

    def first_try_fails(card, target, out, options, run):  # noqa: ANN001, ANN202
        tries.append(dict(options.extra))
        floors = card.agreement_floors
        if "weight_type" not in options.extra:  # a floor no artifact meets: a real failure
            card.agreement_floors = {**floors, "decided_top1_agreement": 1.01}
        try:
            return real(card, target, out, options, run)
        finally:
            card.agreement_floors = floors

    monkeypatch.setattr(build, "_build_bundle", first_try_fails)
    dest = tmp_path / "photo-cnn-onnx-int8"
    failed = dest.with_name(dest.name + ".failed-report.json")
    if not saturating:
        with pytest.raises(ParityError, match="decided_top1_agreement"):
            build_bundle(card, Target.parse("onnx-int8"), dest, progress=False)
        assert len(tries) == 1 and not dest.exists() and failed.is_file()
        return
    bundle, report = build_bundle(card, Target.parse("onnx-int8"), dest, progress=False)
    assert report is not None and report.passed and not failed.exists()
    assert [t.get("weight_type") for t in tries] == [None, "uint8"]
    assert "decided_top1_agreement" in bundle.manifest["export_options"]["int8_fallback"]
    int8 = bundle.manifest["graphs"]["classifier"]["details"]["int8"]
    assert int8["weight_type"] == "uint8" and int8["reduce_range"] is False
    assert selftest(str(bundle.path)).passed
    tries.clear()  # explicit weight options: no second try
    options = ExportOptions(extra={"reduce_range": True})
    with pytest.raises(ParityError):
        build_bundle(
            card, Target.parse("onnx-int8"), tmp_path / "explicit", options, progress=False
        )
    assert len(tries) == 1
