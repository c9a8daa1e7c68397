"""The export + verify + self-test check of every registered model, shared by the
test_model_exports*.py files (split so that test workers share the heaviest cards out).

``COVERAGE`` names the targets each model is exported to; ``GROUPS`` puts each model in one
test file; ``test_registry_is_complete`` fails when a registered model has no coverage or no
group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgekit.build.pipeline import build_bundle
from edgekit.bundle.format import Bundle
from edgekit.bundle.selftest import selftest
from edgekit.exporters import ExportOptions, Target
from edgekit.registry import get_card

# model -> targets exported, verified and self-tested in this suite (this machine: CPU only).
COVERAGE: dict[str, list[str]] = {
    "minilm": ["onnx-fp32", "onnx-int8", "openvino-int8"],
    "photo-cnn": ["onnx-fp32", "onnx-int8", "openvino-fp16", "openvino-int8", "torch-fp32"],
    "photo-vit": ["onnx-fp32", "onnx-int8", "openvino-int8"],
    "bingoguard": ["onnx-int8"],
    "certified-unlearning": ["onnx-fp32"],
    "poison-audit": ["onnx-fp32"],
    "sae-polysemy": ["onnx-int8"],
    "sam2-edge": ["onnx-int8"],
    "sam2": ["onnx-fp32"],
    "sdlg": ["onnx-fp32"],
    "llmcert-b": ["onnx-fp32"],
    "randlora": ["onnx-fp32"],
    "spectral-reg": ["onnx-fp32"],
    "wlks": ["onnx-fp32"],
    "d3u": ["onnx-fp32"],
    "mtid": ["onnx-fp32"],
    "hissd": ["onnx-fp32"],
    "mmie-score": ["onnx-fp32"],
    "omniedit": ["onnx-fp32"],
    "agents-room": ["onnx-fp32"],
    "con-j": ["onnx-fp32"],
    "mm15": ["onnx-fp32"],
}


# Options per card for this suite. sam2 cannot be built without a checkpoint: the official
# architecture with seeded random weights at a small input size and a short held-out set stands
# in. The server methods export their default recipe's graphs; a small recipe (seconds of
# training on a cold cache) exercises the same export + verify + self-test path here, and each
# method's own tests and `edgekit eval NAME` cover the full recipe.
CARD_OPTIONS: dict[str, dict[str, object]] = {
    "sam2": {"random_weights": True, "image_size": 128, "eval_clips": 1, "eval_frames": 6},
    # verify tracks 8 of the 20 held-out clips: with the default's weights int8 J&F is 72.1
    # against torch's 73.4 there (-1.8 %, budget 2.5 %; on all 20, 78.5 against 80.2, -2.1 %),
    # while the first 4 alone give 69.6 against 72.2 (-3.5 %): too few objects to hold the budget
    "sam2-edge": {"eval_clips": 8},
    # a small LM (seconds to train; the default recipe trains ~140 s on a cold cache)
    "sdlg": {
        "people": 4, "dim": 32, "layers": 1, "heads": 2, "steps": 80, "batch_size": 16,
        "lr": 1e-2,
    },
    "llmcert-b": {"corpus_size": 800, "steps": 60},
    "d3u": {"point_steps": 60, "diffusion_steps": 150},
    "spectral-reg": {"tasks": 4, "steps": 40},
    "mtid": {
        "tasks": 3, "actions": 8, "per_task": 4, "obs_dim": 8, "train_plans": 300,
        "test_plans": 100, "dim": 16, "depth": 1, "heads": 2, "steps": 60,
        "classifier_steps": 40, "batch": 32,
    },
    "hissd": {"episodes": 12, "horizon": 6, "steps": 12, "batch": 8, "dim": 16, "queue": 32},
    "mmie-score": {
        "train_items": 24, "val_items": 12, "test_items": 12, "embedder": "hashing",
        "epochs": 2, "batch": 8,
    },
    "omniedit": {
        "train_count": 48, "test_count": 16, "dim": 16, "depth": 1, "heads": 2, "steps": 15,
        "batch": 8,
    },
    "agents-room": {
        "stories": 40, "dim": 32, "layers": 2, "heads": 2, "steps": 60, "batch_size": 8,
    },
    "con-j": {
        "people": 3, "pairs_per_fact": 2, "heldout_per_fact": 1, "lm_dim": 16, "lm_layers": 1,
        "lm_heads": 2, "lm_steps": 5, "sft_steps": 3, "sft_batch": 4, "samples": 2,
        "hint_samples": 1, "dpo_steps": 2, "dpo_batch": 2, "bt_hidden": 8, "bt_epochs": 5,
    },
    "mm15": {
        "dim": 16, "heads": 2, "dec_depth": 1, "batch": 4,
        "recipe": {"stages": [
            {"name": "pretrain", "steps": 4, "lr": 3e-3, "mixture": {"caption": 1.0}},
            {"name": "sft", "steps": 8, "lr": 2e-3, "mixture": {
                "caption": 0.2, "ocr": 0.2, "count": 0.2, "refer": 0.2, "ground": 0.2}},
        ]},
    },
}  # fmt: skip

# test file -> its models: test_model_exports_sam2.py, test_model_exports_edge.py, and the
# server methods (all the rest) in test_model_exports.py
_SAM2 = ["sam2-edge", "sam2"]
_EDGE = ["minilm", "photo-cnn", "photo-vit", "bingoguard", "sae-polysemy", "sdlg"]
GROUPS: dict[str, list[str]] = {
    "sam2": _SAM2,
    "edge": _EDGE,
    "server": [m for m in COVERAGE if m not in _SAM2 + _EDGE],
}


def cases(group: str) -> list[tuple[str, str]]:
    """(model, target) pairs of one test file (a key of ``GROUPS``)."""
    return [(m, t) for m in GROUPS[group] for t in COVERAGE[m]]


_CARDS: dict[str, object] = {}


def _card(name: str):  # one card per model for the whole module: weights load once
    if name not in _CARDS:
        _CARDS[name] = get_card(name, **CARD_OPTIONS.get(name, {}))
    return _CARDS[name]


def check_export(model: str, target: str, tmp_path: Path) -> None:
    """Export ``model`` to ``target`` under ``tmp_path``, verify it against torch, self-test it;
    int8 bundles have their task metrics measured again on the loaded bundle."""
    card = _card(model)
    dest = tmp_path / f"{model}-{target}"
    bundle, report = build_bundle(card, Target.parse(target), dest, ExportOptions(), progress=False)
    assert report is not None and report.passed, report.failures() if report else None
    assert bundle.manifest["report"]["passed"] is True
    assert selftest(str(bundle.path)).passed
    if target.endswith("int8") and model != "sam2-edge":
        # int8 is accepted only inside the budget: the task metrics measured again on the
        # bundle as loaded from disk are the ones the build verified, and within the budget.
        # sam2-edge is not measured again here (its clips streamed again): the build verified
        # sessions opened on the written graph files, and the self-test above checks the
        # loaded bundle against its goldens.
        again = card.evaluate(Bundle.load(bundle.path).sessions())
        assert again == pytest.approx(report.task["candidate"], rel=1e-6, abs=1e-9)
        primary = card.primary_metric
        ref, got = report.task["reference"][primary], again[primary]
        drop = (ref - got) if card.higher_is_better else (got - ref)
        assert got > 0 and drop / abs(ref) <= report.budget, (ref, got, report.budget)
    if model == "sam2-edge" and target.endswith("int8"):
        _assert_prompt_encoder_float(bundle.path)


def _assert_prompt_encoder_float(path: Path) -> None:
    """sam2-edge's int8_float_nodes: no prompt-encoder MatMul / Conv reads a dequantized tensor
    (scalar constants shared with quantized ops may still be stored as int8)."""
    import onnx

    nodes = onnx.load(str(next(path.glob("graphs/mask_decoder*.onnx")))).graph.node
    dequantized = {o for n in nodes if n.op_type == "DequantizeLinear" for o in n.output}
    prompt_ops = [
        n
        for n in nodes
        if n.name.startswith("/prompt_encoder/") and n.op_type in ("MatMul", "Gemm", "Conv")
    ]
    assert any(n.name == "/prompt_encoder/pe/MatMul" for n in prompt_ops)
    assert not [n.name for n in prompt_ops if set(n.input) & dequantized]
    assert any(set(n.input) & dequantized for n in nodes), "the rest is quantized"
