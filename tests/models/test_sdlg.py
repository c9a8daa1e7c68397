"""SDLG: candidate scores on a toy LM with known distributions, decoding, bad input, the NLI
equivalence path and torch vs ONNX agreement of SDLG scores (the entropy maths and clustering:
test_sdlg_entropy.py)."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.sdlg.decoding import beam_search, sample
from edgekit.models.sdlg.entropy import (
    sdlg_semantic_entropy,
)
from edgekit.models.sdlg.sdlg import SDLG, Candidate, SDLGConfig, rank_candidates
from edgekit.models.sdlg.semantic import Attribution, word_attribution
from edgekit.models.tinylm.causal import CausalLM, runner_backend, torch_backend
from edgekit.models.tinylm.tokens import EOS_ID, VOCAB_SIZE, encode, prompt_ids

torch.set_num_threads(1)

# ---- a toy LM with known next-token distributions --------------------------------------------

PARIS, LONDON, ROME, CITY = (encode(w)[0] for w in ("paris", "london", "rome", "city"))


class TableLM:
    """Next-token probabilities keyed by the generated tokens after the prompt (the rest of the
    vocabulary gets 1e-9 in total)."""

    def __init__(self, prompt: list[int], table: dict[tuple[int, ...], dict[int, float]]):
        self.prompt, self.table = prompt, table

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.full((*ids.shape, VOCAB_SIZE), -40.0, dtype=np.float32)
        for b in range(ids.shape[0]):
            length = int(mask[b].sum())
            for s in range(len(self.prompt) - 1, length):
                generated = tuple(int(t) for t in ids[b, len(self.prompt) : s + 1])
                for token, p in self.table.get(generated, {EOS_ID: 1.0}).items():
                    out[b, s, token] = math.log(p)
        return out


QUESTION = "where does anna live?"
TABLE = {
    (): {PARIS: 0.6, LONDON: 0.3, ROME: 0.0995, CITY: 0.0005},
    (PARIS,): {EOS_ID: 0.9, CITY: 0.1},
    (LONDON,): {EOS_ID: 0.8, CITY: 0.2},
    (ROME,): {EOS_ID: 1.0},
}


def toy_lm() -> CausalLM:
    return CausalLM(TableLM(prompt_ids(QUESTION), TABLE), max_len=48)


class ToySemantic:
    """Equivalence = same first answer token; attribution with a known gradient (counted)."""

    def __init__(self, question: str = QUESTION) -> None:
        self.embedding_matrix = np.zeros((VOCAB_SIZE, 3))
        self.embedding_matrix[PARIS] = [1.0, 0.0, 0.0]
        self.embedding_matrix[LONDON] = [0.0, 1.0, 0.0]
        self.embedding_matrix[ROME] = [1.0, 1.0, 1.0]
        self.embedding_matrix[A] = [1.0, 0.0, 0.0]
        self.embedding_matrix[HAM] = [1.0, 0.0, 0.0]
        self.embedding_matrix[CAT] = [0.0, 1.0, 0.0]
        self.embedding_matrix[DOG] = [1.0, 1.0, 1.0]
        self.embedding_matrix[EOS_ID] = [0.0, 0.0, 1.0]
        self.q = len(encode(question))
        self.attributions = 0

    def equivalent(self, a, b) -> bool:
        return a[1 + self.q] == b[1 + self.q]

    def attribution(self, question, answer) -> Attribution:
        self.attributions += 1
        g = np.tile([1.0, -1.0, 0.0], (1, len(answer), 1))  # (1, T, 3)
        return Attribution(np.arange(1, len(answer) + 1, dtype=float), g, signed=True)


# a two-word answer with a WordPiece continuation: "a hamster" = a ham ##ster
A, CAT, DOG = (encode(w)[0] for w in ("a", "cat", "dog"))
HAM, STER = encode("hamster")
PET_QUESTION = "what pet does anna have?"
PET_TABLE = {
    (): {A: 0.7, CAT: 0.2, DOG: 0.0995, PARIS: 0.0005},
    (A,): {HAM: 0.6, CAT: 0.3, EOS_ID: 0.05, DOG: 0.05},
    (A, HAM): {STER: 0.8, CAT: 0.2},
}


def pet_lm() -> CausalLM:
    return CausalLM(TableLM(prompt_ids(PET_QUESTION), PET_TABLE), max_len=48)


def test_beam_search_and_sampling_on_known_distributions() -> None:
    lm = toy_lm()
    best = beam_search(lm, prompt_ids(QUESTION), beams=3, keep_distributions=True)
    assert best.tokens == [PARIS] and best.finished
    assert best.log_prob == pytest.approx(math.log(0.6 * 0.9), abs=1e-6)
    assert np.exp(best.distributions[0][LONDON]) == pytest.approx(0.3, abs=1e-6)
    assert lm.calls == 2 and lm.rows == 1 + 3  # step 1: the prompt; step 2: three beams
    gens = sample(lm, prompt_ids(QUESTION), 200, np.random.default_rng(0))
    share = np.mean([g.tokens[:1] == [PARIS] for g in gens])
    assert 0.5 < share < 0.7
    for g in gens:
        assert g.log_prob == pytest.approx(sum(g.token_log_probs))
    # one LM row per live sequence per generated token, EOS step included
    lm.reset_counter()
    gens = sample(lm, prompt_ids(QUESTION), 10, np.random.default_rng(1))
    assert lm.rows == sum(len(g.token_log_probs) for g in gens)


def test_single_word_answer_is_ranked_by_importance_alone() -> None:
    semantic = ToySemantic()
    sdlg = SDLG(toy_lm(), semantic, SDLGConfig(alternatives=2, completion_beams=2))
    initial = beam_search(sdlg.lm, prompt_ids(QUESTION), 5, keep_distributions=True)
    cands = sdlg.candidates(encode(QUESTION), initial)
    # not paris (original), not city (P = 5e-4 < 1e-3), not EOS (first word)
    assert {c.token for c in cands} == {LONDON, ROME}
    assert semantic.attributions == 0  # the paper computes no attribution for one word
    assert all(c.attribution == 0 and c.substitution == 0 for c in cands)
    ranked = rank_candidates(cands, (1 / 3, 1 / 3, 1 / 3))
    assert [c.token for c in ranked] == [LONDON, ROME]
    assert ranked[0].importance == pytest.approx(0.3, abs=1e-6)


def test_candidates_at_word_starts_with_eos_after_the_first_word() -> None:
    semantic = ToySemantic(PET_QUESTION)
    sdlg = SDLG(pet_lm(), semantic, SDLGConfig(alternatives=2))
    initial = beam_search(sdlg.lm, prompt_ids(PET_QUESTION), 5, keep_distributions=True)
    assert initial.tokens == [A, HAM, STER]
    cands = {(c.position, c.token): c for c in sdlg.candidates(encode(PET_QUESTION), initial)}
    # position 2 (##ster) is never replaced; EOS only after the first word; P > 1e-3 only
    assert set(cands) == {(0, CAT), (0, DOG), (1, CAT), (1, DOG), (1, EOS_ID)}
    assert semantic.attributions == 1
    assert cands[(1, CAT)].attribution == 2.0 and cands[(0, CAT)].attribution == 1.0
    assert cands[(1, EOS_ID)].importance == pytest.approx(0.05, abs=1e-6)
    # substitution: cos(E[o] - E[v], g) with g = (1, -1, 0)
    assert cands[(1, CAT)].substitution == pytest.approx(1.0)  # (1, -1, 0) . g / 2
    assert cands[(0, DOG)].substitution == pytest.approx(0.5)  # (0, -1, -1) . g / 2
    assert cands[(1, EOS_ID)].substitution == pytest.approx(0.5)  # (1, 0, -1) . g / 2


def test_ranks_are_dense_as_in_the_paper() -> None:
    ranked = rank_candidates(
        [
            Candidate(0, 1, attribution=1.0, substitution=0.1, importance=0.5),
            Candidate(1, 2, attribution=2.0, substitution=0.9, importance=0.2),
            Candidate(0, 3, attribution=1.0, substitution=0.5, importance=0.3),
        ],
        (1 / 3, 1 / 3, 1 / 3),
    )
    # mean ranks: token 2 -> (0 + 0 + 2) / 3; tokens 1 and 3 -> 1, tie broken by importance
    assert [c.token for c in ranked] == [2, 1, 3]
    assert [c.rank for c in ranked] == pytest.approx([2 / 3, 1.0, 1.0])
    # three candidates share the best word: dense ranks put token 4 (second word) one rank
    # behind them, not three (competition ranks would order token 1 first)
    ranked = rank_candidates(
        [
            Candidate(0, 1, attribution=2.0, substitution=0.1, importance=0.5),
            Candidate(0, 2, attribution=2.0, substitution=0.2, importance=0.1),
            Candidate(0, 3, attribution=2.0, substitution=0.3, importance=0.05),
            Candidate(1, 4, attribution=1.0, substitution=0.9, importance=0.3),
        ],
        (1 / 3, 1 / 3, 1 / 3),
    )
    assert [c.token for c in ranked] == [4, 1, 2, 3]
    assert ranked[0].rank == pytest.approx((1 + 0 + 1) / 3)
    only_importance = rank_candidates(ranked, (0.0, 0.0, 1.0))
    assert [c.token for c in only_importance] == [1, 4, 2, 3]


def test_sdlg_alternatives_weights_and_cost_on_known_distributions() -> None:
    lm = toy_lm()
    cfg = SDLGConfig(beams=3, alternatives=2, completion_beams=2, length="sum")
    result = SDLG(lm, ToySemantic(), cfg).score(QUESTION)
    assert result.answer == "paris" and result.alternatives == ["london", "rome"]
    expected = [math.log(0.6 * 0.9), math.log(0.3 * 0.8), math.log(0.0995)]
    np.testing.assert_allclose(result.log_probs, expected, atol=1e-5)
    np.testing.assert_allclose(result.weights, [1.0, 0.3, 0.0995], atol=1e-6)
    assert result.clusters == [0, 1, 2]
    assert result.extras["lengths"] == [2, 2, 2]  # answer token + EOS
    assert result.entropy == pytest.approx(
        sdlg_semantic_entropy(expected, [1.0, 0.3, 0.0995], [0, 1, 2]), abs=1e-5
    )
    per_token = np.array(expected) / 2
    assert result.extras["entropy_mean"] == pytest.approx(
        sdlg_semantic_entropy(per_token, [1.0, 0.3, 0.0995], [0, 1, 2]), abs=1e-5
    )
    mean = SDLG(toy_lm(), ToySemantic(), replace(cfg, length="mean")).score(QUESTION)
    assert mean.entropy == pytest.approx(result.extras["entropy_mean"], abs=1e-9)
    # two completions, each one prefix then two beams at most
    assert result.initial_rows == 4 and 2 <= result.rows <= 6
    assert result.rows + result.initial_rows == lm.rows
    assert result.extras["rows_after"][-1] == result.rows
    assert result.extras["substitutions"] == [(0, LONDON), (0, ROME)]


def test_eos_alternative_truncates_without_an_lm_call() -> None:
    lm = pet_lm()
    cfg = SDLGConfig(alternatives=5, alphas=(0.0, 0.0, 1.0), length="sum")
    result = SDLG(lm, ToySemantic(PET_QUESTION), cfg).score(PET_QUESTION)
    # importance order: (1, cat) 0.3, (0, cat) 0.2, (0, dog) 0.0995, then the two at 0.05
    subs = result.extras["substitutions"]
    assert subs[:3] == [(1, CAT), (0, CAT), (0, DOG)]
    assert set(subs[3:]) == {(1, EOS_ID), (1, DOG)}
    eos = subs.index((1, EOS_ID)) + 1  # index among [y0, alternatives]
    assert result.alternatives[eos - 1] == "a"
    assert result.log_probs[eos] == pytest.approx(math.log(0.7 * 0.05), abs=1e-5)
    assert result.weights[eos] == pytest.approx(0.05, abs=1e-6)
    assert result.extras["lengths"][eos] == 2  # "a" + EOS
    rows_after = result.extras["rows_after"]
    assert rows_after[eos - 1] == (rows_after[eos - 2] if eos >= 2 else 0)  # no LM call
    # each alternative's log-probability is its full sequence's, teacher-forced
    for text, lp in zip(result.alternatives, result.log_probs[1:], strict=True):
        ids = encode(text)
        seq = sum(
            float(lm.next_log_probs([prompt_ids(PET_QUESTION) + ids[:i]])[0, tok])
            for i, tok in enumerate([*ids, EOS_ID])
        )
        assert lp == pytest.approx(seq, abs=1e-5)


def test_prefix_of_a_run_equals_a_run_with_fewer_alternatives() -> None:
    from edgekit.models.sdlg.tuning import prefix_entropy

    full = SDLG(pet_lm(), ToySemantic(PET_QUESTION), SDLGConfig(alternatives=5)).score(PET_QUESTION)
    for k in (1, 2, 3):
        short = SDLG(pet_lm(), ToySemantic(PET_QUESTION), SDLGConfig(alternatives=k))
        result = short.score(PET_QUESTION)
        for length in ("sum", "mean"):
            entropy, rows = prefix_entropy(full, k, length)
            assert entropy == pytest.approx(result.extras[f"entropy_{length}"], abs=1e-12)
            assert rows == result.rows
    with pytest.raises(InputError, match="length"):
        prefix_entropy(full, 1, "median")


def test_tuning_keeps_the_best_affordable_setting() -> None:
    from edgekit.models.sdlg.tuning import _best

    table = [
        {"auroc": 0.95, "rows_mean": 40.0, "alternatives": 10},
        {"auroc": 0.93, "rows_mean": 20.0, "alternatives": 6},
        {"auroc": 0.93, "rows_mean": 12.0, "alternatives": 4},
        {"auroc": 0.90, "rows_mean": 5.0, "alternatives": 2},
    ]
    assert _best(table, 34.0)["alternatives"] == 4  # 0.95 costs too much; tie -> fewer rows
    with pytest.raises(InputError, match="LM rows"):
        _best(table, 4.0)


def test_bad_sdlg_options_are_input_errors() -> None:
    for bad in (
        {"alternatives": -1},
        {"completion_beams": 0},
        {"token_prob": 1.5},
        {"alphas": (1.0, 0.0)},
        {"alphas": (0.0, 0.0, 0.0)},
        {"length": "median"},
    ):
        with pytest.raises(InputError, match=next(iter(bad))):
            SDLGConfig(**bad)


def test_substitution_kinds() -> None:
    from edgekit.models.sdlg.study import substitution_kind

    question = "what is the job of anna?"
    answer = encode("anna is a hamster")  # anna is a ham ##ster
    kinds = [substitution_kind(answer, t, CAT, question) for t in range(len(answer))]
    assert kinds == ["question", "template", "template", "value", "value"]
    assert substitution_kind(answer, 1, EOS_ID, question) == "truncation"


def test_word_attribution_groups_wordpieces() -> None:
    answer = encode("hamster cat")  # ham ##ster cat
    from edgekit.models.sdlg.semantic import word_groups

    assert word_groups(answer) == [0, 0, 1]
    g = np.ones((1, 3, 2))
    e = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    # word 0: mean |g*e| = (2, 0) -> 2; word 1: (0, 2) -> 2 ... scaled by row
    np.testing.assert_allclose(word_attribution(g, e, [0, 0, 1]), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(word_attribution(2 * g, e, [0, 0, 1]), [4.0, 4.0, 4.0])


# ---- bad input -----------------------------------------------------------------------------


def test_empty_and_overlong_questions() -> None:
    sdlg = SDLG(toy_lm(), ToySemantic())
    for bad in ("", "   ", None):
        with pytest.raises(InputError):
            sdlg.score(bad)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        sdlg.score("x" * 5000)
    long = "where does anna live? " * 10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sdlg.score(long)
    assert result.truncated and any("cut to" in str(w.message) for w in caught)
    assert not sdlg.score(QUESTION).truncated


# ---- equivalence models --------------------------------------------------------------------


def _tiny_bert_folder(tmp_path: Path, labels: dict[int, str], vocab: int = VOCAB_SIZE) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=vocab,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
        num_labels=len(labels),
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    return tmp_path


def test_nli_equivalence_from_a_local_folder(tmp_path: Path, monkeypatch) -> None:
    from edgekit.models.sdlg.semantic import NLIEquivalence, text_ids

    labels = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
    nli = NLIEquivalence(_tiny_bert_folder(tmp_path / "nli", labels))
    assert nli.contradiction == 2 and nli.embedding_matrix.shape == (VOCAB_SIZE, 16)
    q, a = encode(QUESTION), encode("anna lives in hamster")
    att = nli.attribution(q, a)
    assert att.gradients.shape == (1, len(a), 16) and att.signed
    assert np.all(att.token_scores > 0) and att.token_scores[3] == att.token_scores[4]
    x, y = text_ids(q, encode("paris")), text_ids(q, encode("london"))
    assert nli.equivalent(x, x)
    assert isinstance(nli.equivalent(x, y), bool)
    for verdicts, same in (([False, False], True), ([False, True], False), ([True, False], False)):
        monkeypatch.setattr(nli, "_contradicts", lambda pairs, v=verdicts: v)
        nli._cache.clear()
        assert nli.equivalent(x, y) is same  # bidirectional: contradiction either way splits
    with pytest.raises(InputError, match="contradiction"):
        NLIEquivalence(_tiny_bert_folder(tmp_path / "two", {0: "yes", 1: "no"}))
    with pytest.raises(InputError, match="vocabulary"):
        NLIEquivalence(_tiny_bert_folder(tmp_path / "small", labels, vocab=500))
    with pytest.raises(InputError, match="config.json"):
        NLIEquivalence(tmp_path / "missing")


def _tiny_cosine():
    from transformers import BertConfig, BertModel

    from edgekit.models.sdlg.semantic import CosineEquivalence

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
    )
    return CosineEquivalence(0.98, directions=4, bert=BertModel(config).eval())


def test_cosine_attribution_is_unsigned_and_deterministic() -> None:
    sem = _tiny_cosine()
    q, a = encode(QUESTION), encode("in paris")
    first, second = sem.attribution(q, a), sem.attribution(q, a)
    assert first.gradients.shape == (4, 2, 16) and not first.signed
    np.testing.assert_array_equal(first.gradients, second.gradients)
    scores = first.substitution_scores(1, PARIS, np.array([LONDON, ROME]), sem.embedding_matrix)
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))


# ---- torch vs the exported ONNX graph ------------------------------------------------------


def test_sdlg_scores_agree_on_torch_and_onnx(tmp_path: Path) -> None:
    from edgekit.card import GraphSpec
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.sdlg.lm import LMConfig, train_lm
    from edgekit.runtimes import RuntimeOptions, get_runtime

    config = LMConfig(people=4, dim=32, layers=1, heads=2, steps=80, batch_size=16, lr=1e-2)
    model, _ = train_lm(config)
    ids = torch.tensor([prompt_ids(QUESTION)])
    axes = {0: "batch", 1: "sequence"}
    graph = GraphSpec(
        "lm",
        model,
        {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        ["logits"],
        {"input_ids": axes, "attention_mask": axes, "logits": axes},
    )
    path = export_onnx(graph, tmp_path / "lm.onnx", opset=17)
    session = get_runtime("onnxruntime").load(path, "cpu", RuntimeOptions(threads=1))
    sem = _tiny_cosine()
    cfg = SDLGConfig(alternatives=3, samples=4)
    torch_sdlg = SDLG(CausalLM(torch_backend(model), 48), sem, cfg)
    onnx_sdlg = SDLG(CausalLM(runner_backend(session), 48), sem, cfg)
    questions = ["where does anna live?", "what is the job of ben?", "what pet does carl have?"]
    for question in questions:
        a, b = torch_sdlg.score(question), onnx_sdlg.score(question)
        assert a.answer == b.answer and a.alternatives == b.alternatives
        assert a.clusters == b.clusters and a.rows == b.rows
        assert a.entropy == pytest.approx(b.entropy, abs=1e-4)
        sa = torch_sdlg.sampling_baselines(question, seed=3)
        sb = onnx_sdlg.sampling_baselines(question, seed=3)
        assert sa["samples"] == sb["samples"]
        assert sa["semantic_entropy"] == pytest.approx(sb["semantic_entropy"], abs=1e-4)
    assert any(torch_sdlg.score(q).alternatives for q in questions)


def test_summary_per_tier() -> None:
    from edgekit.models.sdlg.study import METHODS, VARIANTS, summarise

    def record(tier: str, incorrect: int, score: float, kinds: list[str]) -> dict:
        return {
            "tier": tier,
            "incorrect": incorrect,
            **{m: score for m in (*METHODS, *VARIANTS)},
            "alternatives": ["x"] * len(kinds),
            "weights": [1.0] + [0.1] * len(kinds),
            "substitutions": kinds,
            "initial_rows": 5,
            "sdlg_rows": 3,
            "sampling_rows": 30,
        }

    records = [
        record("frequent", 0, 0.1, ["value", "question"]),
        record("unseen", 1, 2.0, ["value"]),
        record("unseen", 0, 0.5, ["template", "truncation"]),
        record("unseen", 1, 0.3, []),
    ]
    s = summarise(records)
    assert s["sdlg_auroc"] == pytest.approx(3 / 4)  # wrong {2.0, 0.3} vs right {0.1, 0.5}
    assert s["accuracy_unseen"] == pytest.approx(1 / 3)
    unseen = s["tier_unseen"]
    assert unseen["incorrect"] == 2 and unseen["sdlg_auroc"] == pytest.approx(0.5)
    assert unseen["substitutions"] == {
        "value": 1 / 3,
        "question": 0.0,
        "template": 1 / 3,
        "truncation": 1 / 3,
    }
    assert math.isnan(s["tier_frequent"]["sdlg_auroc"])  # no wrong answer in the tier
    assert s["sdlg_rows_mean"] == 3 and s["sdlg_alternatives_mean"] == 1.25


def test_auroc_intervals_are_paired_over_questions() -> None:
    from edgekit.models.sdlg.study import METHODS, auroc_intervals

    rng = np.random.default_rng(0)
    wrong = (rng.random(200) < 0.25).astype(int)
    noise = rng.normal(size=200)
    separating = wrong * 2.0 + noise  # AUROC about 0.92
    records = [
        {"sdlg": separating[i], "sampling_se": separating[i], "predictive_entropy": noise[i]}
        for i in range(200)
    ]
    assert set(records[0]) == set(METHODS)
    out = auroc_intervals(records, wrong, resamples=400)
    assert 0.8 < out["sdlg_auroc_ci_low"] < out["sdlg_auroc_ci_high"] < 1.0
    # the same scores: the paired difference is exactly 0 in every resample
    assert out["sdlg_minus_sampling_se_auroc_ci_low"] == 0.0
    assert out["sdlg_minus_sampling_se_auroc_ci_high"] == 0.0
    # against a score that ignores the answer (chance): clearly above, the interval excludes 0
    assert out["sdlg_minus_predictive_entropy_auroc_ci_low"] > 0.2
    assert out["predictive_entropy_auroc_ci_low"] < 0.5 < out["predictive_entropy_auroc_ci_high"]
