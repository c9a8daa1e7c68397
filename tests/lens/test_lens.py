"""Lens + VisiT on the real simulated camera and a real photo-cnn bundle (onnx-fp32)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgekit.devices.camera import Camera, CameraDisconnected, CaptureSettings, ControlRange
from edgekit.errors import InputError
from edgekit.lens.controller import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    LensController,
    ev_levels,
    grid_from_capabilities,
    grid_neighbours,
    paper_grid,
)
from edgekit.lens.visit import fused_prediction, visit_from_logits, visit_scores


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    """A photo-cnn onnx-fp32 bundle built once for this module, and its session."""
    from edgekit.lens.bench import bench_bundles

    root = tmp_path_factory.mktemp("lens-bundles")
    return bench_bundles((("photo-cnn", "onnx-fp32"),), root)["photo-cnn onnx-fp32"].session()


@pytest.fixture(scope="module")
def scene() -> np.ndarray:
    """One held-out crop of the astronaut photo: (64, 64, 3) float32 in [0, 1]."""
    from edgekit.lens.captures import scene_crops

    images, _ = scene_crops(1, 7)
    return images[0]


def sim(scene: np.ndarray, lighting: str = "office", seed: int = 0, **options: object) -> Camera:
    from edgekit.devices.sim_camera import SimCamera

    return SimCamera(scene=scene, lighting=lighting, seed=seed, size=(64, 64), **options)


def test_paper_grid_has_27_settings_iso_fastest() -> None:
    grid = paper_grid()
    assert len(grid) == 27 and len(set(grid)) == 27
    assert [g.iso for g in grid[:3]] == [250, 2000, 16000]
    assert grid[0].shutter_s == grid[2].shutter_s == 1 / 4 and grid[3].shutter_s == 1 / 60
    assert {g.aperture_f for g in grid[:9]} == {5} and grid[9].aperture_f == 9
    assert grid[26] == CaptureSettings(iso=16000, shutter_s=1 / 1000, aperture_f=16)
    assert grid_neighbours(grid)[0] == [1, 3, 9]
    caps = {
        "iso": ControlRange("iso", 100, 6400),
        "shutter_s": ControlRange("shutter_s", 1e-4, 0.5),
    }
    small = grid_from_capabilities(caps, 2)
    assert len(small) == 4 and small[0].iso == 100 and small[1].iso == 6400
    assert small[0].shutter_s == 0.5 and small[0].aperture_f is None


def test_visit_variants_on_known_logits() -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0 + 1e-30]]))
    np.testing.assert_allclose(visit_from_logits(logits, "top1"), [0.7, 1 / 3, 0.5], atol=1e-9)
    np.testing.assert_allclose(visit_from_logits(logits, "margin"), [0.5, 0, 0], atol=1e-9)
    entropy = visit_from_logits(logits, "entropy")
    h0 = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1)) / math.log(3)
    np.testing.assert_allclose(entropy[:2], [-h0, -1.0], atol=1e-9)
    assert entropy[2] == pytest.approx(-math.log(2) / math.log(3), abs=1e-9)
    # -flip: the same scores read from the mean softmax of the capture and its mirror image
    mirrored = np.log(np.array([[0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 1e-30]]))
    mean = (np.exp(logits) + np.exp(mirrored)) / 2
    np.testing.assert_allclose(visit_from_logits(logits, "top1-flip", mirrored), mean.max(1))
    np.testing.assert_allclose(visit_from_logits(logits, "margin-flip", mirrored), 0, atol=1e-12)
    np.testing.assert_allclose(
        visit_from_logits(logits, "entropy-flip", mirrored),
        visit_from_logits(np.log(mean), "entropy"),
    )
    with pytest.raises(InputError, match="needs the logits of the mirrored captures"):
        visit_from_logits(logits, "top1-flip")
    with pytest.raises(InputError, match=r"shaped like the captures' \(3, 3\); got \(2, 3\)"):
        visit_from_logits(logits, "top1-flip", mirrored[:2])
    with pytest.raises(InputError, match="unknown VisiT variant 'top2'; expected one of top1, "):
        visit_from_logits(logits, "top2")
    with pytest.raises(InputError, match="unknown VisiT variant 'flip'"):
        LensController(None, None, variant="flip")  # type: ignore[arg-type]


class HalvesRunner:
    """A classifier whose three logits are 10 x the mean of the image's left half, right half
    and whole; it records every batch it is given."""

    def __init__(self) -> None:
        self.batches: list[np.ndarray] = []

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feeds["image"]  # (N, 3, H, W)
        self.batches.append(x)
        w = x.shape[3] // 2
        means = [x[..., :w], x[..., w:], x]
        return {"logits": 10 * np.stack([m.mean(axis=(1, 2, 3)) for m in means], 1)}


def test_flip_visit_runs_the_mirror_images_in_the_same_batch() -> None:
    frames = np.zeros((3, 8, 8, 3), np.uint8)
    frames[0, :, :4] = 255  # bright left half: class 0, and class 1 once mirrored
    frames[1] = 128  # symmetric: the mirror changes nothing
    frames[2, :, 6:] = 255  # a little light on the right
    runner = HalvesRunner()
    scores, logits = visit_scores(runner, frames, "top1-flip", return_logits=True)
    assert len(runner.batches) == 1 and runner.batches[0].shape == (6, 3, 8, 8)
    np.testing.assert_array_equal(runner.batches[0][3:], runner.batches[0][:3][..., ::-1])
    assert logits.shape == (3, 3) and logits[0].argmax() == 0  # the captures' own logits
    _, mirrored = visit_scores(HalvesRunner(), frames[:, :, ::-1], return_logits=True)
    np.testing.assert_allclose(scores, visit_from_logits(logits, "top1-flip", mirrored))
    plain = visit_scores(HalvesRunner(), frames, "top1")
    assert plain[0] > 0.99 and scores[0] < 0.5  # confident, but not under a flip
    assert scores[1] == pytest.approx(plain[1]) == pytest.approx(1 / 3)
    assert scores[2] < plain[2]


def test_visit_scores_one_batch_and_resizes(session, scene) -> None:
    cam = sim(scene)
    frames = np.stack([cam.capture(s).image for s in paper_grid()[:4]])  # (4, 64, 64, 3)
    scores, logits = visit_scores(session, frames, return_logits=True)
    assert scores.shape == (4,) and logits.shape == (4, 10)
    np.testing.assert_allclose(scores, visit_from_logits(logits, "top1"))
    assert np.ptp(scores) > 0.3  # the four exposures are told apart (0.41 to 0.95)
    big = np.repeat(np.repeat(frames, 2, axis=1), 2, axis=2)  # (4, 128, 128, 3)
    # resized back to the model's 64 x 64, the 2x captures read as the captures themselves
    big_scores, big_logits = visit_scores(session, big, return_logits=True)
    assert big_logits.argmax(1).tolist() == logits.argmax(1).tolist()
    np.testing.assert_allclose(big_scores, scores, atol=0.05)


def test_k27_picks_visit_argmax_ties_to_lower_index(session, scene) -> None:
    lens = LensController(session, sim(scene), budget_k=27)
    decision = lens.decide()
    assert decision.candidates == list(range(27)) and decision.captures == 27
    assert decision.chosen_index == int(np.argmax(decision.scores))
    assert decision.score == pytest.approx(float(decision.scores.max()))
    assert decision.settings == paper_grid()[decision.chosen_index]
    assert decision.image is not None and decision.image.shape == (64, 64, 3)
    replay = LensController(None, None, budget_k=27)  # type: ignore[arg-type]
    tied = np.zeros(27)
    tied[[4, 11, 20]] = 0.9
    assert replay.decide_from_scores(tied)[0] == 4


def test_fused_prediction_is_a_visit_weighted_vote() -> None:
    preds = np.array([[3, 1, 1, 0], [2, 2, 0, 0]])
    scores = np.array([[0.9, 0.5, 0.5, 0.2], [0.3, 0.3, 0.3, 0.3]])
    assert fused_prediction(preds, scores).tolist() == [1, 0]  # 1.0 > 0.9; 0.6 ties: lower
    mask = np.array([[True, True, False, True], [True, True, True, True]])
    assert fused_prediction(preds, scores, mask).tolist() == [3, 0]  # 0.9 > 0.5 > 0.2
    with pytest.raises(ValueError, match="one shape"):
        fused_prediction(preds, scores[:, :3])


def test_fuse_decision_votes_over_the_same_captures(session, scene) -> None:
    from edgekit.errors import InputError

    select = LensController(session, sim(scene), budget_k=27).decide()
    fuse = LensController(session, sim(scene), budget_k=27, decision="fuse").decide()
    assert fuse.decision == "fuse" and fuse.to_json()["decision"] == "fuse"
    assert fuse.chosen_index == select.chosen_index  # the kept capture is still VisiT's best
    np.testing.assert_allclose(fuse.scores, select.scores)
    cam = sim(scene)
    frames = np.stack([cam.capture(s).image for s in paper_grid()])
    scores, logits = visit_scores(session, frames, return_logits=True)
    assert fuse.pred == int(fused_prediction(logits.argmax(1), scores))
    with pytest.raises(InputError, match="unknown decision 'vote'"):
        LensController(session, sim(scene), decision="vote")


@pytest.mark.parametrize("k", [1, 3, 6, 9])
def test_csa_respects_k_and_latency_budget(session, scene, k: int) -> None:
    lens = LensController(session, sim(scene), budget_k=k)
    for _ in range(2):
        decision = lens.decide()
        assert decision.captures <= k and len(set(decision.candidates)) == decision.captures
    budget = 0.12
    lens = LensController(session, sim(scene), budget_k=k, latency_budget_s=budget)
    for _ in range(3):
        decision = lens.decide()
        assert 1 <= decision.captures <= k
        planned = sum(lens.grid[i].shutter_s for i in decision.candidates)
        assert planned <= budget
        assert all(lens.grid[i].shutter_s < 0.25 for i in decision.candidates)


def test_temporal_reuse_starts_from_previous_decision(session, scene) -> None:
    lens = LensController(session, sim(scene, "dim-room"), budget_k=3, strategy="ev-sweep")
    first = lens.decide()
    assert lens.last_index == first.chosen_index
    planned = lens.plan()
    second = lens.decide()
    assert second.candidates == planned and first.chosen_index in second.candidates
    assert set(second.candidates) & set(lens.neighbours[first.chosen_index])


def test_disconnect_keeps_last_good_setting(session, scene) -> None:
    lens = LensController(session, sim(scene, fail_after=4), budget_k=3)
    good = lens.decide()
    with pytest.raises(CameraDisconnected, match="keeping the last good setting"):
        lens.decide()
    assert lens.last_good == good.settings and lens.last_index == good.chosen_index


@pytest.mark.parametrize("k", [1, 3, 6, 9])
def test_metered_strategy_anchors_on_the_meter(session, scene, k: int) -> None:
    lens = LensController(session, sim(scene, "dim-room"), budget_k=k, strategy="metered")
    meter_ev = lens.camera.meter().exposure_value()
    anchor = lens.anchor(meter_ev)
    nearest = int(np.argmin(np.abs(lens.ev - meter_ev)))
    assert abs(lens.ev[anchor] - lens.ev[nearest]) <= 0.5  # same EV level
    for _ in range(2):  # no temporal drift: the meter anchors every decision
        decision = lens.decide()
        assert decision.captures <= k and len(set(decision.candidates)) == decision.captures
        assert anchor in decision.candidates
    if k >= 3:  # the EV levels just below and above the anchor come next
        level = lens.level_of[anchor]
        assert {lens.levels[level - 1][0], lens.levels[level + 1][0]} <= set(decision.candidates)
    replay = LensController(None, None, budget_k=k, strategy="metered")  # type: ignore[arg-type]
    _, candidates = replay.decide_from_scores(np.zeros(27), meter_ev=meter_ev)
    assert anchor in candidates and len(candidates) <= k


@pytest.mark.parametrize("k", [2, 3, 6, 9])
def test_two_stage_refines_around_the_best_sweep_point(session, scene, k: int) -> None:
    lens = LensController(session, sim(scene), budget_k=k, strategy="two-stage")
    first = lens.plan()
    assert len(first) == (k + 1) // 2
    decision = lens.decide()
    assert decision.captures == k and len(set(decision.candidates)) == k
    assert set(first) <= set(decision.candidates) and decision.candidates == sorted(
        decision.candidates
    )
    scores = np.zeros(27)
    scores[first[-1]] = 1.0
    replay = LensController(None, None, budget_k=k, strategy="two-stage")  # type: ignore[arg-type]
    _, candidates = replay.decide_from_scores(scores)
    added = set(candidates) - set(first)
    levels = {replay.level_of[i] for i in added}
    best = replay.level_of[first[-1]]
    assert len(candidates) == k and min(abs(level - best) for level in levels) <= 1


def test_ev_levels_prefer_low_iso_and_unknown_strategy_fails() -> None:
    grid = paper_grid()
    levels = ev_levels(grid)
    assert sorted(i for level in levels for i in level) == list(range(27))
    for level in levels:
        assert [grid[i].iso for i in level] == sorted(grid[i].iso for i in level)
    assert set(STRATEGIES) == {"ev-sweep", "metered", "two-stage"}
    with pytest.raises(Exception, match="unknown strategy"):
        LensController(None, None, strategy="random")  # type: ignore[arg-type]


def test_small_lens_bench_has_every_method(tmp_path) -> None:
    from edgekit.lens.bench import LensBenchConfig, run_lens_bench
    from edgekit.lens.prior import CANDIDATES, SettingPrior, prior_candidate_key
    from edgekit.lens.report import (
        environment_table,
        lens_checks,
        lens_plot,
        lens_table,
        summarise,
        visit_table,
    )

    config = LensBenchConfig(
        seeds=(0,),
        environments=("dim-room", "daylight"),
        test_per_class=1,
        calib_per_class=1,
        ae_shots=2,
        targets=(("photo-cnn", "onnx-fp32"),),
        timing_reps=2,
    )
    report = run_lens_bench(config, progress=False, bundle_root=tmp_path)
    methods = summarise(report)["photo-cnn onnx-fp32"]
    assert report["config"]["scene_set"] == "wide-range"  # the set holding these environments
    expected = {"clean", "ae", "ae average", "ae center-weighted", "naive", "best-fixed", "oracle"}
    expected |= {"lens K=27"}
    expected |= {f"lens K={k} {s}" for k in (3, 6, 9) for s in STRATEGIES}
    expected |= {f"lens K={k} selected" for k in (3, 6, 9)}
    fused = {"lens K=27 fused"} | {f"lens K={k} selected fused" for k in (3, 6, 9)}
    expected |= fused
    expected |= {f"lens K={k}{s} [{v}]" for k, s in ((27, ""), (6, f" {DEFAULT_STRATEGY}")) for v in (
        "margin", "entropy", "top1-flip")}  # fmt: skip
    expected |= {"lens K=27 prior"} | {f"lens K={k} selected prior" for k in (3, 6, 9)}
    assert set(methods) == expected
    calibration = report["models"]["photo-cnn onnx-fp32"]["runs"][0]["calibration"]
    strategies = {f"lens K={k} {s}" for k in (3, 6, 9) for s in STRATEGIES}
    variants = {
        f"lens K={k} {DEFAULT_STRATEGY} [{v}]"
        for k in (3, 6, 9)
        for v in ("entropy", "margin", "top1-flip")
    }
    weights = {prior_candidate_key(f, w) for f, w in CANDIDATES}
    assert set(calibration) == strategies | variants | fused | weights
    acc = {m: row["accuracy"][0] for m, row in methods.items()}
    assert all(acc["oracle"] >= a for m, a in acc.items() if m != "clean")
    # VisiT's pick beats a random grid setting ("naive", the mean over all 27 on 540 captures:
    # 0.29) on these 20 scenes: 0.45; a constant score (the first setting) gets 0.35 and the
    # negated VisiT 0.25
    assert acc["lens K=27"] >= acc["naive"] + 0.1, acc
    assert lens_table(report).row_count == len(expected)
    env_table = environment_table(report)
    assert env_table.row_count == len(report["config"]["environments"])
    assert len(env_table.columns) == 2 + 5 * len(summarise(report))  # ae, bf, K=6, +prior, oracle
    run = report["models"]["photo-cnn onnx-fp32"]["runs"][0]
    for k in (3, 6, 9):  # the selected row repeats the calibration-best strategy's row
        picked = run["methods"][f"lens K={k} selected"]["strategy"]
        best = max(calibration[f"lens K={k} {s}"] for s in STRATEGIES)
        assert calibration[f"lens K={k} {picked}"] == best
        assert (
            run["methods"][f"lens K={k} selected"]["accuracy"]
            == (run["methods"][f"lens K={k} {picked}"]["accuracy"])
        )
    # the prior rows replay the same stream with the run's calibrated prior
    prior = SettingPrior.load_json(run["prior"])
    assert prior.variant == report["config"]["variant"] == "top1"  # the scores it was fitted on
    # the variant to deploy, read off the calibration scenes at K=6 (metered) only
    from edgekit.lens.bench import REPORTED_VARIANTS
    from edgekit.lens.report import add_summaries

    choice = add_summaries(report)["variant_choice"]["photo-cnn onnx-fp32"]
    assert set(choice["accuracy"]) == set(REPORTED_VARIANTS)
    assert choice["accuracy"]["top1"] == calibration[f"lens K=6 {DEFAULT_STRATEGY}"]
    assert (
        choice["accuracy"]["top1-flip"] == calibration[f"lens K=6 {DEFAULT_STRATEGY} [top1-flip]"]
    )
    assert choice["accuracy"][choice["variant"]] == max(choice["accuracy"].values())
    assert (prior.form, prior.weight) in CANDIDATES and prior.scenes == 2 * 10  # 2 envs x 10
    assert calibration[prior_candidate_key(prior.form, prior.weight)] == max(
        calibration[name] for name in weights
    )
    pooled = SettingPrior.load_json(report["models"]["photo-cnn onnx-fp32"]["prior"])
    assert pooled.model == "photo-cnn onnx-fp32" and len(pooled.accuracy) == 27
    if prior.weight == 0:
        assert (
            run["methods"]["lens K=27 prior"]["accuracy"] == run["methods"]["lens K=27"]["accuracy"]
        )
    visit = run["visit"]
    # VisiT ranks right captures above wrong ones (AUROC 0.61 over 540 captures; 0.5 for a
    # constant score, 0.39 for the negated one) and scores near-black captures below right ones
    assert visit["auroc"] >= 0.55, visit
    assert visit["score_right"] > max(visit["score_wrong"], visit["score_dark"]), visit
    assert visit_table(report).row_count == 1
    claims = {c["claim"] for c in lens_checks(report)}
    assert "lens K=6 selected > best-fixed beyond noise" in claims
    assert {
        "lens K=27 fused > best-fixed beyond noise",
        "lens K=27 fused > lens K=27 beyond noise",
        "lens K=6 selected fused > lens K=6 selected beyond noise",
    } <= claims
    assert {  # every metering mode's auto-exposure is a baseline of its own
        f"{a} > ae {m} beyond noise"
        for a in ("best-fixed", "lens K=6 selected")
        for m in ("average", "center-weighted")
    } <= claims
    assert {
        f"lens K=6 selected keeps >= 90% of the K=27 gain over {b}" for b in ("ae", "naive")
    } <= (claims)
    assert {
        "lens K=27 prior > best-fixed beyond noise",
        "lens K=27 prior > lens K=27 beyond noise",
        "lens K=6 selected prior > ae beyond noise",
        "oracle > lens K=6 selected prior beyond noise",
        "lens K=6 selected prior keeps >= 90% of the K=27 prior gain over ae",
    } <= claims
    assert lens_plot(report, tmp_path / "lens.png").stat().st_size > 0


def test_scene_sets_resolve_and_bad_names_fail() -> None:
    from edgekit.errors import InputError
    from edgekit.lens.bench import selected_strategy
    from edgekit.lens.captures import DEFAULT_SCENE_SET, resolve_scene_set

    assert DEFAULT_SCENE_SET == "es-diverse" and resolve_scene_set(None, None) == "es-diverse"
    assert resolve_scene_set(None, ("dim-room", "office")) == "wide-range"
    assert resolve_scene_set(None, ("lamp-warm",)) == "es-diverse"
    with pytest.raises(InputError, match="mix lighting sets"):
        resolve_scene_set(None, ("lamp-warm", "office"))
    with pytest.raises(InputError, match="not in the 'es-diverse' set"):
        resolve_scene_set("es-diverse", ("office",))
    with pytest.raises(InputError, match="unknown scene set"):
        resolve_scene_set("studio", None)
    with pytest.raises(InputError, match="unknown lighting"):
        resolve_scene_set(None, ("moonlight",))
    calibration = {f"lens K=6 {s}": a for s, a in zip(STRATEGIES, (0.5, 0.7, 0.7), strict=True)}
    assert selected_strategy(calibration, 6) == STRATEGIES[1]  # ties: STRATEGIES order


def test_es_diverse_captures_are_the_print_region(scene) -> None:
    """The ES-Diverse set frames a print (2x the scene) on a dark backdrop; the classifier gets
    the print region; average-metered AE over-exposes it more than centre-weighted AE, and the
    first metering mode ("ae") is evaluative, a DSLR's default."""
    from edgekit.lens.captures import bench_camera, capture_set
    from edgekit.lens.controller import classifier_view

    cam = bench_camera(scene, "lamp-cool", 0, "es-diverse", "average")
    frame = cam.capture(paper_grid()[4])
    assert frame.image.shape == (128, 128, 3) and classifier_view(frame).shape == (64, 64, 3)
    assert cam.capabilities()["aperture_f"].minimum == 5.0
    caps = capture_set(scene[None], ["lamp-cool", "lamps-bright"], 0, 2, scene_set="es-diverse")
    assert caps["grid"].shape == (2, 1, 27, 64, 64, 3) and caps["ae"].shape == (2, 1, 2, 64, 64, 3)
    assert caps["ae center-weighted"].shape == caps["ae average"].shape == (2, 1, 2, 64, 64, 3)
    assert caps["ae average"].mean() > caps["ae center-weighted"].mean() + 10
    assert caps["ae average"].mean() > caps["ae"].mean() + 10
    assert caps["grid_latency"].shape == (2, 1, 27) and caps["meter_ev"].shape == (2, 1)
    assert caps["meter_ev"][1, 0] > caps["meter_ev"][0, 0]  # more light, higher metered EV


def test_auroc_matches_pairwise_definition() -> None:
    from edgekit.lens.diagnostics import auroc

    scores = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
    positive = np.array([True, False, True, False, False])
    pairs = [(p, n) for p in scores[positive] for n in scores[~positive]]
    expected = np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs])
    assert auroc(scores, positive) == pytest.approx(expected)
    assert math.isnan(auroc(scores, np.zeros(5, bool)))


def test_good_exposure_auroc_ignores_the_easy_pairs() -> None:
    """A VisiT that only tells a dark capture from a good one: it ranks the right capture above
    the dark one but below the wrong good one, so among the good exposures its AUROC is 0."""
    from edgekit.lens.diagnostics import good_exposures, within_scene_auroc

    # 1 environment, 4 scenes, 3 settings: 0 and 1 good (right on 2 scenes each), 2 dark (never)
    correct = np.array([[[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0]]], bool)
    scores = np.where(correct, 0.6, 0.7)  # the wrong good capture scores higher ...
    scores[..., 2] = 0.1  # ... and the dark one lowest
    keep = good_exposures(correct)
    assert keep.tolist() == [[True, True, False]]
    assert within_scene_auroc(scores, correct) == pytest.approx(0.5)  # right beats dark only
    assert within_scene_auroc(scores, correct, keep) == 0.0
    assert within_scene_auroc(-scores, correct, keep) == 1.0
    assert math.isnan(within_scene_auroc(scores, np.zeros_like(correct), keep))


@pytest.mark.parametrize("strategy", ["metered", "two-stage"])
def test_lens_scores_frames_that_carry_each_candidates_settings(session, scene, strategy) -> None:
    """A sensor 2 frames late at 30 fps: every score comes from a frame that really had its
    candidate's settings, and the decision's capture time includes the dropped frames."""
    from edgekit.devices.sim_camera import SimCamera

    class Recording(SimCamera):
        def capture(self, settings: CaptureSettings | None = None):  # type: ignore[override]
            frame = super().capture(settings)
            self.log.append((settings, frame))
            return frame

    cam = Recording(scene=scene, size=(64, 64), settings_latency=2, frame_interval_s=0.033)
    cam.log = []
    lens = LensController(session, cam, budget_k=4, strategy=strategy)
    for n in range(2):
        cam.log.clear()
        decision = lens.decide()
        by_setting = {s: f for s, f in cam.log}
        frames = [by_setting[lens.grid[i]] for i in decision.candidates]
        assert len(cam.log) == decision.captures == len(frames) == 4
        for i, frame in zip(decision.candidates, frames, strict=True):
            assert frame.settings == frame.requested == lens.grid[i]
        assert [f.dropped_frames for _, f in cam.log][1:] == [2] * 3  # each change waits 2
        assert decision.dropped_frames == sum(f.dropped_frames for f in frames) >= 6 + 2 * (n == 0)
        np.testing.assert_allclose(
            decision.scores, visit_scores(session, np.stack([f.image for f in frames])), rtol=1e-5
        )
        assert decision.settings == lens.grid[decision.chosen_index]
        floor = (decision.dropped_frames + decision.captures) * 0.033
        assert decision.capture_latency_s >= floor >= (4 * 3 - 2 * (n > 0)) * 0.033
        assert decision.to_json()["dropped_frames"] == decision.dropped_frames


def test_lens_decision_wall_time_includes_the_settings_wait(session, scene) -> None:
    cam = sim(scene, settings_latency=2, frame_interval_s=0.033, realtime=True)
    decision = LensController(session, cam, budget_k=2, latency_budget_s=0.1).decide()
    assert decision.dropped_frames == 2 * decision.captures
    assert decision.capture_wall_s >= decision.capture_latency_s >= decision.captures * 3 * 0.033
