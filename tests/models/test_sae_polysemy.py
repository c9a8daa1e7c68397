"""SAE polysemy (PS-Eval): SAE variants, PS-Eval scoring, the WiC set, hooks, export + device.

Training here is tiny (tens of steps on small inputs); the full study is ``edgekit eval
sae-polysemy``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from edgekit.errors import InputError  # noqa: E402
from edgekit.models.sae_polysemy import pseval  # noqa: E402
from edgekit.models.sae_polysemy.sae import (  # noqa: E402
    JumpReluSAE,
    TopKSAE,
    make_sae,
    reconstruction_metrics,
)
from edgekit.models.sae_polysemy.wic import load_wic  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _sparse_data(n: int = 512, d: int = 32, atoms: int = 48, seed: int = 0) -> torch.Tensor:
    """Rows that are sparse non-negative mixtures of ``atoms`` random unit directions."""
    g = torch.Generator().manual_seed(seed)
    dictionary = torch.randn(atoms, d, generator=g)
    dictionary /= dictionary.norm(dim=1, keepdim=True)
    codes = torch.rand(n, atoms, generator=g) * (torch.rand(n, atoms, generator=g) < 0.08)
    return codes @ dictionary  # (n, d)


# ---- SAE variants ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("variant", "hyper"),
    [("relu", {"l1_coeff": 1e-3}), ("topk", {"k": 4}), ("jumprelu", {"l0_coeff": 1e-3})],
)
def test_each_variant_trains_and_reduces_loss(variant: str, hyper: dict) -> None:
    torch.manual_seed(0)
    x = _sparse_data()
    model = make_sae(variant, 32, 64, **hyper)
    with torch.no_grad():
        model.b_dec.copy_(x.mean(dim=0))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    first = float(model.losses(x)["loss"].detach())
    for _ in range(60):
        terms = model.losses(x)
        optimizer.zero_grad()
        terms["loss"].backward()
        model.remove_parallel_gradient()
        optimizer.step()
        model.normalize_decoder()
    model.eval()
    last = float(model.losses(x)["loss"].detach())
    assert last < 0.7 * first, (first, last)
    norms = model.W_dec.norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)  # unit decoder rows kept
    metrics = reconstruction_metrics(model, x)
    assert 0 < metrics["fvu"] < 1 and 0 < metrics["l0"] < 64


def test_remove_parallel_gradient_keeps_decoder_rows_on_the_sphere() -> None:
    model = make_sae("relu", 8, 16)
    model.W_dec.grad = torch.randn_like(model.W_dec)
    model.remove_parallel_gradient()
    along = (model.W_dec.grad * model.W_dec).sum(dim=1)
    assert along.abs().max() < 1e-5


def test_topk_has_exactly_k_active_and_never_more() -> None:
    model = TopKSAE(32, 128, k=5)
    x = torch.randn(64, 32)
    with torch.no_grad():
        model.b_enc.fill_(100.0)  # every pre-activation positive -> exactly k survive the ReLU
    active = (model.encode(x) > 0).sum(dim=-1)
    assert (active == 5).all()
    with torch.no_grad():
        model.b_enc.fill_(0.0)
    pre = model.pre_activations(x)
    f = model.encode(x)
    assert ((f > 0).sum(dim=-1) <= 5).all()
    kept = f.gt(0)  # every kept latent is among the k largest pre-activations
    kth = pre.topk(5, dim=-1).values[:, -1:]
    assert (pre[kept] >= kth.expand_as(pre)[kept]).all()
    assert torch.equal(f[kept], pre[kept])  # kept values are the pre-activations, unshrunk


def test_topk_auxk_only_with_dead_latents() -> None:
    model = TopKSAE(16, 64, k=4)
    x = torch.randn(32, 16)
    assert float(model.losses(x)["aux"]) == 0.0
    dead = torch.zeros(64, dtype=torch.bool)
    dead[:10] = True
    aux = model.losses(x, dead)["aux"]
    assert float(aux.detach()) > 0
    aux.backward()
    assert model.W_dec.grad[:10].abs().sum() > 0  # dead rows learn from the residual
    assert model.W_dec.grad[10:].abs().sum() == 0


def test_jumprelu_threshold_gates_without_shrinking() -> None:
    model = JumpReluSAE(4, 3, l0_coeff=1.0, bandwidth=0.2, threshold_init=0.5)
    model.eval()
    pre = torch.tensor([[0.3, 0.45, 0.9], [0.55, -1.0, 2.0]])
    f = model.activate(pre)
    # below or at theta -> 0; above -> the pre-activation itself (not pre - theta)
    assert torch.equal(f, torch.tensor([[0.0, 0.0, 0.9], [0.55, 0.0, 2.0]]))
    model.train()
    pre = pre.clone().requires_grad_(True)
    model.activate(pre).sum().backward()
    assert torch.equal(pre.grad, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 1.0]]))
    # theta's pseudo-gradient comes only from pre-activations within bandwidth/2 of theta
    grad = model.log_threshold.grad.clone()
    # latent 0: 0.55 is within 0.1 of 0.5 (0.3 is not); latent 1: 0.45; latent 2: none
    assert grad[0] < 0 and grad[1] < 0 and grad[2] == 0
    model.log_threshold.grad = None
    model.sparsity_loss(pre.detach(), None).backward()
    l0_grad = model.log_threshold.grad  # L0 penalty: descent raises theta where it is close
    assert l0_grad[0] < 0 and l0_grad[2] == 0


def test_make_sae_rejects_unknown_variant() -> None:
    with pytest.raises(InputError, match="unknown SAE variant"):
        make_sae("gated-ish", 8, 16)


# ---- PS-Eval ---------------------------------------------------------------------------------
def test_pseval_confusion_on_a_hand_computed_case() -> None:
    labels = [1, 1, 1, 1, 0, 0]
    first = np.array([3, 5, -1, 2, 7, 9])
    second = np.array([3, 4, -1, 2, 7, 8])
    # same max feature: T, F, F (no feature never counts), T, T, F
    metrics = pseval.pseval_features(first, second, labels)
    assert (metrics["tp"], metrics["fn"], metrics["fp"], metrics["tn"]) == (2, 2, 1, 1)
    assert metrics["accuracy"] == pytest.approx(3 / 6)
    assert metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 4)
    assert metrics["specificity"] == pytest.approx(1 / 2)
    assert metrics["f1"] == pytest.approx(4 / 7)
    with pytest.raises(InputError):
        pseval.confusion([1, 2], [True, False])


def test_max_features_marks_rows_without_an_active_feature() -> None:
    latents = np.array([[0.0, 2.0, 1.0], [0.0, 0.0, 0.0], [0.5, 0.0, 0.5]])
    assert pseval.max_features(latents).tolist() == [1, -1, 0]


def test_relative_margin() -> None:
    latents = np.array([[0.0, 4.0, 1.0], [2.0, 1.9, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(pseval.relative_margin(latents), [0.75, 0.05, 0.0])


class _LatentRunner:
    """A runner that answers every WiC prompt with fixed rows of (2P, n) latents, in order."""

    def __init__(self, latents: np.ndarray) -> None:
        self.latents, self.cursor = latents, 0

    def run(self, feeds: dict) -> dict:
        rows = self.latents[self.cursor : self.cursor + len(feeds["input_ids"])]
        self.cursor += len(rows)
        return {"target_latents": rows, "text_latents": rows}


def test_agreement_floors_hold_clear_decisions_and_report_near_ties() -> None:
    from edgekit.models.sae_polysemy.card import GRAPH
    from edgekit.registry import get_card

    card = get_card("sae-polysemy")
    prompts, _ = pseval.prompts_and_positions()
    n, half = 8, len(prompts) // 2
    ref = np.zeros((2 * half, n), dtype=np.float32)
    ref[:, 0] = 3.0  # every prompt: feature 0 clearly ahead (margin 2/3) -> "same"
    ref[:, 1] = 1.0
    ref[:40, 2] = 2.95  # the first 40 pairs: context 1 a near-tie between features 0 and 2
    near_tie = ref.copy()
    near_tie[:40, 2] = 3.05  # int8-sized noise flips those 40 near-ties
    clear_flip = ref.copy()
    clear_flip[100:140, 3] = 9.0  # 40 clearly decided prompts change their max feature

    def agreement(candidate: np.ndarray) -> dict[str, float]:
        card._outputs.clear()
        return card.agreement({GRAPH: _LatentRunner(ref)}, {GRAPH: _LatentRunner(candidate)})

    same = agreement(ref.copy())
    assert same["decided_flip_rate"] == 0.0 and same["same_decision_flip_rate"] == 0.0
    assert same["decided_share"] == pytest.approx((half - 40) / half)
    noisy = agreement(near_tie)
    assert noisy["same_decision_flip_rate"] == pytest.approx(40 / half)  # reported
    assert noisy["decided_flip_rate"] == 0.0  # near-ties are not held by the floor
    assert noisy["decided_feature_agreement"] == 1.0
    broken = agreement(clear_flip)
    floor = card.agreement_floors["decided_flip_rate"]
    assert (
        broken["decided_flip_rate"] == pytest.approx(40 / (half - 40)) and 40 / (half - 40) > floor
    )
    assert broken["decided_feature_agreement"] < card.agreement_floors["decided_feature_agreement"]


def test_target_token_is_the_last_wordpiece_before_means() -> None:
    from edgekit.models.minilm.encoder import tokenize

    word = "hedgehogs"  # several WordPieces
    pieces = pseval.word_pieces(word)
    assert len(pieces) > 1
    prompt = pseval.build_prompt("Two hedgehogs slept under the shed.", word)
    assert prompt.endswith("The hedgehogs means")
    feeds = tokenize([prompt])
    length = int(feeds["attention_mask"][0].sum())
    pos = pseval.target_position(feeds["input_ids"][0], length, word)
    assert pos == length - 3 and int(feeds["input_ids"][0][pos]) == pieces[-1]
    long = tokenize([pseval.build_prompt("word " * 200, word)])  # truncated at 128 tokens
    with pytest.raises(InputError, match="does not end in"):
        pseval.target_position(long["input_ids"][0], 128, word)


# ---- the WiC set -----------------------------------------------------------------------------
def test_wic_set_is_balanced_large_and_without_duplicates() -> None:
    pairs = load_wic()
    assert len(pairs) >= 200
    labels = [p.label for p in pairs]
    assert sum(labels) * 2 == len(pairs)
    keys = {(p.word, *sorted((p.context1, p.context2))) for p in pairs}
    assert len(keys) == len(pairs)
    assert all(p.context1 != p.context2 for p in pairs)
    for word in {p.word for p in pairs}:  # every word has both a same and a different pair
        assert {p.label for p in pairs if p.word == word} == {0, 1}
    assert all(p.label == int(p.sense1 == p.sense2) for p in pairs)
    positions = pseval.prompts_and_positions(pairs)[1]
    assert len(positions) == 2 * len(pairs)


def test_wic_loader_names_the_bad_line(tmp_path: Path) -> None:
    from edgekit.models.sae_polysemy.wic import COLUMNS

    bad = tmp_path / "wic.tsv"
    bad.write_text("\t".join(COLUMNS) + "\nbank\tmoney\tThe bank.\triver\tA bank.\t1\n")
    with pytest.raises(ValueError, match=r"wic.tsv:2: label 1 contradicts"):
        load_wic(str(bad))


def test_corpus_is_seeded_and_never_contains_wic_contexts() -> None:
    from edgekit.models.sae_polysemy.corpus import CorpusConfig, build_corpus
    from edgekit.models.sae_polysemy.wic import all_contexts

    small = CorpusConfig(templated=300, seed=3)
    sentences = build_corpus(small)
    assert sentences == build_corpus.__wrapped__(small)
    assert len(sentences) == len(set(sentences)) >= 300
    assert not set(sentences) & set(all_contexts())
    assert not any(re.search(r"\{\w+\}", s) for s in sentences)


# ---- hooks and the device scorer -------------------------------------------------------------
def test_truncated_encoder_matches_forward_hooks() -> None:
    from edgekit.models.minilm.encoder import load_bert, tokenize
    from edgekit.models.sae_polysemy.activations import (
        HookPoint,
        TruncatedEncoder,
        hooked_activations,
    )

    bert = load_bert()
    texts = ["The bank approved the loan.", "A heron waited on the muddy river bank all day."]
    hooks = [HookPoint(1, "attn"), HookPoint(2, "resid")]
    real = lambda feeds: feeds["attention_mask"].astype(bool)  # noqa: E731
    hooked = hooked_activations(texts, hooks, real, bert=bert, threads=1)
    feeds = tokenize(texts)
    mask = feeds["attention_mask"].astype(bool)
    for hook in hooks:
        with torch.no_grad():
            out = TruncatedEncoder(bert, hook).eval()(
                torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])
            )
        np.testing.assert_allclose(out.numpy()[mask], hooked[hook], atol=1e-5)
    with pytest.raises(InputError):
        HookPoint(6, "resid")
    assert HookPoint.parse("L3.attn") == HookPoint(3, "attn")


TINY = {
    "variant": "topk",
    "layer": 0,
    "site": "attn",
    "expansion": 1,
    "k": 8,
    "steps": 25,
    "batch_size": 128,
    "corpus_templated": 120,
}


def test_tiny_scorer_exports_verifies_and_scores_through_the_text_scorer(tmp_path: Path) -> None:
    from edgekit.build.pipeline import build_bundle
    from edgekit.bundle.format import Bundle
    from edgekit.exporters import ExportOptions, Target
    from edgekit.registry import get_card
    from edgekit.text_scorer import TextScorer

    card = get_card("sae-polysemy", **TINY)
    result = card.train()
    assert result.metrics["l0"] <= TINY["k"] and result.config.n_latents == 384
    bundle, report = build_bundle(
        card, Target.parse("onnx-fp32"), tmp_path / "sae", ExportOptions(), progress=False
    )
    assert report is not None and report.passed, report.failures()
    assert report.agreement["same_decision_flip_rate"] <= 0.01
    # on the 320 WiC pairs (half same meaning: chance is 0.5) the exported scorer's "same max
    # feature" already tracks "same meaning" after 25 SAE steps: accuracy 0.59 (after 1 step:
    # 0.52)
    assert report.task["candidate"]["pseval_accuracy"] >= 0.55, report.task
    # beside it: chance (the label set is balanced), a bootstrap interval over the pairs and
    # PS-Eval on the raw activations of the same hook point (no SAE)
    task = report.task["candidate"]
    labels = np.array([p.label for p in load_wic()])
    assert task["majority_accuracy"] == max(labels.mean(), 1 - labels.mean()) == 0.5
    assert (
        task["pseval_accuracy_ci_low"] < task["pseval_accuracy"] < task["pseval_accuracy_ci_high"]
    )
    first, second = pseval.prompt_activations([card.sae_config().hook])[card.sae_config().hook]
    raw = pseval.pseval_features(first.argmax(-1), second.argmax(-1), labels)
    assert task["raw_pseval_accuracy"] == raw["accuracy"]
    assert task["raw_pseval_specificity"] == raw["specificity"]
    gain = task["pseval_accuracy"] - task["raw_pseval_accuracy"]
    assert (
        task["pseval_accuracy_minus_raw_ci_low"]
        <= gain
        <= task["pseval_accuracy_minus_raw_ci_high"]
    )
    assert bundle.manifest["preprocessing"]["hook"]["name"] == "L0.attn"

    scorer = TextScorer(Bundle.load(bundle.path))
    pair = load_wic()[2]  # "bank" in two senses
    texts = [
        pseval.build_prompt(pair.context1, pair.word),
        pseval.build_prompt(pair.context2, pair.word),
        "A short text.",
    ]
    scored = scorer.score(texts=texts)
    target = np.array(scored["target_latents"])  # (3, 384)
    assert target.shape == (3, 384) and np.array(scored["text_latents"]).shape == (3, 384)
    assert ((target > 0).sum(axis=1) <= TINY["k"]).all()
    feeds = scorer.tokenize(texts)  # padded to the longest prompt, as the device does
    with torch.no_grad():
        reference = card.scorer()(*(torch.from_numpy(feeds[k]) for k in feeds))
    np.testing.assert_allclose(target, reference[0].numpy(), atol=1e-4)
    # the device reads the same target token as the hooked PS-Eval path
    length = int(feeds["attention_mask"][0].sum())
    assert pseval.target_position(feeds["input_ids"][0], length, pair.word) == length - 3
    with pytest.raises(InputError):
        scorer.score(texts=[""])
    with pytest.raises(InputError, match="not SAEConfig fields"):
        get_card("sae-polysemy", hook="L3.resid").sae_config()


def test_scorer_target_latents_equal_the_hooked_pseval_path() -> None:
    from edgekit.models.minilm.encoder import tokenize
    from edgekit.registry import get_card

    card = get_card("sae-polysemy", **TINY)
    pairs = load_wic()[:3]
    context1, _ = pseval.prompt_activations([card.sae_config().hook], pairs)[card.sae_config().hook]
    with torch.no_grad():
        hooked = card.train().build().encode(torch.from_numpy(context1)).numpy()  # (3, 384)
        feeds = tokenize([pseval.build_prompt(p.context1, p.word) for p in pairs])
        graph = card.scorer()(*(torch.from_numpy(feeds[k]) for k in feeds))[0].numpy()
    np.testing.assert_allclose(graph, hooked, atol=1e-4)
    assert (pseval.max_features(graph) == pseval.max_features(hooked)).all()
