"""spectral-reg card: evaluate reports held-out accuracy only where the stream holds digits out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


def test_evaluate_scores_held_out_digits_of_a_permuted_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.build.verify import reference_runners
    from edgekit.models.spectral_reg.card import SpectralRegCard

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    card = SpectralRegCard(task_kind="permuted", tasks=2, steps=80, samples=256)
    metrics = card.evaluate(reference_runners(card))
    summary = card.train()
    task = card.last_task()
    # the held-out digits are disjoint from the training digits (same pixel permutation)
    train_rows = {row.tobytes() for row in task.x.numpy()}
    assert not any(row.tobytes() in train_rows for row in task.test_x.numpy())
    assert metrics["last_task_accuracy"] == pytest.approx(summary.last_task_train_accuracy)
    assert metrics["last_task_heldout_accuracy"] == pytest.approx(summary.heldout_accuracy)
    assert 0.6 < metrics["last_task_heldout_accuracy"] < metrics["last_task_accuracy"]

    random_labels = SpectralRegCard(tasks=1, steps=4, samples=32)
    assert set(random_labels.evaluate(reference_runners(random_labels))) == {"last_task_accuracy"}
