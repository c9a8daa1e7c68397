"""The calibrated setting prior for Lens (toolkit/lens/prior.py): fitting, choosing its weight
on calibration scenes only, the controller's ranking with it, its file and `run lens --prior`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgekit.errors import InputError
from edgekit.lens.controller import LensController, paper_grid
from edgekit.lens.prior import (
    CANDIDATES,
    SettingPrior,
    adjusted_scores,
    choose_weight,
    smoothed_accuracy,
    visit_quality,
)

SETTINGS = [s.describe() for s in paper_grid()]


def misleading_captures(seed: int = 0, scenes: int = 12, envs: int = 2) -> tuple:
    """(scores, correct) (E, S, 27): setting 4 is right on most scenes but VisiT rates it a
    little below setting 20, which is always wrong and always the most confident."""
    rng = np.random.default_rng(seed)
    correct = rng.random((envs, scenes, 27)) < 0.2
    correct[:, :, 4] = rng.random((envs, scenes)) < 0.9
    correct[:, :, 20] = False
    scores = rng.uniform(0.2, 0.5, (envs, scenes, 27))
    scores[:, :, 4] = 0.6
    scores[:, :, 20] = 0.7
    return scores, correct


def test_smoothed_accuracy_and_adjusted_scores() -> None:
    correct = np.array([[1, 0, 0], [1, 1, 0]], bool)
    np.testing.assert_allclose(smoothed_accuracy(correct), [3 / 4, 2 / 4, 1 / 4])
    scores = np.array([0.9, 0.5, 0.6])
    acc = np.array([0.1, 0.9, 0.5])
    assert np.argmax(adjusted_scores(scores, acc, 0.0)) == 0  # weight 0: VisiT alone
    assert (
        np.argmax(adjusted_scores(scores, acc, 2.0)) == 1
    )  # log .5 + 2 log .9 > log .9 + 2 log .1
    np.testing.assert_allclose(visit_quality(np.array([-0.25]), "entropy"), [0.75])
    with pytest.raises(InputError, match="unknown VisiT variant"):
        visit_quality(scores, "confidence")
    with pytest.raises(InputError, match="scenes, settings"):
        smoothed_accuracy(np.zeros(3, bool))
    # "offset": VisiT minus weight x (calibration confidence - accuracy) of each setting
    conf = np.array([0.8, 0.6, 0.5])  # setting 0 is 0.7 over-confident, setting 1 0.3 under
    offset = adjusted_scores(scores, acc, 1.0, form="offset", confidence=conf)
    np.testing.assert_allclose(offset, [0.9 - 0.7, 0.5 + 0.3, 0.6 - 0.0])
    assert np.argmax(offset) == 1
    np.testing.assert_allclose(
        adjusted_scores(scores, acc, 0.0, form="offset", confidence=conf), scores
    )
    with pytest.raises(InputError, match="unknown Lens prior form 'linear'"):
        adjusted_scores(scores, acc, 1.0, form="linear")
    with pytest.raises(InputError, match="calibration confidence"):
        adjusted_scores(scores, acc, 1.0, form="offset")


def test_the_weight_is_chosen_by_cross_fitting_on_calibration_only() -> None:
    scores, correct = misleading_captures()
    (form, weight), results = choose_weight(scores, correct)
    assert set(results) == set(CANDIDATES) and form in ("log", "offset")
    # VisiT alone picks setting 20; the chosen prior fixes that on the held-out halves
    assert weight > 0 and results[(form, weight)] > results[("log", 0.0)] + 0.5
    assert results[(form, weight)] == max(results.values())
    # a VisiT that already ranks right captures first keeps VisiT alone (ties go to weight 0)
    honest = np.where(correct, 0.9, 0.3)
    assert choose_weight(honest, correct)[0] == ("log", 0.0)
    with pytest.raises(InputError, match="at least 2 calibration scenes"):
        choose_weight(scores[:, :1], correct[:, :1])
    with pytest.raises(InputError, match=r"\(E, S, N\)"):
        choose_weight(scores[0], correct[0])


def test_the_controller_ranks_candidates_by_visit_and_prior() -> None:
    scores, correct = misleading_captures()
    prior = SettingPrior.fit(scores, correct, SETTINGS)
    plain = LensController(None, None, budget_k=27)  # type: ignore[arg-type]
    with_prior = LensController(None, None, budget_k=27, prior=prior)  # type: ignore[arg-type]
    test_scores, _ = misleading_captures(seed=1)
    assert plain.decide_from_scores(test_scores[0, 0])[0] == 20
    assert with_prior.decide_from_scores(test_scores[0, 0])[0] == 4
    # the ranking of a subset of the grid uses those settings' prior entries
    ranked = with_prior.ranking(np.array([0.6, 0.7]), [4, 20])
    assert ranked[0] > ranked[1]
    small = LensController(None, None, budget_k=6, strategy="two-stage", prior=prior)  # type: ignore[arg-type]
    chosen, candidates = small.decide_from_scores(test_scores[0, 0])
    assert len(candidates) <= 6 and chosen in candidates
    with pytest.raises(InputError, match="calibrated on a 27-setting grid"):
        LensController(None, None, grid=paper_grid()[:9], prior=prior)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="VisiT 'top1'"):
        LensController(None, None, variant="margin", prior=prior)  # type: ignore[arg-type]


def test_prior_files_round_trip_and_bad_files_are_clear_errors(tmp_path: Path) -> None:
    scores, correct = misleading_captures()
    prior = SettingPrior.fit(scores, correct, SETTINGS, model="photo-cnn onnx-fp32")
    path = prior.save(tmp_path / "prior.json")
    back = SettingPrior.load(path)
    assert back.weight == prior.weight and back.settings == SETTINGS and back.scenes == 24
    assert back.form == prior.form and back.cross_fit == pytest.approx(prior.cross_fit)
    np.testing.assert_allclose(back.accuracy, prior.accuracy, atol=1e-6)
    np.testing.assert_allclose(back.confidence, scores.reshape(-1, 27).mean(0), atol=1e-6)
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically, nothing left behind
    with pytest.raises(InputError, match="not found"):
        SettingPrior.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        SettingPrior.load(bad)
    bad.write_text(json.dumps({"schema": "edgekit.lens.controller-bench/1"}))
    with pytest.raises(InputError, match="not a Lens prior"):
        SettingPrior.load(bad)
    raw = prior.to_json()
    for field, value, message in (
        ("accuracy", [0.5] * 3, "equal-length"),
        ("accuracy", [0.0] * 27, r"\(0, 1\]"),
        ("weight", -1, "'weight' must be >= 0"),
        ("variant", "confidence", "unknown VisiT variant"),
        ("form", "linear", "unknown 'form'"),
        ("confidence", [0.5] * 3, "one entry per setting"),
        ("cross_fit", [["log"]], "'cross_fit' must be"),
    ):
        bad.write_text(json.dumps({**raw, field: value}))
        with pytest.raises(InputError, match=message):
            SettingPrior.load(bad)


def test_run_lens_with_a_prior_file(tmp_path: Path) -> None:
    from edgekit.lens.run import run_lens

    scores, correct = misleading_captures()
    path = SettingPrior.fit(scores, correct, SETTINGS).save(tmp_path / "prior.json")
    log = tmp_path / "lens.jsonl"
    rows = run_lens("sim:seed=2,lighting=dim-room", "photo-cnn", 27, 2, log, prior=path)
    saved = SettingPrior.load(path)
    assert [(row["prior_weight"], row["prior_form"]) for row in rows] == [
        (saved.weight, saved.form)
    ] * 2
    # the setting ranked first is the one with the best log VisiT + weight x log prior
    prior = SettingPrior.load(path)
    for row in rows:
        ranked = prior.adjust(np.asarray(row["scores"]), row["candidates"])
        assert row["chosen_index"] == row["candidates"][int(np.argmax(ranked))]
    with pytest.raises(InputError, match="Lens prior file not found"):
        run_lens("sim", "photo-cnn", frames=1, log=tmp_path / "x.jsonl", prior=tmp_path / "no")


def test_eval_lens_writes_a_deployable_prior_per_bundle(tmp_path: Path) -> None:
    from edgekit.lens.report import eval_lens, prior_path

    reports = eval_lens(
        tmp_path, 1, ["dim-room"], 1, progress=False, models=["photo-cnn"], calib_per_class=1
    )
    report = reports["wide-range"]
    assert report["config"]["calibration_scenes"] == 10
    assert (tmp_path / "lens-wide-range.json").is_file()
    for model in ("photo-cnn onnx-fp32", "photo-cnn onnx-int8"):
        path = prior_path(tmp_path, "wide-range", model)
        assert path.name == f"lens-wide-range-prior-{model.replace(' ', '-')}.json"
        prior = SettingPrior.load(path)
        assert prior.model == model and prior.settings == SETTINGS
        assert prior.weight == report["models"][model]["prior"]["weight"]
        assert prior.scenes == 10  # 1 environment x 10 calibration scenes (1 per class)


def test_priors_of_several_seeds_pool_their_counts_and_cross_fits() -> None:
    from edgekit.lens.prior import pool_priors

    fits = [misleading_captures(seed=s, scenes=8 + 4 * s) for s in range(3)]
    runs = [SettingPrior.fit(sc, co, SETTINGS).to_json() for sc, co in fits]
    pooled = pool_priors(runs, "photo-vit onnx-fp32")
    every = np.concatenate([co.reshape(-1, 27) for _, co in fits])
    assert pooled.scenes == len(every) and pooled.model == "photo-vit onnx-fp32"
    np.testing.assert_allclose(pooled.accuracy, smoothed_accuracy(every))
    scenes = [SettingPrior.load_json(r).scenes for r in runs]
    tables = [SettingPrior.load_json(r).cross_fit for r in runs]
    mean = {c: sum(t[c] * n for t, n in zip(tables, scenes, strict=True)) for c in CANDIDATES}
    assert mean[(pooled.form, pooled.weight)] == max(mean.values())
    assert pooled.cross_fit == pytest.approx({c: m / pooled.scenes for c, m in mean.items()})
    confidences = [sc.reshape(-1, 27).mean(0) * len(sc.reshape(-1, 27)) for sc, _ in fits]
    np.testing.assert_allclose(pooled.confidence, sum(confidences) / pooled.scenes, atol=1e-5)
    other = {**runs[0], "settings": SETTINGS[::-1]}
    with pytest.raises(InputError, match="cannot be pooled"):
        pool_priors([runs[0], other])
    with pytest.raises(InputError, match="at least one run"):
        pool_priors([])


def test_an_offset_prior_ranks_by_visit_minus_the_settings_over_confidence() -> None:
    """Setting 20 is always wrong and on the calibration scenes always 0.9 confident; setting
    4 is mostly right at 0.6. The offset prior takes 20's over-confidence off its score."""
    scores, correct = misleading_captures()
    prior = SettingPrior.fit(scores, correct, SETTINGS)
    offset = SettingPrior(
        prior.accuracy, 1.0, SETTINGS, scenes=prior.scenes, form="offset",
        confidence=scores.reshape(-1, 27).mean(0),
    )  # fmt: skip
    controller = LensController(None, None, budget_k=27, prior=offset)  # type: ignore[arg-type]
    test_scores, _ = misleading_captures(seed=1)
    assert controller.decide_from_scores(test_scores[0, 0])[0] == 4
    ranked = offset.adjust(np.array([0.6, 0.7]), [4, 20])
    acc, conf = offset.accuracy, offset.confidence
    np.testing.assert_allclose(ranked, [0.6 - (conf[4] - acc[4]), 0.7 - (conf[20] - acc[20])])
    assert offset.describe() == "offset, weight 1" and prior.describe() != "VisiT alone"
    with pytest.raises(InputError, match="needs its 'confidence'"):
        SettingPrior.load_json({**offset.to_json(), "confidence": None})


def test_a_session_18_prior_file_reads_as_the_log_form(tmp_path: Path) -> None:
    scores, correct = misleading_captures()
    raw = SettingPrior.fit(scores, correct, SETTINGS).to_json()
    old = {k: v for k, v in raw.items() if k not in ("form", "confidence")}
    old["weight"] = 2.0
    old["cross_fit"] = [[0.0, 0.4], [2.0, 0.9]]  # [weight, accuracy] pairs, no form
    prior = SettingPrior.load_json(old)
    assert prior.form == "log" and prior.confidence is None and prior.weight == 2.0
    assert prior.cross_fit == {("log", 0.0): 0.4, ("log", 2.0): 0.9}
    ranked = prior.adjust(np.array([0.5, 0.8]), [0, 1])
    np.testing.assert_allclose(ranked, np.log([0.5, 0.8]) + 2.0 * np.log(prior.accuracy[:2]))
