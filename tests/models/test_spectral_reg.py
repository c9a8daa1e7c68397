"""Spectral regularisation: the power-iteration estimate matches torch.linalg (Linear and conv),
the penalty has the stated form and drives sigma_max to 1, the continual loop runs.

Sizes are small; the 50-task study is ``edgekit eval spectral-reg``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.spectral_reg.regularizer import (
    L2InitRegularizer,
    L2Regularizer,
    SpectralRegularizer,
    make_regularizer,
    matrix_view,
    spectral_norm_estimate,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _exact(weight: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(weight.detach().reshape(weight.shape[0], -1), ord=2))


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.conv2 = nn.Conv2d(8, 6, (3, 2), bias=False)
        self.conv1d = nn.Conv1d(4, 5, 3)
        self.fc = nn.Linear(20, 7)


@pytest.mark.parametrize(
    "shape", [(40, 30), (30, 40), (8, 3, 3, 3), (6, 8, 3, 2), (5, 4, 3), (4, 2, 3, 3, 3)]
)
def test_estimate_matches_torch_linalg(shape: tuple[int, ...]) -> None:
    weight = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    # (40, 30) has sigma_2 / sigma_1 = 0.998: power iteration needs thousands of steps there
    estimate = float(spectral_norm_estimate(weight, iterations=3000))
    assert estimate == pytest.approx(_exact(weight), rel=1e-4)


def test_conv_kernel_is_read_as_out_by_in_times_kernel() -> None:
    assert matrix_view(torch.zeros(8, 3, 5, 4)).shape == (8, 60)
    assert matrix_view(torch.zeros(7, 9)).shape == (7, 9)
    with pytest.raises(InputError, match="2 dims"):
        matrix_view(torch.zeros(5))


def test_persistent_vectors_converge_one_step_per_call() -> None:
    model = _ConvNet()
    reg = SpectralRegularizer(model, iterations=1)
    assert [n for n, _ in reg.layers] == ["conv1", "conv2", "conv1d", "fc"]
    for _ in range(400):
        sigmas = reg.sigmas()
    for name, module in reg.layers:
        assert float(sigmas[name].detach()) == pytest.approx(_exact(module.weight), rel=1e-4)
    # the state round-trips: a fresh regulariser loaded from it is already converged
    fresh = SpectralRegularizer(model, iterations=1, seed=9)
    fresh.load_state_dict(reg.state_dict())
    for name, module in fresh.layers:
        assert float(fresh.sigmas()[name].detach()) == pytest.approx(
            _exact(module.weight), rel=1e-4
        )
    with pytest.raises(InputError, match="lacks vectors"):
        fresh.load_state_dict({})


def test_penalty_is_sum_of_squared_sigma_power_gaps_plus_bias_norms() -> None:
    model = _ConvNet()
    reg = SpectralRegularizer(model, exponent=2.0, iterations=500)
    expected = sum((_exact(m.weight) ** 2 - 1.0) ** 2 for _, m in reg.layers)
    expected += sum(
        float(m.bias.detach().pow(2).sum()) for _, m in reg.layers if m.bias is not None
    )
    assert float(reg.penalty().detach()) == pytest.approx(expected, rel=1e-3)
    no_bias = SpectralRegularizer(model, exponent=1.0, iterations=500, bias_coeff=0.0)
    expected_k1 = sum((_exact(m.weight) - 1.0) ** 2 for _, m in no_bias.layers)
    assert float(no_bias.penalty().detach()) == pytest.approx(expected_k1, rel=1e-3)


def test_minimising_the_penalty_brings_every_sigma_max_to_one() -> None:
    model = _ConvNet()
    with torch.no_grad():
        model.conv1.weight.mul_(6.0)  # sigma_max well above 1
        model.fc.weight.mul_(0.1)  # and one well below
    reg = SpectralRegularizer(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(400):
        optimizer.zero_grad()
        reg.penalty().backward()
        optimizer.step()
    for _, module in reg.layers:
        assert _exact(module.weight) == pytest.approx(1.0, abs=0.03)
        if module.bias is not None:
            assert float(module.bias.detach().abs().max()) < 0.05


def test_l2_baselines() -> None:
    model = nn.Linear(3, 2)
    with torch.no_grad():
        assert float(L2Regularizer(model).penalty()) == pytest.approx(
            float(model.weight.pow(2).sum() + model.bias.pow(2).sum())
        )
        to_init = L2InitRegularizer(model)
        assert float(to_init.penalty()) == 0.0
        model.weight.add_(0.5)
        assert float(to_init.penalty()) == pytest.approx(6 * 0.25)
        assert float(make_regularizer("none", model).penalty()) == 0.0
    with pytest.raises(InputError, match="unknown regulariser"):
        make_regularizer("dropout", model)
    with pytest.raises(InputError, match="no Linear or Conv"):
        SpectralRegularizer(nn.ReLU())


def test_continual_run_records_every_task() -> None:
    from edgekit.models.spectral_reg.continual import ContinualConfig, run_continual, task_stream

    config = ContinualConfig(tasks=3, steps=6, samples=64, batch_size=32)
    result = run_continual(config)
    assert len(result.train_accuracy) == len(result.first_epoch_accuracy) == 3
    assert len(result.sigmas) == 3 and set(result.sigmas[0]) == {"net.0", "net.2", "net.4"}
    # the last records are the final network's: its accuracy on the last task's digits and
    # labels, and its layers' exact sigma_max; random labels hold no digits out
    last = task_stream(config)[-1]
    with torch.no_grad():
        hits = result.model(last.x).argmax(dim=1) == last.y
    assert result.train_accuracy[-1] == pytest.approx(float(hits.float().mean()))
    for name, module in result.model.named_modules():
        if name in result.sigmas[-1]:
            assert result.sigmas[-1][name] == pytest.approx(_exact(module.weight), rel=1e-5)
            assert result.sigmas[-1][name] != pytest.approx(result.init_sigmas[name], rel=1e-3)
    assert all(math.isnan(a) for a in result.test_accuracy)
    with pytest.raises(InputError, match="regularizer"):
        ContinualConfig(regularizer="dropout")


def test_heldout_accuracy_is_measured_on_digits_never_trained_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.models.spectral_reg import continual
    from edgekit.models.spectral_reg.card import SpectralRegCard
    from edgekit.models.spectral_reg.continual import TaskData

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    options = {"task_kind": "permuted", "tasks": 2, "steps": 80, "samples": 256}
    summary = SpectralRegCard(**options).train()
    assert summary.heldout_accuracy == summary.result.test_accuracy[-1]
    assert summary.last_task_train_accuracy == summary.result.train_accuracy[-1]
    assert summary.heldout_accuracy > 0.6  # chance is 0.1
    # held out: no task's held-out digit is one of its training digits, and the network does
    # worse on them than on what it trained on (0.90 against 0.99)
    for task in continual.task_stream(continual.ContinualConfig(**options)):
        trained_on = {row.tobytes() for row in task.x.numpy()}
        assert len(task.test_y) > 1000 and not any(
            row.tobytes() in trained_on for row in task.test_x.numpy()
        )
    assert summary.heldout_accuracy < summary.last_task_train_accuracy - 0.03

    stream = continual.task_stream

    def shuffled_labels(config: continual.ContinualConfig) -> list[TaskData]:
        gen = torch.Generator().manual_seed(5)
        return [
            TaskData(t.x, t.y[torch.randperm(len(t.y), generator=gen)], t.test_x, t.test_y)
            for t in stream(config)
        ]

    monkeypatch.setattr(continual, "task_stream", shuffled_labels)
    control = continual.run_continual(continual.ContinualConfig(**options))
    # fitting shuffled labels does not transfer: held-out accuracy stays near chance, far
    # below both the real run's and the control's own training accuracy
    assert control.test_accuracy[-1] < 0.25
    assert control.train_accuracy[-1] > control.test_accuracy[-1] + 0.1
    # random labels have no held-out split: the card says so instead of reporting a number
    assert SpectralRegCard(tasks=1, steps=4, samples=32).train().heldout_accuracy is None


def test_spectral_keeps_plasticity_where_none_loses_it() -> None:
    """A shortened stream (12 tasks, high lr) where the unregularised net already collapses."""
    from edgekit.models.spectral_reg.continual import ContinualConfig, run_continual

    base = ContinualConfig(tasks=12, steps=100, samples=64, batch_size=32, lr=1e-2)
    none = run_continual(ContinualConfig(**{**base.__dict__, "regularizer": "none"}))
    spectral = run_continual(base)
    assert sum(spectral.train_accuracy[-4:]) > sum(none.train_accuracy[-4:]) + 0.4
    assert max(spectral.sigmas[-1].values()) < max(none.sigmas[-1].values())


def test_summary_over_seeds_pairs_each_regulariser_with_none_and_l2_init() -> None:
    from edgekit.models.spectral_reg.experiment import summarise

    def runs(name: str, last: list[float]) -> list[dict]:
        return [
            {"regularizer": name, "strength": 0.1, "seed": seed, "last_tasks_accuracy": acc,
             "mean_accuracy": acc - 0.1}
            for seed, acc in enumerate(last)
        ]  # fmt: skip

    last = {"none": [0.2, 0.1, 0.3], "l2-init": [1.0, 0.9, 1.0], "spectral": [1.0, 1.0, 0.95]}
    summary = {e["regularizer"]: e for e in summarise({k: runs(k, v) for k, v in last.items()})}
    spectral = summary["spectral"]
    assert spectral["seeds"] == [0, 1, 2]
    assert spectral["last_tasks_accuracy"]["mean"] == pytest.approx(2.95 / 3)
    assert spectral["mean_accuracy"]["mean"] == pytest.approx(2.65 / 3)
    # paired by seed: spectral - none = (0.8, 0.9, 0.65), spectral - l2-init = (0, 0.1, -0.05)
    assert spectral["vs_none"]["diff"] == pytest.approx(2.35 / 3)
    assert spectral["vs_none"]["wins"] == 3 and spectral["vs_none"]["shown"]
    assert spectral["vs_l2_init"]["diff"] == pytest.approx(0.05 / 3)
    assert spectral["vs_l2_init"]["diff_se"] == pytest.approx(0.0763762616 / math.sqrt(3))
    assert spectral["vs_l2_init"]["wins"] == 1 and not spectral["vs_l2_init"]["shown"]
    # a reference is not compared with itself
    assert summary["none"]["vs_none"] is None and summary["l2-init"]["vs_l2_init"] is None
    assert summary["none"]["vs_l2_init"]["diff"] == pytest.approx(-2.3 / 3)


@pytest.mark.study
def test_experiment_writes_report_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from edgekit.models.spectral_reg.continual import ContinualConfig
    from edgekit.models.spectral_reg.experiment import SEEDS, experiment

    assert SEEDS == (0, 1, 2, 3, 4)
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    base = ContinualConfig(tasks=2, steps=4, samples=32, batch_size=32)
    report = experiment(
        tmp_path / "out", show_progress=False, base=base, scales=(0.1, 1.0), seeds=(0, 1, 2)
    )
    names = [r["regularizer"] for r in report["rows"]]
    assert names == ["none", "l2", "l2", "l2-init", "l2-init", "spectral", "spectral"]
    best = [r for r in report["rows"] if r["best"]]
    assert [r["regularizer"] for r in best] == ["none", "l2", "l2-init", "spectral"]
    assert {r["seed"] for r in report["rows"]} == {0}  # the sweep runs on the first seed
    # each best strength runs on every seed; the summary is computed from those runs
    for entry, sweep_best in zip(report["summary"], best, strict=True):
        seeded = [r for r in report["seed_runs"] if r["regularizer"] == entry["regularizer"]]
        assert [r["seed"] for r in seeded] == entry["seeds"] == [0, 1, 2]
        assert {r["strength"] for r in seeded} == {sweep_best["strength"]} == {entry["strength"]}
        last = [r["last_tasks_accuracy"] for r in seeded]
        assert seeded[0]["last_tasks_accuracy"] == sweep_best["last_tasks_accuracy"]
        assert entry["last_tasks_accuracy"]["values"] == last
        assert entry["last_tasks_accuracy"]["mean"] == pytest.approx(sum(last) / 3)
    spectral, none = report["summary"][3], report["summary"][0]
    pairs = zip(
        spectral["last_tasks_accuracy"]["values"],
        none["last_tasks_accuracy"]["values"],
        strict=True,
    )
    diffs = [a - b for a, b in pairs]
    assert spectral["vs_none"]["diff"] == pytest.approx(sum(diffs) / 3)
    assert report["chance"] == 0.1
    printed = capsys.readouterr().out
    assert "chance (random labels)" in printed and "- L2-init" in printed
    assert json.loads((tmp_path / "out" / "report.json").read_text())["rows"][0]["sigmas"]
    assert (tmp_path / "out" / "spectral_reg.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((tmp_path / "cache" / "spectral-reg").glob("*.pt"))) == 7 + 4 * 2
