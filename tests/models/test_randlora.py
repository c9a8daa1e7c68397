"""RandLoRA: the update starts at zero, is full rank, merges exactly, counts as stated.

Layers are small (tens of units); the full study is ``edgekit eval randlora``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.randlora.layers import (
    RandLoRALinear,
    RandomBases,
    apply_randlora,
    merge_adapters,
    trainable_parameters,
)
from edgekit.models.randlora.lora import LoRALinear, apply_lora
from edgekit.models.randlora.rank import effective_rank, numerical_rank

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    # 24 -> 40 (out > in), 40 -> 40 (square, shares nothing with the first), 40 -> 40 (shares
    # bases with the second), 40 -> 6 (out < in: the update is built transposed)
    return nn.Sequential(
        nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 40), nn.Tanh(), nn.Linear(40, 40),
        nn.ReLU(), nn.Linear(40, 6),
    )  # fmt: skip


def _randomise(model: nn.Module, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_update_starts_at_exactly_zero(kind: str) -> None:
    model = _mlp()
    x = torch.randn(5, 24)
    before = model(x)
    wrapped = apply_randlora(model, rank=4, kind=kind)
    for layer in wrapped.values():
        assert torch.count_nonzero(layer.delta_weight()) == 0
    assert torch.equal(model(x), before)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize(("out_f", "in_f", "rank"), [(40, 24, 4), (6, 40, 4), (30, 30, 7)])
def test_update_is_full_rank_with_few_parameters(
    kind: str, out_f: int, in_f: int, rank: int
) -> None:
    layer = RandLoRALinear(
        nn.Linear(in_f, out_f),
        RandomBases(max(out_f, in_f), min(out_f, in_f), rank, seed=3, kind=kind),
        alpha=rank,
    )
    _randomise(layer)
    delta = layer.delta_weight()
    assert delta.shape == (out_f, in_f)
    assert numerical_rank(delta) == min(out_f, in_f)
    # fewer trained numbers than the update has entries, unlike full fine-tuning
    assert layer.trainable_count() < out_f * in_f


def test_lora_update_rank_is_bounded_by_its_rank() -> None:
    layer = LoRALinear(nn.Linear(24, 40), rank=3, alpha=3)
    assert torch.count_nonzero(layer.delta_weight()) == 0
    _randomise(layer)
    assert numerical_rank(layer.delta_weight()) == 3
    assert layer.trainable_count() == 3 * (24 + 40)


@pytest.mark.parametrize("method", ["randlora-dense", "randlora-sparse", "lora"])
def test_merge_equals_the_wrapped_forward(method: str) -> None:
    model = _mlp()
    keys = set(model.state_dict())
    if method == "lora":
        apply_lora(model, rank=2)
    else:
        apply_randlora(model, rank=5, kind=method.split("-")[1], seed=11)
    _randomise(model)
    x = torch.randn(16, 24)
    wrapped_out = model(x)
    merged = merge_adapters(model)
    assert not any(isinstance(m, (RandLoRALinear, LoRALinear)) for m in merged.modules())
    assert set(merged.state_dict()) == keys  # the plain architecture, nothing extra to ship
    torch.testing.assert_close(merged(x), wrapped_out, atol=1e-4, rtol=1e-4)


def test_parameter_count_is_n_times_r_plus_m() -> None:
    model = _mlp()
    wrapped = apply_randlora(model, rank=8)
    # (out, in) -> N = ceil(m / r), count N (r + m)
    expected = {
        "0": math.ceil(24 / 8) * (8 + 24),  # 3 * 32 = 96
        "2": math.ceil(40 / 8) * (8 + 40),  # 5 * 48 = 240
        "4": 240,
        "6": math.ceil(6 / 8) * (8 + 6),  # 1 * 14 = 14
    }
    assert {name: layer.trainable_count() for name, layer in wrapped.items()} == expected
    for layer in wrapped.values():
        assert layer.trainable_count() == sum(
            p.numel() for p in layer.parameters() if p.requires_grad
        )
    assert trainable_parameters(model) == 96 + 240 + 240 + 14


def test_bases_are_shared_seeded_and_not_in_the_state_dict() -> None:
    model = _mlp()
    wrapped = apply_randlora(model, rank=4, seed=5)
    assert wrapped["2"].bases is wrapped["4"].bases  # same shape, one set of bases
    assert wrapped["0"].bases is not wrapped["2"].bases
    state = model.state_dict()
    assert not any(".bases." in k for k in state)
    assert int(state["2.basis_seed"]) == 5
    _randomise(model)
    x = torch.randn(4, 24)
    out = model(x)

    again = _mlp()
    apply_randlora(again, rank=4, seed=5)
    again.load_state_dict(model.state_dict())  # bases regenerated from the seed
    assert torch.equal(again(x), out)

    other = _mlp()
    apply_randlora(other, rank=4, seed=6)
    with pytest.raises(InputError, match="seed 5"):
        other.load_state_dict(model.state_dict())


def test_sparse_bases_are_ternary_with_the_stated_sparsity() -> None:
    bases = RandomBases(200, 100, rank=10, seed=0, kind="sparse", sparsity=3.0)
    values = torch.cat([bases.a.flatten(), bases.b.flatten()])
    assert torch.unique(values).tolist() == pytest.approx([-math.sqrt(3), 0.0, math.sqrt(3)])
    zeros = float((values == 0).float().mean())
    assert abs(zeros - 2 / 3) < 0.02
    dense = RandomBases(200, 100, rank=10, seed=0)
    assert abs(float(dense.a.var()) - 1.0) < 0.05  # unit-variance entries in both kinds


def test_only_the_scalings_train() -> None:
    model = _mlp()
    wrapped = apply_randlora(model, rank=4)
    _randomise(model)
    model(torch.randn(8, 24)).square().sum().backward()
    for layer in wrapped.values():
        assert layer.base.weight.grad is None and layer.base.bias.grad is None
        assert layer.lam.grad is not None and layer.gamma.grad is not None
        assert not layer.bases.a.requires_grad


def test_bad_arguments_are_typed_errors() -> None:
    with pytest.raises(InputError, match="rank"):
        apply_randlora(_mlp(), rank=0)
    with pytest.raises(InputError, match="no nn.Linear"):
        apply_randlora(nn.Sequential(nn.ReLU()))
    with pytest.raises(InputError, match="kind"):
        RandomBases(8, 4, 2, kind="gaussian")
    with pytest.raises(InputError, match="do not fit"):
        RandLoRALinear(nn.Linear(4, 8), RandomBases(9, 4, 2), alpha=2)


def test_numerical_and_effective_rank() -> None:
    assert numerical_rank(torch.diag(torch.tensor([3.0, 1.0, 0.0]))) == 2
    assert numerical_rank(torch.zeros(3, 4)) == 0
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)
    assert effective_rank(torch.outer(torch.ones(4), torch.ones(6))) == pytest.approx(1.0)


def test_randlora_adapts_the_pretrained_mlp_where_rank_one_lora_falls_short() -> None:
    from edgekit.models.randlora.train import AdaptConfig, adapt

    rand = adapt(AdaptConfig("randlora", rank=32, target="first", lr=1e-2, steps=150))
    lora = adapt(AdaptConfig("lora", rank=1, target="first", lr=1e-2, steps=150))
    assert rand.trainable == 2 * (32 + 64) and lora.trainable == 64 + 128
    assert rand.test_accuracy > 0.8
    assert rand.test_accuracy > lora.test_accuracy + 0.1


def test_summary_is_computed_from_the_per_seed_accuracies() -> None:
    from edgekit.models.randlora.experiment import summarise

    tests, lora = [0.90, 0.80, 0.85, 0.95, 0.75], [0.70, 0.80, 0.90, 0.85, 0.70]
    summary = summarise(tests, before=0.10, against=lora)
    assert summary["mean"] == pytest.approx(0.85)
    assert summary["se"] == pytest.approx(0.0790569415 / math.sqrt(5))  # sample SD / sqrt n
    # against the model before adaptation: the same number on every seed, so the SE is the
    # accuracy's own
    before = summary["vs_before"]
    assert before["diff"] == pytest.approx(0.75) and before["diff_se"] == pytest.approx(
        summary["se"]
    )
    assert before["wins"] == 5 and before["shown"]
    # against LoRA: paired per seed, differences (0.2, 0, -0.05, 0.1, 0.05)
    paired = summary["vs_lora"]
    assert paired["diff"] == pytest.approx(0.06)
    assert paired["diff_se"] == pytest.approx(0.0961769203 / math.sqrt(5))
    assert paired["wins"] == 3  # a tie is not a win
    assert not paired["shown"]  # 0.06 < 2 x 0.043
    assert summarise(tests, before=0.10)["vs_lora"] is None


@pytest.mark.study
def test_experiment_writes_report_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from edgekit.models.randlora.experiment import StudyConfig, experiment

    assert StudyConfig().seeds == (0, 1, 2, 3, 4)
    study = StudyConfig(
        ranks={"first": (32,)}, kinds=("dense",), lrs=(1e-2,), seeds=(0, 1), steps=20
    )
    report = experiment(tmp_path, show_progress=False, study=study)
    methods = {(r["method"], r["kind"]) for r in report["rows"]}
    assert methods == {("full", ""), ("randlora", "dense"), ("lora", "")}
    lora = next(r for r in report["rows"] if r["method"] == "lora")
    rand = next(r for r in report["rows"] if r["method"] == "randlora")
    assert lora["trainable"] >= rand["trainable"]  # matched: LoRA never has fewer parameters
    assert lora["update_rank"] <= lora["rank"] < rand["update_rank"]
    # the summary over seeds is computed from the per-seed test accuracies, paired by seed
    unadapted = report["baselines"]["unadapted_accuracy"]
    for row in report["rows"]:
        assert len(row["test_accuracies"]) == 2
        assert row["summary"]["mean"] == pytest.approx(sum(row["test_accuracies"]) / 2)
        assert row["summary"]["vs_before"]["diff"] == pytest.approx(
            row["summary"]["mean"] - unadapted
        )
    assert rand["lora_rank"] == lora["rank"] and lora["summary"]["vs_lora"] is None
    diffs = [a - b for a, b in zip(rand["test_accuracies"], lora["test_accuracies"], strict=True)]
    assert rand["summary"]["vs_lora"]["diff"] == pytest.approx(sum(diffs) / 2)
    assert rand["summary"]["vs_lora"]["wins"] == sum(d > 0 for d in diffs)
    printed = capsys.readouterr().out
    assert "before adaptation" in printed and f"{unadapted:.3f}" in printed
    assert f"{rand['summary']['mean']:.3f} ± {rand['summary']['se']:.3f}" in printed
    assert "q=1: " in printed  # the RandLoRA row names the LoRA it is compared with
    assert json.loads((tmp_path / "report.json").read_text())["rows"][0]["summary"]
    assert (tmp_path / "randlora.png").read_bytes()[:4] == b"\x89PNG"


def test_card_graph_is_the_merged_plain_network() -> None:
    from edgekit.models.randlora.train import DigitMLP
    from edgekit.registry import get_card

    card = get_card("randlora")
    (graph,) = card.graphs()
    assert not any(isinstance(m, (RandLoRALinear, LoRALinear)) for m in graph.module.modules())
    assert set(graph.module.state_dict()) == set(DigitMLP().state_dict())
    assert card.train().trainable == 2788  # RandLoRA r=8 on all three layers, not 26122
    logits = graph.module(graph.example_inputs["pixels"])
    assert logits.shape == (2, 10)
    with pytest.raises(InputError, match="not AdaptConfig fields"):
        get_card("randlora", rnak=4)
