"""MTID: planning metrics, proximity weights, cosine schedule, condition projection, latent
interpolation, action-aware mask, DDIM against an exact posterior-mean denoiser, training cache,
ONNX vs torch planning."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import onnx_sessions, perturbed

from edgekit.errors import InputError
from edgekit.models.mtid.denoiser import PlanDenoiser
from edgekit.models.mtid.graphs import mtid_graphs
from edgekit.models.mtid.interpolation import LatentInterpolation
from edgekit.models.mtid.layout import (
    Layout,
    decode_actions,
    encode_plans,
    one_hot,
    project,
    project_torch,
)
from edgekit.models.mtid.loss import (
    masked_proximity_weights,
    proximity_weights,
    weighted_action_mse,
)
from edgekit.models.mtid.metrics import mean_accuracy, mean_iou, plan_metrics, step_accuracy
from edgekit.models.mtid.oracle import candidate_plans, map_plans
from edgekit.models.mtid.sampling import ddim_plan, plan
from edgekit.models.mtid.schedule import Schedule, ddim_timesteps
from edgekit.models.mtid.tasks import make_world, sample_plans, task_action_table
from edgekit.models.mtid.train import MTIDConfig, train_mtid
from edgekit.runtimes.torch import eager_runners

torch.set_num_threads(1)

LAYOUT = Layout(tasks=3, actions=5, obs_dim=4)
T = 3


def test_plan_metrics_match_hand_computed_values() -> None:
    pred = np.array([[1, 2, 3], [1, 2, 4], [5, 6, 7], [1, 1, 1]])
    truth = np.array([[1, 2, 3], [1, 3, 2], [7, 6, 5], [1, 2, 3]])
    metrics = plan_metrics(pred, truth)
    assert metrics["success_rate"] == pytest.approx(1 / 4)
    assert mean_accuracy(pred, truth) == pytest.approx((3 + 1 + 1 + 1) / 12)
    # IoU per plan: 1, |{1,2}| / |{1,2,3,4}| = 1/2, 1 (order ignored), |{1}| / |{1,2,3}| = 1/3
    assert mean_iou(pred, truth) == pytest.approx((1 + 0.5 + 1 + 1 / 3) / 4)
    np.testing.assert_allclose(step_accuracy(pred, truth), [3 / 4, 2 / 4, 1 / 4])
    with pytest.raises(InputError, match="plans"):
        plan_metrics(pred[:, :2], truth)


def test_proximity_weights_and_masked_weighted_mse() -> None:
    np.testing.assert_allclose(proximity_weights(3, 10.0), [10, 1, 10])
    np.testing.assert_allclose(proximity_weights(4, 10.0), [10, 1, 1, 10])
    np.testing.assert_allclose(proximity_weights(5, 10.0), [10, 5.5, 1, 5.5, 10])
    np.testing.assert_allclose(proximity_weights(2, 4.0), [4, 4])
    mask = torch.tensor([[1.0, 0, 0, 1, 0]])  # (B=1, A=5)
    w = masked_proximity_weights(3, mask, end_weight=10.0, mask_scale=2.0)  # (1, 3, 5)
    assert w.shape == (1, 3, 5)
    assert w[0, 0, 0] == 20 and w[0, 0, 1] == 10 and w[0, 1, 3] == 2 and w[0, 1, 2] == 1
    # the loss reads only the action block: errors elsewhere cost nothing
    pred, target = torch.zeros(1, 3, LAYOUT.width), torch.zeros(1, 3, LAYOUT.width)
    pred[0, :, : LAYOUT.tasks] = 5.0
    pred[0, :, LAYOUT.tasks + LAYOUT.actions :] = -3.0
    assert weighted_action_mse(pred, target, w, LAYOUT) == 0
    pred[0, 0, LAYOUT.tasks + 0] = 1.0  # first step, in-task action: weight 20
    pred[0, 1, LAYOUT.tasks + 2] = 2.0  # middle step, other action: weight 1 * 4
    assert weighted_action_mse(pred, target, w, LAYOUT).item() == pytest.approx((20 + 4) / 15)
    with pytest.raises(InputError, match="end_weight"):
        proximity_weights(3, 0.5)


def test_cosine_schedule_matches_its_formula_and_ddim_spans_it() -> None:
    schedule = Schedule(100)
    ab = schedule.alpha_bar()
    f = lambda u: math.cos((u / 100 + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    assert ab[0] == pytest.approx(f(1) / f(0)) and ab[49] == pytest.approx(f(50) / f(0))
    assert np.all(np.diff(ab) < 0) and ab[-1] < 1e-3
    times = ddim_timesteps(schedule, 10)
    assert times[0] == 99 and times[-1] == 0 and len(times) == 10 and np.all(np.diff(times) < 0)
    assert ddim_timesteps(schedule, 100).tolist() == list(range(99, -1, -1))
    with pytest.raises(InputError, match="DDIM steps"):
        ddim_timesteps(schedule, 1)


def test_condition_projection_numpy_and_torch_agree_and_encoding_round_trips() -> None:
    world = make_world(tasks=3, actions=5, per_task=3, obs_dim=4, seed=1)
    plans = sample_plans(world, 6, T, seed=2)
    x0 = encode_plans(plans, LAYOUT)  # (6, 3, 12)
    assert x0.shape == (6, T, LAYOUT.width)
    np.testing.assert_array_equal(decode_actions(x0, LAYOUT), plans.actions)
    np.testing.assert_array_equal(x0[:, 1, LAYOUT.tasks + LAYOUT.actions :], 0)
    np.testing.assert_array_equal(x0[:, -1, LAYOUT.tasks + LAYOUT.actions :], plans.goal)
    task = one_hot(plans.task, 3)
    noisy = np.random.default_rng(0).normal(size=x0.shape).astype(np.float32)
    projected = project(noisy, task, plans.start, plans.goal, LAYOUT)
    np.testing.assert_array_equal(  # the action block is untouched, the rest is the condition
        projected[:, :, LAYOUT.action_slice], noisy[:, :, LAYOUT.action_slice]
    )
    np.testing.assert_array_equal(
        project(projected, task, plans.start, plans.goal, LAYOUT), projected
    )
    from_torch = project_torch(
        *(
            torch.from_numpy(a)
            for a in (noisy[:, :, LAYOUT.action_slice], task, plans.start, plans.goal)
        )
    )
    np.testing.assert_array_equal(from_torch.numpy(), projected)
    # every sampled plan follows its task's chain and the mask table recovers the action sets
    for k, acts in zip(plans.task, plans.actions, strict=True):
        assert world.members[k, acts].all()
        assert all(world.transition[k, a, b] > 0 for a, b in zip(acts[:-1], acts[1:], strict=True))
    many = sample_plans(world, 3000, T, seed=3)
    np.testing.assert_array_equal(task_action_table(many, 3, 5), world.members.astype(np.float32))


def test_latent_interpolation_is_the_convex_mix_of_encoded_frames() -> None:
    torch.manual_seed(0)
    module = LatentInterpolation(obs_dim=4, dim=8, horizon=4)
    np.testing.assert_allclose(
        module.alphas().detach().numpy(), [1 / 8, 3 / 8, 5 / 8, 7 / 8], rtol=1e-6
    )
    with torch.no_grad():
        module.logits.copy_(torch.tensor([-2.0, 0.0, 1.0, 3.0]))
    start, goal = torch.randn(2, 4), torch.randn(2, 4)
    z = module(start, goal)  # (2, 4, 8)
    es, eg = module.encoder(start), module.encoder(goal)
    for j, w in enumerate([-2.0, 0.0, 1.0, 3.0]):
        alpha = 1 / (1 + math.exp(-w))
        torch.testing.assert_close(z[:, j], (1 - alpha) * es + alpha * eg)
    z.sum().backward()  # the interpolation weights are trained end to end
    assert module.logits.grad is not None and torch.all(module.logits.grad != 0)


def test_denoiser_mask_zeroes_out_of_task_actions_and_keeps_samples_independent() -> None:
    table = np.array([[1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 1, 0, 0, 1]], dtype=np.float32)
    torch.manual_seed(0)
    net = perturbed(PlanDenoiser(LAYOUT, T, table, dim=16, depth=2, heads=2), 1)
    b = 4
    task = torch.from_numpy(one_hot(np.array([0, 1, 2, 1]), 3))
    start, goal, noisy = torch.randn(b, 4), torch.randn(b, 4), torch.randn(b, T, LAYOUT.width)
    with torch.no_grad():
        out = net(noisy, torch.tensor([0.0, 10, 50, 99]), task, start, goal)
        alone = net(noisy[2:3], torch.tensor([50.0]), task[2:3], start[2:3], goal[2:3])
    actions = out[:, :, LAYOUT.action_slice]
    allowed = (task @ torch.from_numpy(table))[:, None, :].expand_as(actions)
    assert torch.all(actions[allowed == 0] == 0) and torch.all(actions[allowed == 1] != 0)
    torch.testing.assert_close(out[:, :, : LAYOUT.tasks], task[:, None, :].expand(b, T, 3))
    torch.testing.assert_close(out[:, 0, -4:], start)
    torch.testing.assert_close(out[:, -1, -4:], goal)
    torch.testing.assert_close(alone, out[2:3], atol=1e-6, rtol=1e-5)
    plain = PlanDenoiser(LAYOUT, T, None, dim=16, depth=1, heads=2, interpolation=False)
    assert plain.interpolation is None and plain.blocks[0].cross is None
    with pytest.raises(InputError, match="mask table"):
        PlanDenoiser(LAYOUT, T, table[:2])


class _MixtureOracle:
    """The exact E[x0 | x_t] when the action block of x0 is one of ``plans`` (P, T, A) with equal
    probability (the projected blocks are shared by all candidates, so they cancel)."""

    def __init__(self, plans: np.ndarray, schedule: Schedule) -> None:
        self.plans, self.ab = plans.astype(np.float64), schedule.alpha_bar()

    def run(self, feeds):  # noqa: ANN001, ANN201
        x = feeds["noisy"][:, :, LAYOUT.action_slice].astype(np.float64)  # (B, T, A)
        ab = self.ab[feeds["timestep"].astype(np.int64)][:, None]  # (B, 1)
        dist = ((x[:, None] - np.sqrt(ab)[:, :, None, None] * self.plans[None]) ** 2).sum((2, 3))
        logits = -dist / (2 * (1 - ab))  # (B, P)
        post = np.exp(logits - logits.max(axis=1, keepdims=True))
        post /= post.sum(axis=1, keepdims=True)
        mean = np.einsum("bp,pta->bta", post, self.plans)
        x0 = project(
            np.concatenate([feeds["noisy"][:, :, : LAYOUT.tasks], mean, feeds["noisy"][:, :, -4:]], -1),
            feeds["task"], feeds["start"], feeds["goal"], LAYOUT,
        )  # fmt: skip
        return {"x0": x0.astype(np.float32)}


def test_ddim_with_the_exact_denoiser_lands_on_a_training_plan_at_its_prior_rate() -> None:
    schedule = Schedule(100)
    plans = np.stack([one_hot(np.array([0, 1, 2]), 5), one_hot(np.array([3, 4, 1]), 5)])
    oracle = _MixtureOracle(plans, schedule)
    b = 600
    rng = np.random.default_rng(0)
    task = one_hot(np.zeros(b, dtype=np.int64), 3)
    start, goal = rng.normal(size=(b, 4)), rng.normal(size=(b, 4))
    noise = rng.standard_normal((b, T, LAYOUT.width))
    x0 = ddim_plan(oracle, task, start, goal, noise, schedule, LAYOUT, steps=10)
    actions = decode_actions(x0, LAYOUT)
    first = np.all(actions == [0, 1, 2], axis=1)
    second = np.all(actions == [3, 4, 1], axis=1)
    assert np.all(first | second)  # every sample is one of the two plans
    assert first.mean() == pytest.approx(0.5, abs=0.07)  # at the prior's 50 / 50 rate
    assert np.abs(x0[:, :, LAYOUT.action_slice] - plans[np.where(first, 0, 1)]).max() < 1e-2
    np.testing.assert_allclose(x0[:, 0, -4:], start, rtol=1e-6)  # conditions stay projected
    again = ddim_plan(oracle, task, start, goal, noise, schedule, LAYOUT, steps=10)
    np.testing.assert_array_equal(again, x0)  # eta = 0: deterministic given the noise


def test_bayes_optimal_planner_recovers_plans_from_clean_frames() -> None:
    world = make_world(tasks=3, actions=8, per_task=4, obs_dim=12, noise=0.01, seed=4)
    task, actions, logp = candidate_plans(world, 3)
    assert np.exp(logp).sum() == pytest.approx(1.0)  # the prior over whole plans is normalised
    assert len(actions) == 3 * 4 * 3 * 3  # first action, then 3 choices (no immediate repeat)
    short = sample_plans(world, 50, 2, seed=5)
    k, a = map_plans(world, short.start, short.goal, 2)
    np.testing.assert_array_equal(a, short.actions)  # first cue + goal sum pin a 2-step plan
    np.testing.assert_array_equal(k, short.task)
    plans = sample_plans(world, 50, 3, seed=6)
    k, a = map_plans(world, plans.start, plans.goal, 3)
    # with 3 steps the goal frame cannot order the last two actions: the MAP plan has the same
    # first action and action multiset, and the prior picks the likelier order
    assert np.all(a[:, 0] == plans.actions[:, 0])
    assert np.all(np.sort(a, axis=1) == np.sort(plans.actions, axis=1))
    prior = {(int(t), tuple(p)): lp for t, p, lp in zip(task, actions, logp, strict=True)}
    for kt, truth, got in zip(plans.task, plans.actions, a, strict=True):
        assert prior[(int(kt), tuple(got))] >= prior[(int(kt), tuple(truth))]


def test_onnx_and_torch_plans_agree_under_the_same_noise(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    from edgekit.models.mtid.classifier import TaskClassifier

    table = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 0, 0, 1, 1]], dtype=np.float32)
    torch.manual_seed(0)
    clf = perturbed(TaskClassifier(4, 3, hidden=16), 1, 0.5)
    net = perturbed(PlanDenoiser(LAYOUT, T, table, dim=16, depth=2, heads=2), 2, 0.3)
    rng = np.random.default_rng(0)
    start, goal = (
        rng.normal(size=(7, 4)).astype(np.float32),
        rng.normal(size=(7, 4)).astype(np.float32),
    )
    graphs = mtid_graphs(clf, net, start[:2], goal[:2])
    reference, onnx = eager_runners(graphs), onnx_sessions(graphs, tmp_path)
    schedule = Schedule(100)
    ref = plan(reference, start, goal, T, LAYOUT, schedule, steps=10, seed=5)
    got = plan(onnx, start, goal, T, LAYOUT, schedule, steps=10, seed=5)
    assert len(set(ref.task.tolist())) > 1  # the classifier is not constant
    np.testing.assert_array_equal(got.task, ref.task)
    np.testing.assert_allclose(got.x0, ref.x0, atol=1e-4)
    np.testing.assert_array_equal(got.actions, ref.actions)
    outside = 1 - table[ref.task]  # (B, A): actions outside each plan's task
    assert np.all(ref.x0[:, :, LAYOUT.action_slice] * outside[:, None, :] == 0)  # masked out


def test_training_is_cached_and_learns_the_procedures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    config = MTIDConfig(
        tasks=3, actions=8, per_task=4, obs_dim=8, noise=0.3, concentration=0.2,
        train_plans=600, test_plans=200, dim=16, depth=1, heads=2, steps=150,
        classifier_steps=100, batch=64, lr=3e-3,
    )  # fmt: skip
    first = train_mtid(config)
    again = train_mtid(config)
    assert not first.cached and again.cached
    assert len(list((tmp_path / "mtid").glob("planner-*.pt"))) == 1
    for a, b in zip(
        first.denoiser.state_dict().values(), again.denoiser.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b)
    test = config.data()["test"]
    runners = eager_runners(
        mtid_graphs(again.classifier, again.denoiser, test.start[:2], test.goal[:2])
    )
    result = plan(runners, test.start, test.goal, 3, config.layout(), config.schedule(), 10)
    assert (result.task == test.task).mean() > 0.9
    # chance for an in-task guess is 1/4 per step; the start frame cues the first action
    assert step_accuracy(result.actions, test.actions)[0] > 0.75
    assert mean_accuracy(result.actions, test.actions) > 0.55
    # the card serves the cached model: its graphs run the golden inputs and score the test set
    from edgekit.registry import get_card

    card = get_card("mtid", **asdict(config))
    assert card.train().cached
    runners = eager_runners(card.graphs())
    golden = card.golden_inputs()
    assert runners["task"].run(golden["task"])["logits"].shape == (4, 3)
    assert runners["denoiser"].run(golden["denoiser"])["x0"].shape == (4, 3, 3 + 8 + 8)
    metrics = card.evaluate(runners)
    assert (
        metrics["task_accuracy"] > 0.9 and 0 < metrics["success_rate"] <= metrics["mean_accuracy"]
    )
    same = card.agreement(runners, runners)
    assert same == {"plan_agreement": 1.0, "task_agreement": 1.0, "x0_max_abs_error": 0.0}
    calib = card.calibration_data(limit=5)
    assert len(calib["denoiser"]) == 5 and calib["denoiser"][0]["noisy"].shape == (1, 3, 19)
    # a different ablation is its own cache entry, the classifier is shared
    train_mtid(config.variant(interpolation=False, steps=5))
    assert len(list((tmp_path / "mtid").glob("planner-*.pt"))) == 2
    assert len(list((tmp_path / "mtid").glob("classifier-*.pt"))) == 1


def test_bad_inputs_are_typed_errors() -> None:
    with pytest.raises(InputError, match="horizon"):
        MTIDConfig(horizon=1)
    with pytest.raises(InputError, match="ddim_steps"):
        MTIDConfig(ddim_steps=500)
    with pytest.raises(InputError, match="not MTIDConfig fields"):
        MTIDConfig().variant(epochs=3)
    with pytest.raises(InputError, match="per_task"):
        make_world(actions=4, per_task=6)
    with pytest.raises(InputError, match="indices"):
        one_hot(np.array([0, 5]), 5)
    with pytest.raises(InputError, match="start and goal"):
        plan({}, np.zeros((2, 3)), np.zeros((2, 3)), T, LAYOUT, Schedule())
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="MTIDConfig"):
        get_card("mtid", epochs=3)


def test_most_common_plan_is_the_mode_of_each_tasks_training_plans() -> None:
    from edgekit.models.mtid.experiment import most_common_plans
    from edgekit.models.mtid.tasks import Plans

    actions = np.array([[1, 2], [1, 2], [3, 4], [5, 6], [5, 6], [7, 0]])
    task = np.array([0, 0, 0, 1, 1, 1])
    obs = np.zeros((6, 2), np.float32)
    plans = Plans(task, actions, obs, obs)
    np.testing.assert_array_equal(most_common_plans(plans, 3), [[1, 2], [5, 6], [1, 2]])


def test_study_summarises_seeds_with_paired_differences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgekit.models.mtid import experiment

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    config = MTIDConfig(
        tasks=3, actions=8, per_task=4, obs_dim=8, noise=0.3, concentration=0.2,
        train_plans=300, test_plans=60, dim=8, depth=1, heads=2, steps=5,
        classifier_steps=5, batch=32, seed=3,
    )  # fmt: skip
    report = experiment.run_study(config, show_progress=False, seeds=2)
    assert report["seeds"] == [3, 4] and len(report["per_seed"]) == 2
    rows = report["rows"]
    assert list(rows) == [*experiment.VARIANTS, experiment.TRIVIAL, experiment.ORACLE]
    # MTID is paired with the PDPP-style planner, every other planner with MTID
    assert rows["MTID"]["vs"] == "none (PDPP-style)" and rows["none (PDPP-style)"]["diff"] is None
    assert {rows[n]["vs"] for n in rows if n not in ("MTID", "none (PDPP-style)")} == {"MTID"}
    for name, row in rows.items():
        per_seed = [seed_rows[name]["success_rate"] for seed_rows in report["per_seed"]]
        assert row["success_rate_seeds"] == per_seed
        assert row["success_rate"] == pytest.approx(np.mean(per_seed))
        assert row["success_rate_se"] == pytest.approx(np.std(per_seed, ddof=1) / math.sqrt(2))
        if row["vs"] is not None:
            ref = [seed_rows[row["vs"]]["success_rate"] for seed_rows in report["per_seed"]]
            d = np.subtract(per_seed, ref)
            assert row["diff"]["diff"] == pytest.approx(d.mean())
            assert row["diff"]["wins"] == int((d > 0).sum())
    # the ceiling knows the world: it plans at least as well as the trivial planner
    assert rows["Bayes-optimal"]["success_rate"] >= rows["most common plan"]["success_rate"]
    assert len(report["alphas"]) == 3 and len(report["alphas_per_seed"]) == 2
    experiment.print_table(report)
    printed = capsys.readouterr().out
    assert "2 seeds (3..4)" in printed and "most common plan" in printed
    assert "(reference)" in printed
    with pytest.raises(InputError, match="seeds"):
        experiment.run_study(config, show_progress=False, seeds=0)
