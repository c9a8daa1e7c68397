"""HiSSD: expectile / advantage / contrastive maths, entity attention symmetries, the spread
task, cached training, and the exported policy (dynamic entity axis) against torch."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import perturbed

from edgekit.errors import InputError
from edgekit.models.hissd.attention import EntityAttention, EntityEncoder, attend
from edgekit.models.hissd.data import collect
from edgekit.models.hissd.env import (
    STEP,
    Spread,
    observe,
    optimal_assignment,
    team_distance,
    toward,
)
from edgekit.models.hissd.evaluate import rollout
from edgekit.models.hissd.graphs import policy_graph
from edgekit.models.hissd.losses import advantage_weights, contrastive_loss, expectile_loss
from edgekit.models.hissd.networks import MixedValue, SkillPolicy
from edgekit.models.hissd.train import HiSSDConfig, train_policy
from edgekit.runtimes.torch import eager_runners

torch.set_num_threads(1)

TINY = {"episodes": 12, "horizon": 6, "steps": 12, "batch": 8, "dim": 16, "queue": 32}


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-6) -> None:
    """Elementwise |a - b| <= atol + 1e-5 |b| (numpy; torch.testing's first call is slow)."""
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=atol, rtol=1e-5)


def _perturbed(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    return perturbed(module, seed, scale=0.2)


# ---- losses --------------------------------------------------------------------------------
def test_expectile_loss_by_hand_and_its_minimiser_is_the_expectile() -> None:
    diff = torch.tensor([2.0, -1.0, 0.5, -3.0])
    # 0.9 * 4 + 0.1 * 1 + 0.9 * 0.25 + 0.1 * 9 = 4.825, mean over 4
    assert float(expectile_loss(diff, 0.9)) == pytest.approx(4.825 / 4)
    assert float(expectile_loss(diff, 0.5)) == pytest.approx(0.5 * (4 + 1 + 0.25 + 9) / 4)
    # the tau-expectile m of samples y solves sum |tau - 1[y < m]| (y - m) = 0 (bisection here)
    y = np.random.default_rng(0).exponential(size=500)
    lo, hi = y.min(), y.max()
    for _ in range(80):
        m = (lo + hi) / 2
        g = np.sum(np.where(y < m, 0.1, 0.9) * (y - m))
        lo, hi = (m, hi) if g > 0 else (lo, m)
    assert m > np.mean(y)  # tau = 0.9 sits above the mean
    pred = torch.tensor(m, dtype=torch.float64, requires_grad=True)
    expectile_loss(torch.from_numpy(y) - pred, 0.9).backward()
    assert abs(float(pred.grad)) < 1e-8
    with pytest.raises(InputError, match="tau"):
        expectile_loss(diff, 1.0)


def test_advantage_weights_are_capped_exponentials_without_gradient() -> None:
    td = torch.tensor([-0.2, 0.0, 0.1, 0.5, 1.0], requires_grad=True)
    w = advantage_weights(td, beta=10.0, cap=100.0)
    expected = [np.exp(-2.0), 1.0, np.exp(1.0), 100.0, 100.0]  # exp(5) = 148 is capped
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
    assert not w.requires_grad
    with pytest.raises(InputError, match="beta"):
        advantage_weights(td, beta=0.0)


def test_contrastive_loss_matches_the_supervised_infonce_formula() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    k = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, -1.0], [-1.0, 0.0]])
    ql, kl = torch.tensor([0, 1, 5]), torch.tensor([0, 1, 0, 1])
    t = 0.5
    qn = q.numpy() / np.linalg.norm(q.numpy(), axis=1, keepdims=True)
    s = np.exp(qn @ k.numpy().T / t)  # keys are unit already
    # query 0: positives keys 0, 2; query 1: keys 1, 3; query 2 has no positive: skipped
    expected = np.mean(
        [-np.log((s[0, 0] + s[0, 2]) / s[0].sum()), -np.log((s[1, 1] + s[1, 3]) / s[1].sum())]
    )
    assert float(contrastive_loss(q, k, ql, kl, t)) == pytest.approx(expected, rel=1e-5)
    # aligned same-task embeddings give a lower loss than swapped ones
    aligned = contrastive_loss(k[:2], k[:2], torch.tensor([0, 1]), torch.tensor([0, 1]), 0.1)
    swapped = contrastive_loss(k[:2], k[:2], torch.tensor([1, 0]), torch.tensor([0, 1]), 0.1)
    assert float(aligned) < float(swapped)
    with pytest.raises(InputError, match="positive"):
        contrastive_loss(q, k, torch.tensor([7, 8, 9]), kl)


# ---- entity attention ---------------------------------------------------------------------
def test_attend_matches_a_numpy_softmax_attention() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=s) for s in ((1, 1, 2, 4), (1, 1, 3, 4), (1, 1, 3, 4)))
    scores = q[0, 0] @ k[0, 0].T / 2.0  # sqrt(4)
    weights = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    got = attend(*(torch.from_numpy(a) for a in (q, k, v)))[0, 0].numpy()
    np.testing.assert_allclose(got, weights @ v[0, 0], rtol=1e-10)


def test_entity_attention_is_permutation_equivariant_and_count_independent() -> None:
    torch.manual_seed(0)
    block = _perturbed(EntityAttention(16, 2), 1)
    x = torch.randn(3, 7, 16)
    perm = torch.randperm(7)
    _close(block(x[:, perm]), block(x)[:, perm])
    encoder = _perturbed(EntityEncoder(5, 16, 2), 2)
    ent = torch.randn(3, 7, 5)
    tokens, h = encoder(ent)
    others = torch.cat([torch.zeros(1, dtype=torch.long), 1 + torch.randperm(6)])
    tokens_p, h_p = encoder(ent[:, others])
    _close(h_p, h)  # order of other rows is irrelevant
    _close(tokens_p, tokens[:, others])
    # duplicating the whole set (a team twice as large, same layout) leaves h unchanged
    _, h_dup = encoder(torch.cat([ent, ent], dim=1))
    _close(h_dup, h)
    assert not torch.allclose(encoder(ent[:, :5])[1], h)  # but the rows do matter


def test_policy_acts_for_any_team_size_and_value_mixer_is_agent_symmetric() -> None:
    torch.manual_seed(0)
    for mode in ("hissd", "common", "bc"):
        policy = _perturbed(SkillPolicy(mode, 5, 5, dim=16), 3)
        for n in (2, 3, 6):
            x = torch.from_numpy(Spread.reset(2, n, np.random.default_rng(n)).observe())
            assert policy(x.flatten(0, 1)).shape == (2 * n, 5)
    value = _perturbed(MixedValue(16), 4)
    h = torch.randn(4, 5, 16)
    perm = torch.randperm(5)
    v, per_agent = value(h)
    v_p, per_agent_p = value(h[:, perm])
    _close(v_p, v)
    _close(per_agent_p, per_agent[:, perm])
    # the mix is convex: equal agent values c give V_tot = c + b(state)
    same = h[:, :1].expand(-1, 5, -1)
    v_same, per_same = value(same)
    bias = value.bias(same.mean(dim=1))[:, 0]
    _close(v_same, per_same[:, 0] + bias)
    with pytest.raises(InputError, match="mode"):
        SkillPolicy("oracle", 5, 5)


# ---- the spread task -------------------------------------------------------------------------
def test_observation_rows_and_progress_reward_by_hand() -> None:
    agents = np.array([[[0.0, 0.0], [0.5, -0.5]]])
    landmarks = np.array([[[0.2, 0.0], [0.9, -0.5]]])
    obs = observe(agents, landmarks)
    assert obs.shape == (1, 2, 4, 5)
    np.testing.assert_allclose(obs[0, 1, 0], [1, 0, 0, 0.5, -0.5])  # agent 1 itself
    np.testing.assert_allclose(obs[0, 1, 1], [0, 1, 0, -0.5, 0.5])  # agent 0 seen from 1
    np.testing.assert_allclose(obs[0, 0, 3], [0, 0, 1, 0.9, -0.5])  # landmark 1 seen from 0
    # landmark 0 nearest agent 0 at 0.2, landmark 1 nearest agent 1 at 0.4
    assert team_distance(agents, landmarks)[0] == pytest.approx(0.3)
    state = Spread(agents.copy(), landmarks)
    r = state.step(np.array([[1, 1]]))  # both +x: distances 0.1 and 0.3, D = 0.2
    assert r[0] == pytest.approx((0.3 - 0.2) / STEP)
    assert state.coverage()[0] == pytest.approx(0.5)  # only landmark 0 within 0.15
    with pytest.raises(InputError, match="actions"):
        state.step(np.array([[1, 9]]))
    with pytest.raises(InputError, match="agent count"):
        Spread.reset(4, 1, np.random.default_rng(0))


def test_optimal_assignment_and_moves_toward_targets() -> None:
    rng = np.random.default_rng(3)
    agents, landmarks = rng.uniform(-1, 1, (5, 4, 2)), rng.uniform(-1, 1, (5, 4, 2))
    got = optimal_assignment(agents, landmarks)
    for b in range(5):
        costs = {
            p: sum(np.linalg.norm(agents[b, i] - landmarks[b, p[i]]) for i in range(4))
            for p in itertools.permutations(range(4))
        }
        assert tuple(got[b]) == min(costs, key=costs.get)
    moves = toward(
        np.zeros((1, 4, 2)), np.array([[[0.5, 0.1], [-0.5, 0.1], [0.1, -0.6], [0.02, 0.0]]])
    )
    assert moves.tolist() == [[1, 2, 4, 0]]


def test_mixed_data_ranks_behaviours_and_expert_rollouts_cover() -> None:
    data = collect(3, 30, 20, (0.4, 0.3, 0.3), seed=0)
    assert data.obs.shape == (600, 3, 6, 5) and data.actions.shape == (600, 3)
    means = [data.reward[data.behaviour == k].mean() for k in range(3)]
    assert means[0] > means[1] > means[2]  # expert > nearest > random progress per step
    expert = rollout("expert", 4, 40, 25, seed=0)
    nearest = rollout("nearest", 4, 40, 25, seed=0)
    assert expert["coverage"] > 0.95 and nearest["coverage"] < expert["coverage"]
    assert expert["distance"] < nearest["distance"]
    with pytest.raises(InputError, match="mix"):
        collect(3, 4, 4, (0.5, 0.5, 0.5), seed=0)


# ---- training and export -------------------------------------------------------------------
class _Nearest:
    """A policy runner: one-hot logits toward the nearest landmark row (or "stay" everywhere)."""

    def __init__(self, move: bool = True) -> None:
        self.move = move

    def run(self, feeds):  # noqa: ANN001, ANN201
        x = np.asarray(feeds["entities"])  # (B, E, 5): flags self/agent/landmark, dx, dy
        logits = np.zeros((len(x), 5), np.float32)
        if not self.move:
            logits[:, 0] = 1.0
            return {"logits": logits}
        offsets = np.where(x[:, :, 2:3] > 0.5, x[:, :, 3:], np.inf)
        target = offsets[np.arange(len(x)), np.linalg.norm(offsets, axis=2).argmin(axis=1)]
        actions = toward(np.zeros((1, len(x), 2)), target[None])[0]
        logits[np.arange(len(x)), actions] = 1.0
        return {"logits": logits}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hissd-cache")


def test_training_is_cached_and_reloads_the_same_weights(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(cache))
    config = HiSSDConfig(**TINY)
    first = train_policy(config, "hissd")
    again = train_policy(config, "hissd")
    assert not first.cached and again.cached
    assert len(list((cache / "hissd").glob("hissd-*.pt"))) == 1
    for a, b in zip(
        first.policy.state_dict().values(), again.policy.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b)
    # every loss term is logged at step 0 and at the last step (11 of 12)
    assert all(len(first.history[k]) == 2 for k in ("ce", "value", "plan", "recon", "contrast"))
    assert first.weights is not None and again.weights == first.weights
    # the advantage weights of the planner's weighted likelihood favour the better behaviours'
    # transitions (measured: expert 56, nearest 43, random 19; trained on data whose rewards
    # are shuffled between transitions: 52, 33, 31)
    w = first.weights
    assert w["expert"] > w["nearest"] > w["random"] and w["expert"] > 2 * w["random"], w
    assert first.history["ce"][-1] < first.history["ce"][0]


def test_exported_policy_with_dynamic_entities_matches_torch(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.registry import get_card
    from edgekit.runtimes import RuntimeOptions, get_runtime

    monkeypatch.setenv("EDGEKIT_CACHE", str(cache))
    card = get_card("hissd", **TINY)
    (graph,) = card.graphs()
    assert graph.example_inputs["entities"].shape[1] == 6
    onnx = get_runtime("onnxruntime").load(
        export_onnx(graph, tmp_path / "policy.onnx", opset=17), "cpu", RuntimeOptions(threads=1)
    )
    reference = eager_runners([graph])
    for n in (2, 5, 7):  # E = 4, 10, 14: none is the export size
        x = Spread.reset(3, n, np.random.default_rng(n)).observe().reshape(3 * n, 2 * n, 5)
        want = reference["policy"].run({"entities": x})["logits"]
        np.testing.assert_allclose(onnx.run({"entities": x})["logits"], want, atol=1e-5)
    scores = card.agreement(reference, {"policy": onnx})
    assert scores["action_agreement"] == 1.0 and scores["max_logit_abs_error"] < 1e-4
    # evaluate scores what the runner's actions achieve: a runner heading for each agent's
    # nearest landmark (from its own entity rows) gets the "nearest" behaviour's coverage and
    # distance exactly, one that never moves covers almost nothing and stays far away
    heading = card.evaluate({"policy": _Nearest()})
    nearest = [rollout("nearest", n, 64, card.config.horizon, 100) for n in (5, 6)]
    assert card.config.test_agents == (5, 6)
    assert heading["coverage"] == pytest.approx(np.mean([r["coverage"] for r in nearest]))
    assert heading["distance"] == pytest.approx(np.mean([r["distance"] for r in nearest]))
    still = card.evaluate({"policy": _Nearest(move=False)})
    assert heading["coverage"] > still["coverage"] + 0.3
    assert still["distance"] > heading["distance"]
    golden = card.golden_inputs()["policy"]["entities"]
    assert golden.shape == (5, 10, 5)
    assert policy_graph(graph.module, golden).io_specs()[0][0].shape == ("batch", "entities", 5)


def test_bad_card_options_are_typed_errors() -> None:
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="HiSSDConfig"):
        get_card("hissd", epochs=3)
    with pytest.raises(InputError, match="agent count"):
        HiSSDConfig(test_agents=(12,))


def test_study_reports_mean_se_and_paired_differences_over_seeds(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from edgekit.models.hissd.experiment import AGAINST, SEEDS, SUMMARIES, print_table, run_study

    assert SEEDS == (0, 1, 2, 3, 4)
    monkeypatch.setenv("EDGEKIT_CACHE", str(cache))
    seeds = (0, 1, 2)
    report = run_study(HiSSDConfig(**TINY), seeds=seeds, episodes=4, show_progress=False)
    rows = report["rows"]
    assert "random (data)" in rows and set(AGAINST) <= set(rows)
    for row in rows.values():
        for key in SUMMARIES:
            values = row[f"{key}_seeds"]
            assert len(values) == len(seeds)
            assert row[key] == pytest.approx(np.mean(values))
            assert row[f"{key}_se"] == pytest.approx(np.std(values, ddof=1) / np.sqrt(3))
    # HiSSD minus each baseline, paired seed by seed; "better" counts lower distances as wins
    hissd = rows["HiSSD"]
    assert set(report["paired"]) == {f"HiSSD - {other}" for other in AGAINST}
    for other in AGAINST:
        for key in SUMMARIES:
            got = report["paired"][f"HiSSD - {other}"][key]
            d = np.subtract(hissd[f"{key}_seeds"], rows[other][f"{key}_seeds"])
            assert got["diff"] == pytest.approx(d.mean())
            assert got["diff_se"] == pytest.approx(np.std(d, ddof=1) / np.sqrt(3))
            assert got["better"] == int((d < 0 if key.endswith("distance") else d > 0).sum())
            assert got["shown"] == (abs(d.mean()) > 2 * got["diff_se"])
    print_table(report)
    printed = capsys.readouterr().out
    assert "random (data)" in printed and "±" in printed
    assert "HiSSD - BC" in printed and "HiSSD - random (data)" in printed
