"""The sensor-rendered recipe's camera renders of one crop, and the optional ranking term."""

from __future__ import annotations

import torch

from edgekit.models.photo_cnn import data
from edgekit.models.photo_cnn.train import (
    TrainConfig,
    camera_render_batch,
    ranking_loss,
    recipe_from_options,
    train_model,
)


def test_blur_kernels_are_normalised_streaks_along_their_angle() -> None:
    sigma, streak = torch.tensor([0.5, 0.5, 1.5]), torch.tensor([6.0, 6.0, 0.0])
    kernels = data.blur_kernels(sigma, streak, torch.tensor([0.0, torch.pi / 2, 0.0]))
    assert kernels.shape == (3, data.BLUR_TAPS, data.BLUR_TAPS)
    assert torch.allclose(kernels.sum(dim=(1, 2)), torch.ones(3))
    across_x, across_y = kernels[0].sum(0), kernels[0].sum(1)  # column and row profiles
    assert float(across_x[2:9].min()) > 0.1 and float(across_y[4:7].sum()) > 0.99
    assert torch.allclose(kernels[1], kernels[0].T, atol=1e-6)  # 90 degrees: the same, upright
    assert torch.allclose(kernels[2], kernels[2].T, atol=1e-6)  # no shake: a round blur


def test_camera_renders_are_grouped_8_bit_captures_that_differ() -> None:
    crops, _ = data.heldout_set()
    crops = crops[::48][:4]  # one crop from each of four photos
    renders = data.camera_renders(crops, 3, torch.Generator().manual_seed(0))
    assert renders.shape == (12, 3, 64, 64)
    assert torch.equal(renders, (renders * 255).round() / 255)
    flat = (renders - renders.mean(dim=(1, 2, 3), keepdim=True)).flatten(1)
    source = (crops - crops.mean(dim=(1, 2, 3), keepdim=True)).flatten(1)
    similarity = (
        torch.nn.functional.normalize(flat, dim=1) @ torch.nn.functional.normalize(source, dim=1).T
    )  # (12, 4)
    assert torch.equal(similarity.argmax(dim=1), torch.arange(4).repeat_interleave(3))
    assert float((renders[0] - renders[1]).abs().mean()) > 0.005  # renders of one crop differ
    again = data.camera_renders(crops, 3, torch.Generator().manual_seed(0))
    assert torch.equal(renders, again)


def test_ranking_loss_pushes_right_renders_above_wrong_ones() -> None:
    labels = torch.tensor([0, 0, 1, 1])  # two crops, two renders each
    # crop 0: render 0 right but unsure, render 1 wrong and sure; crop 1: both right
    logits = torch.tensor(
        [[1.0, 0.5, 0.0], [0.0, 3.0, 0.0], [0.0, 2.0, 0.0], [0.0, 1.0, 0.0]],
        requires_grad=True,
    )
    loss = ranking_loss(logits, labels, renders=2)
    probs = logits.detach().softmax(-1).max(-1).values
    assert torch.isclose(loss, 0.1 - (probs[0] - probs[1]))  # the one mixed pair only
    loss.backward()
    assert float(logits.grad[0, 0]) < 0 < float(logits.grad[1, 1])  # right up, wrong down
    assert float(logits.grad[2:].abs().sum()) == 0.0  # both right: no ranking pressure
    confident = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.2, 0.0]])
    assert float(ranking_loss(confident, labels[:2], renders=2)) == 0.0  # beyond the margin
    agree = torch.zeros(4, 3, requires_grad=True)
    none = ranking_loss(agree, torch.zeros(4, dtype=torch.int64), renders=2)
    assert float(none.detach()) == 0.0 and none.requires_grad


def test_sensor_rendered_recipe_trains_deterministically() -> None:
    rendered = recipe_from_options(TrainConfig, {"recipe": "sensor-rendered"})
    aware = recipe_from_options(TrainConfig, {"recipe": "sensor-aware"})
    assert rendered.render_crops > 0 and rendered.extreme_fraction == aware.extreme_fraction
    assert rendered.rank_weight == 0.0 and rendered.key() != aware.key()
    tiny = TrainConfig(steps=2, batch_size=20, render_crops=4, renders=3)
    images, labels = camera_render_batch(tiny, torch.Generator().manual_seed(0))
    assert images.shape == (12, 3, 64, 64) and torch.equal(labels[::3].repeat_interleave(3), labels)
    for config in (tiny, TrainConfig(steps=2, batch_size=20, render_crops=4, rank_weight=1.0)):
        one, two = train_model(config), train_model(config)
        assert all(torch.equal(v, two.state_dict[k]) for k, v in one.state_dict.items())
