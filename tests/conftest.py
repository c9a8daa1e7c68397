"""Shared fixtures: a tiny hand-built ONNX bundle for format, archive and CLI tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# helper modules whose asserts should explain a failure as a test's would
pytest.register_assert_rewrite("sam2_meta_helpers", "sam2_fake_graphs", "model_exports")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def write_tiny_onnx(path: Path) -> Path:
    """y = x @ W + b with x float32 (batch, 4) -> y float32 (batch, 3), built with onnx.helper."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def make_tiny_bundle(dest: Path, work: Path) -> Path:
    """A valid one-graph ONNX bundle with golden I/O computed by ONNX Runtime."""
    import onnxruntime as ort

    from edgekit.bundle.format import BundleWriter, GraphEntry
    from edgekit.tensorspec import TensorSpec

    work.mkdir(parents=True, exist_ok=True)
    model = write_tiny_onnx(work / "tiny.onnx")
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    (y,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with BundleWriter(dest) as writer:
        rel = writer.add_file(model, "graphs/tiny.onnx")
        golden = writer.add_golden("main", {"x": x}, {"y": y}, {"y": y})
        writer.add_graph(
            GraphEntry(
                "main",
                [rel],
                "onnx",
                "fp32",
                [TensorSpec("x", "float32", ("batch", 4))],
                [TensorSpec("y", "float32", ("batch", 3))],
                golden,
                {"atol": 1e-5, "rtol": 1e-4},
            )
        )
        writer.commit(
            {
                "model": "tiny",
                "tier": "edge",
                "task": "test",
                "target": {"format": "onnx", "precision": "fp32"},
            }
        )
    return dest


@pytest.fixture
def tiny_bundle(tmp_path: Path) -> Path:
    return make_tiny_bundle(tmp_path / "tiny-bundle", tmp_path / "work")


def _one_torch_thread():  # noqa: ANN202
    """Small tensors: one intra-op torch thread (two were measured 14x slower on shared cores)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


one_torch_thread = pytest.fixture(_one_torch_thread, name="one_torch_thread")
#: the same for a whole module, module-scoped fixtures included (``pytestmark`` usefixtures)
one_torch_thread_module = pytest.fixture(
    _one_torch_thread, scope="module", name="one_torch_thread_module"
)


def onnx_sessions(graphs: list, folder: Path) -> dict:
    """ONNX Runtime sessions (one thread) of ``graphs`` (GraphSpecs) exported to ``folder``,
    keyed by graph name."""
    from edgekit.exporters.onnx import export_onnx
    from edgekit.runtimes import RuntimeOptions, get_runtime

    runtime = get_runtime("onnxruntime")
    return {
        g.name: runtime.load(
            export_onnx(g, folder / f"{g.name}.onnx", opset=17), "cpu", RuntimeOptions(threads=1)
        )
        for g in graphs
    }


def perturbed(module, seed: int = 0, scale: float = 0.1):  # noqa: ANN001, ANN201
    """``module`` in eval mode with every weight moved off its init by seeded N(0, scale^2)
    noise (zero-initialised gates and layers too), so outputs are non-trivial."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return module.eval()


def minilm_fast_tokenizer():  # noqa: ANN201
    """A transformers fast tokenizer over MiniLM's WordPiece vocabulary ([SEP] as EOS), for the
    tiny random Hugging Face models the backend tests build."""
    import transformers

    from edgekit.models.minilm.encoder import tokenizer_path

    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_path()),
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token="[SEP]",
    )
