"""ModuleCard: any user nn.Module from a file, and the errors for bad specs and shapes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.cache import atomic_write_text, cache_dir
from edgekit.errors import BundleError, InputError
from edgekit.module_card import ModuleCard, parse_input_shapes
from edgekit.sources import card_from_source

USER_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Net(nn.Module):  # random init, no seed: the card seeds the factory
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):  # (B, 3, H, W) -> (B, 2)
            return self.fc(self.conv(x).mean(dim=(2, 3)))


    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 8)

        def forward(self, ids, scale):  # (B, S) int64, (B, 1) -> (B, 8), (B,), scalar
            h = self.emb(ids).mean(dim=1) * scale
            return h, h.sum(dim=1), h.sum()


    class Named(nn.Module):
        def forward(self, x):
            return {"double": x * 2, "half": x / 2}


    class FixedBatch(nn.Module):
        def forward(self, x):  # only works for batch 1
            return x.view(1, -1).sum(dim=1)


    def make():
        return Net()


    instance = Net()
    not_a_module = 42


    def returns_string():
        return "nope"


    def raises():
        raise RuntimeError("boom")
    """
)


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(USER_FILE)
    return path


def test_function_factory_builds_a_batch_dynamic_graph(user_file: Path) -> None:
    card = ModuleCard.from_spec(f"{user_file}:make", {"x": (2, 3, 16, 16)})
    (graph,) = card.graphs()
    inputs, outputs = graph.io_specs()
    assert graph.name == "main" and card.name == "my_models"
    assert inputs[0].shape == ("batch", 3, 16, 16) and inputs[0].dtype == "float32"
    assert outputs[0].name == "output" and outputs[0].shape == ("batch", 2)
    assert not graph.module.training
    golden = card.golden_inputs()["main"]["x"]
    assert golden.shape == (2, 3, 16, 16) and golden.dtype == np.float32
    np.testing.assert_array_equal(golden, card.golden_inputs()["main"]["x"])  # seeded
    calib = card.calibration_data(5)["main"]
    assert len(calib) == 5 and not np.array_equal(calib[0]["x"], calib[1]["x"])
    assert card.evaluate({}) == {} and card.primary_metric is None


def test_class_instance_and_multi_output_factories(user_file: Path) -> None:
    card = ModuleCard.from_spec(f"{user_file}:instance", {"x": (1, 3, 8, 8)})
    assert card.graphs()[0].output_names == ["output"]
    card = ModuleCard.from_spec(
        f"{user_file}:TwoHeads", {"ids": (2, 5), "scale": (2, 1)}, dtypes={"ids": "int64"}
    )
    graph = card.graphs()[0]
    assert graph.output_names == ["output_0", "output_1", "output_2"]
    assert graph.example_inputs["ids"].dtype == torch.int64
    assert int(graph.example_inputs["ids"].max()) < 4
    # the scalar output does not follow the batch, the others do
    assert graph.dynamic_axes == {
        "ids": {0: "batch"},
        "scale": {0: "batch"},
        "output_0": {0: "batch"},
        "output_1": {0: "batch"},
    }
    named = ModuleCard.from_spec(f"{user_file}:Named", {"x": (1, 4)}).graphs()[0]
    assert named.output_names == ["double", "half"]
    fixed = ModuleCard.from_spec(f"{user_file}:FixedBatch", {"x": (1, 4)}).graphs()[0]
    assert fixed.dynamic_axes == {}  # a second batch size fails, so shapes stay fixed


def test_source_rebuilds_the_same_module(user_file: Path) -> None:
    card = ModuleCard.from_spec(f"{user_file}:make", {"x": (1, 3, 8, 8)})
    source = card.source()
    assert source["card"] == "module" and source["input_shapes"] == {"x": [1, 3, 8, 8]}
    rebuilt = card_from_source(source)
    x = torch.from_numpy(card.golden_inputs()["main"]["x"])
    with torch.inference_mode():
        assert torch.equal(card.graphs()[0].module(x), rebuilt.graphs()[0].module(x))
    user_file.write_text(USER_FILE + "\n# edited\n")
    with pytest.raises(BundleError, match="changed"):
        card_from_source(source)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{dir}/missing.py:make", "does not exist"),
        ("{file}:nothing_here", "no attribute 'nothing_here'"),
        ("{file}:not_a_module", "not a factory or module"),
        ("{file}:returns_string", "must return a torch.nn.Module"),
        ("{file}:raises", "boom"),
        ("{file}", "must be 'path/to/file.py:factory'"),
        ("{dir}/broken.py:make", "importing"),
    ],
)
def test_bad_specs_raise_input_error(user_file: Path, spec: str, message: str) -> None:
    (user_file.parent / "broken.py").write_text("def make(:\n")
    text = spec.format(dir=user_file.parent, file=user_file)
    with pytest.raises(InputError, match=message):
        ModuleCard.from_spec(text, {"x": (1, 3, 8, 8)})


def test_wrong_shapes_and_missing_shapes_raise_input_error(user_file: Path) -> None:
    with pytest.raises(InputError, match="failed on inputs"):
        ModuleCard.from_spec(f"{user_file}:make", {"x": (1, 5, 8, 8)})
    with pytest.raises(InputError, match="input shapes"):
        ModuleCard.from_spec(f"{user_file}:make", {})


def test_parse_input_shapes() -> None:
    assert parse_input_shapes(["x=1x3x224x224", "mask=2,128"]) == {
        "x": (1, 3, 224, 224),
        "mask": (2, 128),
    }
    assert parse_input_shapes(["1x3x32x32"]) == {"input": (1, 3, 32, 32)}
    assert parse_input_shapes([]) == {}
    for bad in (["x=1xa"], ["x=0x3"], ["=1x2"], ["x="], ["x=1x2", "x=3"], ["1x2", "y=3"]):
        with pytest.raises(InputError):
            parse_input_shapes(bad)


def test_cache_dir_and_atomic_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "c"))
    folder = cache_dir("photo-cnn", "v1")
    assert folder == tmp_path / "c" / "photo-cnn" / "v1" and folder.is_dir()
    target = atomic_write_text(folder / "a.json", "{}")
    assert target.read_text() == "{}" and [p.name for p in folder.iterdir()] == ["a.json"]


def test_config_from_options_names_unknown_and_mistyped_options() -> None:
    from dataclasses import dataclass

    from edgekit.card import config_from_options

    @dataclass
    class Recipe:
        steps: int = 10
        lr: float = 1e-3
        name: str = "a"

    assert config_from_options("c", Recipe, {"steps": 3, "lr": 1}) == Recipe(3, 1, "a")
    for bad, message in (
        ({"steps": 2.5}, "steps=2.5 must be an integer"),
        ({"steps": True}, "steps=True must be an integer"),
        ({"lr": "fast"}, "lr='fast' must be a number"),
        ({"lr": None}, "lr=None must be a number"),
        ({"epochs": 1}, r"\['epochs'\] are unknown"),
    ):
        with pytest.raises(InputError, match=message):
            config_from_options("c", Recipe, bad)
