"""Con-J: preference data, judge format, decoding, sequence log-probs, DPO and Bradley-Terry
maths, contrastive pair construction with a scripted judge, the training cache and ONNX vs
torch judgments."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.con_j.contrastive import build_contrastive
from edgekit.models.con_j.dpo import dpo_loss, fit_dpo, reference_log_probs
from edgekit.models.con_j.fast_decode import cached_decoder, generate_cached
from edgekit.models.con_j.generate import (
    generate,
    logits_decoder,
    runner_next_logits,
    sequence_batch,
    sequence_log_probs,
    torch_next_logits,
)
from edgekit.models.con_j.judge_format import (
    gold_judgment,
    judgment_ids,
    pair_prompt,
    pair_verdict,
    parse_verdict,
    prompt_ids,
    rationale_value,
    vocab,
)
from edgekit.models.con_j.modules import JudgeNextToken
from edgekit.models.con_j.prefs import build_prefs, make_pair
from edgekit.models.con_j.reward_model import bradley_terry_loss, bt_verdicts, fit_bradley_terry
from edgekit.models.con_j.train import ConJConfig
from edgekit.models.sdlg.corpus import Fact
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.models.tinylm.tokens import EOS_ID, SEP_ID, VOCAB_SIZE, encode

torch.set_num_threads(1)

FACT = Fact("anna", "city", "paris", "frequent")


def _tiny_lm(seed: int = 0) -> TinyCausalLM:
    torch.manual_seed(seed)
    return TinyCausalLM(VOCAB_SIZE, dim=16, layers=1, heads=2, max_len=48).eval()


# ---- data and format -----------------------------------------------------------------------


def test_pairs_are_position_balanced_biased_in_training_and_split_by_fact() -> None:
    data = build_prefs(people=20, seed=1, pairs_per_fact=4, heldout_per_fact=2)
    training = data.training()
    assert len(training) == 4 * sum(s != "test" for s in data.split_of.values())
    for fact in data.facts:
        own = [p for p in data.pairs if p.fact == fact]
        assert sum(p.better == "a" for p in own) == len(own) // 2
        wrong = [p.wrong_value for p in own]
        assert len(set(wrong)) == len(wrong) and fact.value not in wrong
        assert {p.split for p in own} == {data.split_of[fact]}
    long_better = np.mean([not p.worse_is_long for p in data.select("train", False)])
    assert 0.7 < long_better < 0.9  # the train labels' length bias (0.8)
    assert 0.35 < np.mean([p.worse_is_long for p in data.select("seed", False)]) < 0.65
    assert 0.35 < np.mean([p.worse_is_long for p in data.heldout_unseen()]) < 0.65
    assert all(p.held_out for p in data.heldout_unseen() + data.heldout_seen())
    test_facts = {p.fact for p in data.heldout_unseen()}
    assert not test_facts & {p.fact for p in training}
    pair = make_pair(FACT, "rome", "b", long_better=True, variant=0, short_form=1)
    assert (pair.answer_a, pair.answer_b) == ("in rome", "anna lives in paris")
    assert pair.long == "b" and not pair.worse_is_long
    with pytest.raises(InputError, match="pairs_per_fact"):
        build_prefs(pairs_per_fact=3)
    with pytest.raises(InputError, match="differ"):
        make_pair(FACT, "paris", "a", True, 0, 0)
    with pytest.raises(InputError, match="better"):
        make_pair(FACT, "rome", "c", True, 0, 0)


def test_prompt_judgment_and_verdict_parsing() -> None:
    pair = make_pair(FACT, "rome", "a", long_better=False, variant=0, short_form=0)
    prompt = pair_prompt(pair)
    assert prompt[-1] == SEP_ID and prompt.count(SEP_ID) == 3
    hinted = pair_prompt(pair, "b")
    assert hinted[: len(prompt)] == prompt and hinted[len(prompt) :] == [
        *encode("hint :"),
        vocab().b,
        SEP_ID,
    ]
    gold = gold_judgment(pair)
    assert gold == [*encode("anna lives in paris . better : paris"), EOS_ID]
    assert (pair.answer_a, pair.answer_b) == ("paris", "anna lives in rome")
    assert parse_verdict(gold[:-1], pair.answer_a, pair.answer_b) == "a"
    assert rationale_value(gold[:-1], "city") == "paris"
    answers = (pair.answer_a, pair.answer_b)
    assert parse_verdict(encode("anna lives in rome . better : rome"), *answers) == "b"
    assert parse_verdict(encode("better : paris better : rome"), *answers) == "b"  # the last
    assert parse_verdict(encode("anna lives in rome . better :"), *answers) is None
    assert parse_verdict(encode("better : oslo"), *answers) is None
    assert parse_verdict(encode("anna lives in paris"), *answers) is None
    assert judgment_ids("anna lives in oslo") == [
        *encode("anna lives in oslo . better : oslo"),
        EOS_ID,
    ]
    with pytest.raises(InputError, match="verdict"):
        pair_prompt(pair, hint="c")
    with pytest.raises(InputError, match="answer a has 7 tokens"):
        prompt_ids("where does anna live?", "one two three four five six seven", "rome")


# ---- decoding and log-probabilities --------------------------------------------------------


def _scripted(default: str = "a"):  # noqa: ANN202
    """A judge that writes "anna lives in paris . better : value" and stops; value = the value
    (last slot token) of the hinted answer if the prompt has a hint, else of answer ``default``."""
    v = vocab()
    script = [*encode("anna lives in paris"), v.period, v.better, v.colon]
    hint_id = encode("hint")[0]

    def next_logits(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = np.zeros((len(ids), VOCAB_SIZE), np.float32)
        for row, (seq, m) in enumerate(zip(ids, mask, strict=True)):
            seq = seq[: m.sum()].tolist()
            seps = [i for i, t in enumerate(seq) if t == SEP_ID]
            values = {v.a: seq[seps[1] - 1], v.b: seq[seps[2] - 1]}  # answers' last tokens
            hint = seq[seq.index(hint_id) + 2] if hint_id in seq else None
            quote = values[hint] if hint is not None else values[v.a if default == "a" else v.b]
            k = len(seq) - seps[-1] - 1  # tokens written after the prompt
            target = (script + [quote])[k] if k <= len(script) else EOS_ID
            out[row, target] = 20.0
        return out

    return next_logits


def test_greedy_and_sampled_generation() -> None:
    pair = make_pair(FACT, "rome", "b", True, 0, 0)
    out = generate(_scripted(), [pair_prompt(pair), pair_prompt(pair, "b")])
    assert (pair.answer_a, pair.answer_b) == ("rome", "anna lives in paris")
    assert out[0] == encode("anna lives in paris . better : rome")
    assert pair_verdict(out[0], pair) == "a" and pair_verdict(out[1], pair) == "b"
    # sampling from a known distribution: first token 30% / 70%, then EOS (a 1100-token vocab)
    ids_x, ids_y = vocab().a, vocab().b

    def two_way(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        logits = np.full((len(ids), 1100), -1e9)
        first = mask.sum(axis=1) == 2
        logits[first, ids_x], logits[first, ids_y] = math.log(0.3), math.log(0.7)
        logits[~first, EOS_ID] = 0.0
        return logits

    drawn = generate(two_way, [[101, 102]] * 2000, np.random.default_rng(0))
    assert all(len(d) == 1 for d in drawn)
    share = np.mean([d[0] == ids_x for d in drawn])
    assert abs(share - 0.3) < 0.035  # 3.4 standard errors
    with pytest.raises(InputError, match="non-empty"):
        generate(two_way, [])
    with pytest.raises(InputError, match="room"):
        generate(two_way, [[101] * 48])


def test_cached_decoding_matches_full_reruns() -> None:
    lm = _tiny_lm(2)
    with torch.no_grad():  # sharpen the random LM so greedy paths have no near-ties
        lm.tokens.weight.mul_(40.0)
    prompts = [[101, 2000 + i, 2001, 102] + [3000 + j for j in range(i % 5)] for i in range(9)]
    full = generate(torch_next_logits(JudgeNextToken(lm)), prompts)
    assert generate_cached(lm, prompts) == full
    assert all(len(t) > 0 for t in full)
    sampled = generate_cached(lm, prompts, np.random.default_rng(0), temperature=1.0)
    assert generate_cached(lm, prompts, np.random.default_rng(0)) == sampled
    with pytest.raises(InputError, match="room"):
        generate_cached(lm, [[101] * 48])


def test_sequence_log_probs_and_judge_head_match_the_full_forward() -> None:
    lm = _tiny_lm()
    prompts = [[101, 2073, 2515, 102], [101, 2054, 102]]
    judgments = [[1037, 1038, EOS_ID], [2024, EOS_ID]]
    ids, mask, targets = sequence_batch(prompts, judgments)
    with torch.no_grad():
        got, count = sequence_log_probs(lm, ids, mask, targets)
    with torch.no_grad():
        full = torch.log_softmax(lm(ids, mask), dim=-1)  # (B, S, V)
    for b, (p, j) in enumerate(zip(prompts, judgments, strict=True)):
        row = p + j
        expected = sum(float(full[b, i, row[i + 1]]) for i in range(len(p) - 1, len(row) - 1))
        assert float(got[b]) == pytest.approx(expected, abs=1e-4)
        assert int(count[b]) == len(j)
    head = JudgeNextToken(lm)
    with torch.no_grad():
        nxt = head(ids, mask)
        logits = lm(ids, mask)
    last = mask.sum(dim=1) - 1
    torch.testing.assert_close(nxt, logits[torch.arange(2), last])


# ---- DPO, contrastive pairs, Bradley-Terry -------------------------------------------------


def test_dpo_loss_by_hand() -> None:
    pc, pr = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -2.0])
    rc, rr = torch.tensor([-3.5, -4.0]), torch.tensor([-3.5, -3.0])
    # margins: (1 - 0) = 1 and (-3 - (-1)) = -2
    expected = -(math.log(1 / (1 + math.exp(-0.1))) + math.log(1 / (1 + math.exp(0.2)))) / 2
    assert float(dpo_loss(pc, pr, rc, rr, beta=0.1)) == pytest.approx(expected, rel=1e-6)
    assert float(dpo_loss(rc, rr, rc, rr)) == pytest.approx(math.log(2))
    pc.requires_grad_(True)
    dpo_loss(pc, pr, rc, rr).backward()
    assert (pc.grad < 0).all()  # descending the loss raises the chosen log-probability
    with pytest.raises(InputError, match="beta"):
        dpo_loss(pc, pr, rc, rr, beta=0.0)


def test_contrastive_pairs_use_samples_and_fall_back_to_hints() -> None:
    pairs = [make_pair(FACT, w, b, True, 0, 0) for w, b in (("rome", "a"), ("oslo", "b"))]
    rng = np.random.default_rng(0)
    decode = logits_decoder(_scripted("a"))
    out, stats = build_contrastive(decode, pairs, rng, samples=3, hint_samples=2)
    assert stats["sampled_accuracy"] == pytest.approx(0.5)  # always "a": right on one pair
    by_index = {c.index: c for c in out}
    assert set(by_index) == {0, 1}
    # pair 0 (a better): every sample is positive, the negative comes from the wrong hint
    assert by_index[0].chosen_source == "sampled" and by_index[0].rejected_source == "hint"
    assert pair_verdict(by_index[0].chosen[:-1], pairs[0]) == "a"
    assert pair_verdict(by_index[0].rejected[:-1], pairs[0]) == "b"
    # pair 1 (b better): every sample is negative, the positive is the hint-driven one
    assert by_index[1].chosen_source == "hint" and by_index[1].rejected_source == "sampled"
    assert pair_verdict(by_index[1].chosen[:-1], pairs[1]) == "b"
    assert all(c.chosen[-1] == EOS_ID and c.rejected[-1] == EOS_ID for c in out)
    assert stats["positive_hint"] == 1 and stats["negative_hint"] == 1
    # without hint sampling, no pair has both sides
    none, stats = build_contrastive(decode, pairs, rng, samples=3, hint_samples=0)
    assert not none and stats["dropped"] == 2


def test_dpo_raises_the_chosen_margin_and_keeps_the_reference() -> None:
    reference = _tiny_lm(1)
    pairs = [make_pair(FACT, w, "a", True, 0, 0) for w in ("rome", "oslo", "lima")]
    from edgekit.models.con_j.contrastive import ContrastivePair

    chosen = judgment_ids("anna lives in paris")
    rejected = judgment_ids("anna lives in rome")
    contrastive = [ContrastivePair(i, chosen, rejected, "sampled", "hint") for i in range(3)]
    before = [p.detach().clone() for p in reference.parameters()]
    policy, log = fit_dpo(reference, pairs, contrastive, steps=6, lr=1e-2, batch_size=3)
    for p, q in zip(before, reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    ref_c, ref_r = reference_log_probs(reference, pairs, contrastive)
    pol_c, pol_r = reference_log_probs(policy, pairs, contrastive)
    assert float(((pol_c - pol_r) - (ref_c - ref_r)).min()) > 1.0
    assert log["dpo"][-1] < log["dpo"][0] and log["dpo"][0] == pytest.approx(math.log(2))


def test_bradley_terry_loss_and_fit() -> None:
    good, bad = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0))) / 2
    assert float(bradley_terry_loss(good, bad)) == pytest.approx(expected)
    rng = np.random.default_rng(0)
    w = rng.normal(size=8)
    x1, x2 = rng.normal(size=(2, 300, 8)).astype(np.float32)
    first_better = (x1 @ w) > (x2 @ w)
    better = np.where(first_better[:, None], x1, x2)
    worse = np.where(first_better[:, None], x2, x1)
    head, losses = fit_bradley_terry(better[:200], worse[:200], hidden=16, epochs=300)
    assert losses[-1] < 0.3 < losses[0]
    with torch.no_grad():
        ra = head(torch.from_numpy(x1[200:])).numpy()
        rb = head(torch.from_numpy(x2[200:])).numpy()
    verdicts = np.array(bt_verdicts(ra, rb))
    assert np.mean((verdicts == "a") == first_better[200:]) > 0.85
    with pytest.raises(InputError, match="equal"):
        fit_bradley_terry(better, worse[:10])


# ---- training cache, card, ONNX --------------------------------------------------------------

TINY = {
    "people": 3,
    "pairs_per_fact": 2,
    "heldout_per_fact": 1,
    "lm_dim": 16,
    "lm_layers": 1,
    "lm_heads": 2,
    "lm_steps": 5,
    "sft_steps": 3,
    "sft_batch": 4,
    "samples": 2,
    "hint_samples": 1,
    "dpo_steps": 2,
    "dpo_batch": 2,
    "bt_hidden": 8,
    "bt_epochs": 5,
}


def test_training_is_cached_and_onnx_judgments_match_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    from edgekit.card import GraphSpec
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.con_j.card import ConJCard
    from edgekit.models.con_j.evaluate import judge_records
    from edgekit.models.con_j.graphs import judge_feeds
    from edgekit.models.con_j.train import train_conj, train_sft
    from edgekit.runtimes import RuntimeOptions, get_runtime

    config = ConJConfig(**TINY)  # the Bradley-Terry stage (MiniLM) is left to the experiment
    sft, _ = train_sft(config)
    first = train_conj(config, sft)[0]
    sft_again, _ = train_sft(config)
    again, _, _, log = train_conj(config, sft_again)
    assert len(list((tmp_path / "con-j").glob("conj-*.pt"))) == 1
    assert len(list((tmp_path / "con-j").glob("sft-*.pt"))) == 1
    for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    assert log["stats"]["preference_pairs"] == len(config.prefs().training())
    assert ConJConfig(**(TINY | {"beta": 0.2})).key("conj") != config.key("conj")
    assert ConJConfig(**(TINY | {"beta": 0.2})).key("sft") == config.key("sft")
    # the judge graph only: the reward graph holds MiniLM (slow to export in a unit test)
    pairs = ConJCard(**TINY).eval_pairs()
    feeds = judge_feeds([pair_prompt(p) for p in pairs[:2]])
    judge = JudgeNextToken(again).eval()
    spec = GraphSpec(
        "judge",
        judge,
        {k: torch.from_numpy(v) for k, v in feeds.items()},
        ["next_logits"],
        {
            "input_ids": {0: "b", 1: "s"},
            "attention_mask": {0: "b", 1: "s"},
            "next_logits": {0: "b"},
        },
    )
    runner = get_runtime("onnxruntime").load(
        export_onnx(spec, tmp_path / "judge.onnx", opset=17), "cpu", RuntimeOptions(threads=1)
    )
    ref = judge_records(logits_decoder(torch_next_logits(judge)), pairs)
    got = judge_records(logits_decoder(runner_next_logits(runner)), pairs)
    cached = judge_records(cached_decoder(again), pairs)
    assert [r["judgment"] for r in got] == [r["judgment"] for r in ref]
    assert [r["judgment"] for r in cached] == [r["judgment"] for r in ref]


def test_accuracy_intervals_and_paired_differences() -> None:
    from edgekit.models.con_j.evaluate import summarise
    from edgekit.models.con_j.experiment import paired_differences

    rng = np.random.default_rng(0)
    right = rng.random(300) < 0.8
    records = [
        {"correct": bool(c), "tier": "frequent", "worse_is_long": False, "verdict": "a"}
        for c in right
    ]
    s = summarise(records)
    assert s["accuracy_ci_low"] < s["accuracy"] < s["accuracy_ci_high"]
    assert s["accuracy_ci_low"] > 0.5  # 80 % of 300: clearly above chance
    coin = rng.random(300) < 0.5
    out = paired_differences(
        {
            "sft": {"seen": coin},
            "conj": {"seen": right},
            "positives": {"seen": right.copy()},
        }
    )
    diff, low, high = out["conj - sft"]["seen"]
    assert diff == pytest.approx(right.mean() - coin.mean()) and 0 < low < diff < high
    assert out["positives - conj"]["seen"] == [0.0, 0.0, 0.0]  # same verdicts: no difference
    assert "conj - bt" not in out  # a method that was not run is left out


def test_bad_options_are_typed_errors() -> None:
    from edgekit.models.con_j.card import ConJCard

    with pytest.raises(InputError, match="ConJConfig"):
        ConJCard(epochs=3)
    with pytest.raises(InputError, match="samples"):
        ConJConfig(samples=1)
    with pytest.raises(InputError, match="beta"):
        ConJConfig(beta=0.0)
