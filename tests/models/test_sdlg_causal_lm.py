"""SDLG on a causal LM with its own tokenizer (card options ``lm``, ``nli``, ``prompt``, ``stop``):
prompt and stops, candidates from the LM's vocabulary, attribution through text, the card's
evaluate / export / study end to end, bad input, and the default card unchanged.

The LM is a tiny GPT-2 (2 layers, width 64) with a byte-level BPE tokenizer trained here on the
sdlg corpus's sentences (tiny_gpt2.py), fine-tuned for a few seconds on the answers of some
facts so that it answers some questions right and others wrong; the NLI model is a random
1-layer BERT classifier reading the LM's BPE vocabulary (shared ids, as the paper's OPT LM and
DeBERTa NLI model share GPT-2's). Nothing is downloaded, and no score here is a result.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from conftest import onnx_sessions  # noqa: E402
from tiny_gpt2 import BOS, build_tiny_gpt2  # noqa: E402

from edgekit.errors import InputError  # noqa: E402
from edgekit.models.sdlg.card import SDLGCard  # noqa: E402
from edgekit.models.sdlg.corpus import Fact, build_facts  # noqa: E402
from edgekit.models.sdlg.decoding import Generation, beam_search  # noqa: E402
from edgekit.models.sdlg.sdlg import SDLG, SDLGConfig  # noqa: E402
from edgekit.models.sdlg.semantic import CosineEquivalence  # noqa: E402
from edgekit.models.sdlg.text_equivalence import CosineReader, TextEquivalence  # noqa: E402
from edgekit.models.tinylm.causal import CausalLM, torch_backend  # noqa: E402
from edgekit.registry import get_card  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")

PEOPLE = 4  # 16 facts: 5 tuning, 11 evaluated
EVAL = 4  # evaluated questions in the card tests


def _texts() -> list[str]:
    facts = build_facts(PEOPLE)
    questions = [f.question(v) for f in facts for v in (0, 1)]
    return questions + [f.answer(k) for f in facts for k in range(3)]


class ModuleRunner:
    """A runner over a torch (ids, mask) -> logits module."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.inference_mode():
            ids, mask = (torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
            return {"logits": self.module(ids, mask).numpy()}


def _card(folder: Path | str, **options: object) -> SDLGCard:
    card = get_card("sdlg", lm=str(folder), people=PEOPLE, **options)
    card.eval_questions = EVAL
    return card


def _known(card: SDLGCard) -> list[Fact]:
    """The facts the LM is fine-tuned on: half the evaluated questions, half the tuning facts."""
    tuning = card.tuning_facts()
    return card.eval_facts()[: EVAL // 2] + tuning[: len(tuning) // 2]


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny GPT-2 and its BPE tokenizer trained on the corpus sentences."""
    return build_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"), _texts())


@pytest.fixture(scope="module")
def qa_gpt2(tiny_gpt2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_gpt2`` fine-tuned (120 full-batch AdamW steps, seeded) on the ``_known`` facts,
    each asked as the card asks it (evaluated facts: wording 0, tuning facts: wording 1) and
    answered in its three forms: prompt, " answer", newline."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    card = _card(tiny_gpt2)
    vocab = card.vocabulary()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_gpt2), local_files_only=True)
    evaluated = set(card.eval_facts())
    rows = []
    for fact in _known(card):
        head = vocab.feed_ids(fact.question(0 if fact in evaluated else 1), "")
        for form in range(3):
            tail = tokenizer(f" {fact.answer(form)}\n", add_special_tokens=False)["input_ids"]
            rows.append((head, tail))
    width = max(len(h) + len(t) for h, t in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (head, tail) in enumerate(rows):
        n = len(head) + len(tail)
        ids[i, :n], mask[i, :n] = torch.tensor(head + tail), 1
        labels[i, len(head) : n] = torch.tensor(tail)  # the answer and its newline
    torch.manual_seed(0)
    model = GPT2LMHeadModel.from_pretrained(str(tiny_gpt2), local_files_only=True).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(120):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    folder = tmp_path_factory.mktemp("qa-gpt2")
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_nli(tiny_gpt2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 1-layer BERT NLI classifier over the LM's BPE vocabulary, its tokenizer
    marking a pair "BOS a BOS b BOS" with segment ids 0 / 1."""
    from tokenizers import Tokenizer, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    bpe = Tokenizer.from_file(str(tiny_gpt2 / "tokenizer.json"))
    bos = bpe.token_to_id(BOS)
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {BOS}", pair=f"{BOS} $A {BOS} $B:1 {BOS}:1", special_tokens=[(BOS, bos)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=BOS, eos_token=BOS, pad_token=BOS
    )
    labels = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}
    config = BertConfig(
        vocab_size=bpe.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, max_position_embeddings=128,
        num_labels=3, id2label=labels, label2id={v: k for k, v in labels.items()},
        pad_token_id=bos,
    )  # fmt: skip
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-nli")
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _tiny_cosine() -> CosineEquivalence:
    """A random 1-layer BERT over MiniLM's WordPiece vocabulary as the cosine model."""
    from transformers import BertConfig, BertModel

    from edgekit.models.tinylm.tokens import VOCAB_SIZE

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=128,
    )  # fmt: skip
    return CosineEquivalence(0.98, directions=4, bert=BertModel(config).eval())


# ---- prompt, answers, stops ----------------------------------------------------------------


def test_greedy_answers_decode_to_text_and_stop_at_a_newline_or_eos(qa_gpt2: Path) -> None:
    card = _card(qa_gpt2)
    vocab = card.vocabulary()
    tokenizer = vocab.tokenizer
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    assert len(newline) == 1 and newline[0] in vocab.stop_ids
    assert tokenizer.eos_token_id in vocab.stop_ids
    assert card.max_len() == 256  # the model's position table
    fact = _known(card)[0]
    prompt, question_ids, truncated = vocab.prefix(fact.question(0), 64)
    assert prompt == tokenizer(f"Question: {fact.question(0)}\nAnswer:")["input_ids"]
    assert tokenizer.decode(question_ids) == fact.question(0) and not truncated
    lm = CausalLM(torch_backend(card.lm_module()), card.max_len())
    greedy = beam_search(lm, prompt, 1, 12, stop=vocab.stop_ids)
    answer = vocab.decode(greedy.tokens)
    assert greedy.finished and answer in {fact.answer(k) for k in range(3)}
    assert all(t not in vocab.stop_ids for t in greedy.tokens)
    # stop=eos: the newline no longer ends the answer, it is generated and decoding goes on
    eos_only = _card(qa_gpt2, stop="eos").vocabulary()
    assert newline[0] not in eos_only.stop_ids and eos_only.stop_ids == {tokenizer.eos_token_id}
    longer = beam_search(lm, prompt, 1, 12, stop=eos_only.stop_ids)
    assert longer.tokens[: len(greedy.tokens) + 1] == [*greedy.tokens, newline[0]]
    # a question over the budget keeps its first tokens and the prompt fits
    long_question = " ".join([fact.question(0)] * 6)
    with pytest.warns(UserWarning, match="cut to its first 10"):
        prompt, question_ids, truncated = vocab.prefix(long_question, 10)
    assert truncated and len(question_ids) <= 10 and len(prompt) <= vocab.prompt_tokens + 10


# ---- candidates and attribution through text ------------------------------------------------


def test_candidates_come_from_the_lm_vocabulary_and_distribution(qa_gpt2: Path) -> None:
    card = _card(qa_gpt2)
    vocab, model = card.vocabulary(), card.lm_module()
    lm_vocab = model.model.get_input_embeddings().weight.shape[0]
    semantic = TextEquivalence(CosineReader(_tiny_cosine()), vocab)
    sdlg = SDLG(CausalLM(torch_backend(model), card.max_len()), semantic, SDLGConfig(), vocab)
    fact = _known(card)[0]
    prompt, question_ids, _ = vocab.prefix(fact.question(0), sdlg.max_question)
    # y0 = the fact's sentence answer, teacher-forced: several words, so attribution and
    # substitution scores are computed
    tokens = vocab.tokenizer(f" {fact.answer(2)}", add_special_tokens=False)["input_ids"]
    dists = [sdlg.lm.next_log_probs([prompt + tokens[:t]])[0] for t in range(len(tokens))]
    lps = [float(d[t]) for d, t in zip(dists, tokens, strict=True)]
    initial = Generation(tokens, sum(lps), lps, False, dists)
    groups = vocab.word_groups(initial.tokens)
    assert groups[-1] > 0
    candidates = sdlg.candidates(question_ids, initial)
    assert candidates
    attribution = semantic.attribution(question_ids, initial.tokens)
    for c in candidates:
        assert 0 <= c.token < min(lm_vocab, vocab.size)  # an id of the LM's own vocabulary
        assert c.token != initial.tokens[c.position]
        starts = c.position == 0 or groups[c.position] != groups[c.position - 1]
        assert starts  # only a word's first token is replaced
        p = math.exp(initial.distributions[c.position][c.token])
        assert p > sdlg.config.token_prob and c.importance == pytest.approx(p)
        if c.token in vocab.stop_ids:
            assert groups[c.position] > 0  # a truncation, never of the first word
        else:
            assert c.token not in vocab.special_ids
        # the substitution geometry: the equivalence model's embedding of each LM token's
        # text, RMS over the cosine model's directions of cos(E[o] - E[v], g_t)
        original = initial.tokens[c.position]
        delta = semantic.embedding_matrix[original] - semantic.embedding_matrix[c.token]
        g = attribution.gradients[:, c.position]  # (R, 16)
        cos = g @ delta / np.maximum(np.linalg.norm(g, axis=1) * np.linalg.norm(delta), 1e-12)
        assert c.substitution == pytest.approx(np.sqrt((cos**2).mean()))
    # every LM token with P > token_prob at a word start is there (none lost on the way)
    for t in {c.position for c in candidates}:
        likely = set(np.flatnonzero(np.exp(initial.distributions[t]) > 1e-3).tolist())
        likely -= {initial.tokens[t]} | (vocab.special_ids - vocab.stop_ids)
        if groups[t] == 0:
            likely -= vocab.stop_ids
        assert likely == {c.token for c in candidates if c.position == t}


def test_attribution_maps_the_readers_tokens_to_the_lm_tokens(
    qa_gpt2: Path, tiny_nli: Path
) -> None:
    from edgekit.models.sdlg.text_equivalence import NLIReader
    from edgekit.models.tinylm.tokens import encode

    vocab = _card(qa_gpt2).vocabulary()
    tokenizer = vocab.tokenizer
    question = "where does anna live?"
    q_ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    answer = tokenizer(" anna lives in tokyo", add_special_tokens=False)["input_ids"]
    text, spans = vocab.answer_spans(answer)
    assert text == "anna lives in tokyo" and [text[a:b] for a, b in spans][-1].strip() == "tokyo"
    groups = vocab.word_groups(answer)
    assert groups[0] == 0 and groups[-1] == 3  # four words, BPE pieces joined by spaces
    # the cosine reader: MiniLM WordPiece, one piece per word here
    cosine = TextEquivalence(CosineReader(_tiny_cosine()), vocab)
    assert cosine.text(q_ids, answer) == f"{question} {text}"
    att = cosine.attribution(q_ids, answer)
    assert att.gradients.shape == (4, len(answer), 16) and not att.signed
    reader = cosine.reader.cosine.attribution(encode(question), encode(text))
    first_of_word = [groups.index(w) for w in range(4)]
    np.testing.assert_allclose(att.gradients[:, first_of_word], reader.gradients, atol=1e-12)
    for w in range(4):
        members = [t for t, g in enumerate(groups) if g == w]
        assert np.ptp(att.token_scores[members]) == 0 and att.token_scores[members[0]] > 0
    # the NLI reader over the LM's own ids: the same tokens, so the same rows and gradients
    nli = TextEquivalence(NLIReader(tiny_nli), vocab)
    att = nli.attribution(q_ids, answer)
    assert att.signed and att.gradients.shape == (1, len(answer), 16)
    found = nli.reader.attribution(question, text)
    assert found.gradients.shape == att.gradients.shape  # one NLI token per LM token
    np.testing.assert_allclose(att.gradients, found.gradients, atol=1e-12)
    weight = nli.reader.embeddings.weight.detach().numpy()
    np.testing.assert_allclose(nli.embedding_matrix[np.array(answer)], weight[answer], atol=1e-7)
    assert not nli.embedding_matrix[tokenizer.eos_token_id].any()  # no text: the zero vector
    x = f"{question} {text}"
    assert nli.equivalent(x, x) and isinstance(nli.equivalent(x, f"{question} paris"), bool)


# ---- the card ------------------------------------------------------------------------------


def test_card_scores_sdlg_se_and_pe_on_another_lm(
    qa_gpt2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    card = _card(qa_gpt2)
    assert card.train() is None  # pretrained: nothing to train
    runner = ModuleRunner(card.lm_module())
    metrics = card.evaluate({"lm": runner})
    records = card._study(runner)["records"]
    assert len(records) == EVAL
    for r in records:
        assert all(math.isfinite(r[m]) for m in ("sdlg", "sampling_se", "predictive_entropy"))
        assert isinstance(r["answer"], str) and "\n" not in r["answer"]
    wrong = [r["incorrect"] for r in records]
    assert 0 < sum(wrong) < EVAL  # the fine-tuned facts right, the others wrong
    assert metrics["accuracy"] == pytest.approx(1 - sum(wrong) / EVAL)
    for key in ("sdlg_auroc", "sampling_se_auroc", "predictive_entropy_auroc"):
        assert 0.0 <= metrics[key] <= 1.0
        assert metrics[f"{key}_ci_low"] <= metrics[key] <= metrics[f"{key}_ci_high"]
    assert metrics["sdlg_rows_mean"] > 0 and metrics["sampling_rows_mean"] > 0


def test_card_exports_the_lms_logits_graph_with_its_vocabulary(
    qa_gpt2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    card = _card(qa_gpt2)
    vocab_size = card.local_lm().vocab_size
    (graph,) = card.graphs()
    golden = card.golden_inputs()["lm"]
    assert golden["input_ids"].max() < vocab_size
    with torch.inference_mode():
        logits = graph.module(*(torch.from_numpy(golden[k]) for k in graph.example_inputs))
    assert logits.shape == (4, golden["input_ids"].shape[1], vocab_size)
    pre = card.preprocessing()
    assert pre["vocab_size"] == vocab_size and pre["max_length"] == 256
    assert set(pre["stop_ids"]) == set(card.vocabulary().stop_ids)
    assert Path(card.assets()["tokenizer.json"]) == qa_gpt2.resolve() / "tokenizer.json"
    calibration = card.calibration_data(2)["lm"]
    assert len(calibration) == 2 and calibration[0]["input_ids"].shape[0] == 1
    sessions = onnx_sessions([graph], tmp_path / "onnx")
    agreement = card.agreement({"lm": ModuleRunner(graph.module)}, sessions)
    assert agreement["next_token_top1_agreement"] == 1.0
    assert agreement["answer_flip_rate"] == 0.0 and agreement["sdlg_entropy_max_error"] < 1e-4


def test_study_with_an_nli_model_end_to_end(
    qa_gpt2: Path, tiny_nli: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.models.sdlg import experiment

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    card = _card(qa_gpt2, nli=str(tiny_nli))
    default_key = get_card("sdlg", people=PEOPLE).lm_key()
    assert len({card.lm_key(), _card(qa_gpt2).lm_key(), default_key}) == 3
    report = experiment.run(card, tmp_path / "out", show_progress=False)
    assert report["equivalence"]["model"] == f"NLI model {tiny_nli}"
    assert report["lm"]["fingerprint"] == card.local_lm().fingerprint
    assert report["split"]["disjoint"] and report["summary"]["questions"] == 11
    assert math.isfinite(report["summary"]["sdlg_auroc"])
    assert json.loads((tmp_path / "out" / "report.json").read_text())["model"] == "sdlg"
    assert list((tmp_path / "cache" / "sdlg").glob("tuning-*.json"))  # tuned once, cached


def test_bad_folders_and_options_are_input_errors(tiny_gpt2: Path, tmp_path: Path) -> None:
    expected = "sdlg option lm: expected a local folder holding a Hugging Face causal LM"
    with pytest.raises(InputError, match=f"{expected}.*no such folder"):
        _card(tmp_path / "missing").graphs()
    with pytest.raises(InputError, match=f"{expected}.*no config.json"):
        _card(tmp_path).evaluate({"lm": None})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InputError, match=f"{expected}.*no weight file"):
        _card(tmp_path).train()
    with pytest.raises(InputError, match=f"{expected}.*not a path"):
        get_card("sdlg", lm=3).vocabulary()
    nli = "sdlg option nli: expected a local folder holding a Hugging Face sequence classifier"
    with pytest.raises(InputError, match=f"{nli}.*no such folder"):
        get_card("sdlg", nli=str(tmp_path / "missing")).semantic()
    with pytest.raises(InputError, match="need lm=FOLDER"):
        get_card("sdlg", stop="eos").lm_config()
    with pytest.raises(InputError, match=r"\['dim', 'steps'\] set the in-repo tiny LM"):
        get_card("sdlg", lm=str(tiny_gpt2), dim=32, steps=10).vocabulary()
    with pytest.raises(InputError, match="unknown"):
        get_card("sdlg", llm=str(tiny_gpt2)).lm_config()
    with pytest.raises(InputError, match="stop must be one of"):
        _card(tiny_gpt2, stop="period").vocabulary()
    with pytest.raises(InputError, match=r"must hold \{question\} once"):
        _card(tiny_gpt2, prompt="Q: A:").vocabulary()
    assert _card(tiny_gpt2, max_len=40).max_len() == 40  # caps the model's 256 positions


# ---- the default card, unchanged ------------------------------------------------------------

SMALL = {"people": 4, "dim": 32, "layers": 1, "heads": 2, "steps": 80, "batch_size": 16, "lr": 1e-2}
# the default card's numbers on SMALL (its first 4 evaluated questions), computed before the
# ``lm`` option existed: (answer, SDLG, sampling SE, predictive entropy, SDLG rows, sampling rows)
# on an AVX-512 Xeon. The LM is trained in the test, and training on another SIMD width rounds
# differently: on an AVX2-only EPYC the scores moved by up to 2.1e-3 relative (answers and row
# counts identical), so the scores are held to RECORD_RTOL and the rest exactly.
RECORD_RTOL = 1e-2
DEFAULT_RECORDS = [
    ("a a", 1.8133686762903274, 10.327833968834112, 10.674179812354506, 14, 41),
    ("blue", 1.854068968322702, 11.29001607865971, 12.05108161665605, 18, 34),
    ("a", 1.6623620098577918, 4.910038133306041, 5.4178568817645125, 13, 35),
    ("a", 1.9438927972163356, 7.982243614872384, 8.673425261272778, 13, 44),
]
# LMConfig().key(), LMConfig(**SMALL).key(), the default threshold key, the default tuning key
DEFAULT_KEYS = ("b5f4c237ff8dec87", "bf55ce68ca2fae41", "d36594a310bef51a", "05e56e86e3473c74")


def test_default_card_outputs_and_cache_keys_are_unchanged(
    tiny_nli: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.models.sdlg.corpus import split_facts
    from edgekit.models.sdlg.experiment import BEAMS
    from edgekit.models.sdlg.lm import LMConfig
    from edgekit.models.sdlg.semantic import threshold_key
    from edgekit.models.sdlg.tuning import tuning_key

    tuning = split_facts(build_facts())[0]
    keys = (
        LMConfig().key(),
        LMConfig(**SMALL).key(),
        threshold_key(tuning),
        tuning_key(LMConfig().key(), SDLGConfig(), BEAMS, 10, tuning),
    )
    assert keys == DEFAULT_KEYS
    assert get_card("sdlg").lm_key() == DEFAULT_KEYS[0]
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    card = get_card("sdlg", **SMALL)
    card.eval_questions = 4
    assert card.vocabulary().stop_ids == {102} and card.max_len() == 48
    runner = ModuleRunner(card.graphs()[0].module)
    metrics = card.evaluate({"lm": runner})
    assert (metrics["sdlg_rows_mean"], metrics["sampling_rows_mean"]) == (14.5, 38.5)
    records = card._study(runner)["records"]
    got = [
        (r["answer"], r["sdlg"], r["sampling_se"], r["predictive_entropy"], r["sdlg_rows"],
         r["sampling_rows"])
        for r in records
    ]  # fmt: skip
    for mine, before in zip(got, DEFAULT_RECORDS, strict=True):
        assert mine[0] == before[0] and mine[4:] == before[4:]
        np.testing.assert_allclose(mine[1:4], before[1:4], rtol=RECORD_RTOL)
    # the in-repo LM with option nli: its WordPiece answers reach the NLI model through text
    card = get_card("sdlg", nli=str(tiny_nli), **SMALL)
    card.eval_questions = 2
    assert card.lm_key() not in DEFAULT_KEYS
    records = card._study(ModuleRunner(card.graphs()[0].module))["records"]
    assert [r["answer"] for r in records] == [b[0] for b in DEFAULT_RECORDS[:2]]  # same LM
    assert all(math.isfinite(r["sdlg"]) and r["sdlg_clusters"] >= 1 for r in records)
