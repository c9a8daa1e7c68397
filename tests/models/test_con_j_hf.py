"""Con-J on a transformers causal LM from a local folder: free-text verdict parsing, the text
prompt, loading, seeded sampling, judgment log-probs against a manual forward pass, the shared
contrastive selection (reproduces build_contrastive), DPO on a tiny random GPT-2 with a frozen
reference, train_hf_conj end to end, and ``edgekit eval con-j --option judge=DIR``."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import minilm_fast_tokenizer

from edgekit.errors import InputError
from edgekit.models.con_j.hf_judge import (
    HFJudge,
    balanced_pairs,
    dpo_step_loss,
    hf_contrastive,
    judge_body,
    parse_verdict,
    train_hf_conj,
    verdict_accuracy,
)
from edgekit.models.con_j.prefs import make_pair
from edgekit.models.sdlg.corpus import Fact

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

FACT = Fact("anna", "city", "paris", "frequent")
PAIRS = [
    make_pair(FACT, w, b, lb, 0, 0)
    for w, b, lb in (("rome", "a", True), ("oslo", "b", False), ("lima", "a", False))
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A random 1-layer GPT-2 with the MiniLM WordPiece tokenizer, saved to a local folder."""

    folder = tmp_path_factory.mktemp("tiny-gpt2-judge")
    tokenizer = minilm_fast_tokenizer()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=256, n_embd=16, n_layer=1, n_head=2,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ---- text format ----------------------------------------------------------------------------
def test_parse_verdict_on_free_text() -> None:
    assert parse_verdict("Better: A") == "a"
    assert parse_verdict("better:b") == "b"
    assert parse_verdict("better : a") == "a"  # WordPiece decoding
    assert parse_verdict("Paris is right.\nBetter: B, since A names the wrong city.") == "b"
    assert parse_verdict("rationale\n**Better:** (A)") == "a"
    assert parse_verdict("Better = Answer B.") == "b"
    assert parse_verdict("BETTER: a\n") == "a"
    assert parse_verdict("Better: A or B") is None  # both letters
    assert parse_verdict("Better: A/B") is None
    assert parse_verdict("Better: A\nBetter: B") is None  # disagreeing verdict lines
    assert parse_verdict("Better: A\nBetter: a") == "a"  # repeated, agreeing
    assert parse_verdict("paris is right . better : a") == "a"  # new sentence, no newline
    assert parse_verdict("Answer A is better: B misses it") is None  # not a verdict line
    assert parse_verdict("Better: neither") is None  # none
    assert parse_verdict("Better: Answers differ") is None  # "a" must be a whole word
    assert parse_verdict("") is None and parse_verdict("no verdict at all") is None


def test_judge_prompt_holds_the_pair_and_the_hint() -> None:
    p = PAIRS[0]
    body = judge_body(p.question, p.answer_a, p.answer_b)
    assert p.question in body and f"Answer A: {p.answer_a}" in body
    assert f"Answer B: {p.answer_b}" in body and "Hint" not in body and "Better: A" in body
    assert "Hint: answer B is known" in judge_body(p.question, p.answer_a, p.answer_b, "b")
    with pytest.raises(InputError, match="hint"):
        judge_body("q", "x", "y", "c")


# ---- the LM judge ---------------------------------------------------------------------------
def test_from_pretrained_loads_the_local_folder(tiny_dir: Path) -> None:
    judge = HFJudge.from_pretrained(tiny_dir, max_new_tokens=5)
    assert judge.model.config.n_embd == 16 and judge.tokenizer.pad_token == "[PAD]"
    assert judge.prompt(PAIRS[0]).endswith("Judgment:")
    assert judge.encode("better : a") == judge.tokenizer.encode(
        "better : a", add_special_tokens=False
    )
    with pytest.raises(InputError, match="config.json"):
        HFJudge.from_pretrained(tiny_dir / "missing")
    with pytest.raises(InputError, match="max_new_tokens"):
        HFJudge.from_pretrained(tiny_dir, max_new_tokens=0)


def test_log_probs_equal_a_manual_forward_pass(tiny_dir: Path) -> None:
    judge = HFJudge.from_pretrained(tiny_dir)
    prompts = [judge.encode(judge.prompt(p)) for p in PAIRS[:2]]
    judgments = [judge.encode("anna lives in paris . better : a"), judge.encode("better : b")]
    judgments = [j + [judge.tokenizer.eos_token_id] for j in judgments]
    with torch.inference_mode():
        got, count = judge.log_probs(prompts, judgments)  # padded batch
    for b, (p, j) in enumerate(zip(prompts, judgments, strict=True)):
        ids = torch.tensor([p + j])
        with torch.inference_mode():
            logp = torch.log_softmax(judge.model(ids).logits[0].double(), -1)  # (S, V)
        manual = sum(float(logp[len(p) + t - 1, tok]) for t, tok in enumerate(j))
        assert float(got[b]) == pytest.approx(manual, rel=1e-4, abs=1e-4)
        assert int(count[b]) == len(j)
    assert float(got[0]) < 0
    with pytest.raises(InputError, match="no token"):
        judge.log_probs(prompts[:1], [[]])


def test_sampling_is_seeded_and_greedy_is_deterministic(tiny_dir: Path) -> None:
    judge = HFJudge.from_pretrained(tiny_dir, max_new_tokens=6)
    first = judge.sample(PAIRS[:2], k=3, temperature=1.5, seed=1)
    assert len(first) == 2 and all(len(s) == 3 for s in first)
    assert judge.sample(PAIRS[:2], k=3, temperature=1.5, seed=1) == first
    assert judge.sample(PAIRS[:2], k=3, temperature=1.5, seed=2) != first
    hinted = judge.sample(PAIRS[:2], k=2, seed=1, hint=["a", None])
    assert len(hinted) == 2 and all(1 <= len(j) <= 6 for s in hinted for j in s)
    # greedy in a left-padded batch == model.generate on the lone prompt
    ids = judge.encode(judge.prompt(PAIRS[1]))
    expected = judge.model.generate(
        torch.tensor([ids]), max_new_tokens=6, do_sample=False, pad_token_id=0
    )[0, len(ids) :].tolist()
    eos = judge.tokenizer.eos_token_id
    expected = expected[: expected.index(eos) + 1] if eos in expected else expected
    assert judge.greedy(PAIRS)[1] == expected
    with pytest.raises(InputError, match="temperature"):
        judge.sample(PAIRS, k=2, temperature=0.0)
    with pytest.raises(InputError, match="hints"):
        judge.sample(PAIRS, k=1, hint=["a"])


# ---- contrastive selection ---------------------------------------------------------------------
class _ScriptedJudge(HFJudge):
    """The tiny LM's scoring and training, with scripted sampling: always writes "Better: A"
    unless the prompt carries a hint, then it follows the hint."""

    def _generate(self, prompts, temperature, seed):
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p)
            label = "b" if "hint : answer b" in text else "a"
            out.append(
                self.encode(f"paris is right . better : {label}") + [self.tokenizer.eos_token_id]
            )
        return out


def test_hf_contrastive_uses_hints_where_sampling_finds_no_negative(tiny_dir: Path) -> None:
    base = HFJudge.from_pretrained(tiny_dir)
    judge = _ScriptedJudge(base.model, base.tokenizer)
    out, stats = hf_contrastive(judge, PAIRS, samples=2, hint_samples=1)
    assert stats["sampled_accuracy"] == pytest.approx(4 / 6)  # "a" is right on pairs 0 and 2
    by = {c.index: c for c in out}
    assert set(by) == {0, 1, 2}
    assert by[1].chosen_source == "hint" and judge.verdict(by[1].chosen) == "b"
    assert by[0].rejected_source == "hint" and judge.verdict(by[0].rejected) == "b"
    assert verdict_accuracy(judge, PAIRS) == pytest.approx(
        {"verdict_accuracy": 2 / 3, "invalid_rate": 0.0, "a_share": 1.0}
    )


# ---- DPO on the LM ---------------------------------------------------------------------------
def test_dpo_steps_lower_the_loss_and_keep_the_reference(tiny_dir: Path) -> None:
    import copy

    judge = HFJudge.from_pretrained(tiny_dir)
    reference = copy.deepcopy(judge.model).requires_grad_(False)
    frozen = [p.clone() for p in reference.parameters()]
    prompts = [judge.encode(judge.prompt(p)) for p in PAIRS]
    chosen = [judge.encode(f"better : {p.better}") for p in PAIRS]
    rejected = [judge.encode(f"better : {'b' if p.better == 'a' else 'a'}") for p in PAIRS]
    loss0, dpo0, margin0 = dpo_step_loss(judge, reference, prompts, chosen, rejected)
    assert float(dpo0.detach()) == pytest.approx(
        np.log(2), abs=1e-5
    )  # policy == reference: margin 0
    assert torch.allclose(margin0, torch.zeros(3), atol=1e-5)
    opt = torch.optim.AdamW(judge.model.parameters(), lr=1e-2)
    for _ in range(3):
        loss, dpo, _ = dpo_step_loss(judge, reference, prompts, chosen, rejected, sft_weight=0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    _, dpo1, margin1 = dpo_step_loss(judge, reference, prompts, chosen, rejected)
    assert float(dpo1.detach()) < float(dpo0.detach()) - 1e-3 and float(margin1.mean()) > 0
    assert all(torch.equal(a, b) for a, b in zip(frozen, reference.parameters(), strict=True))


def test_train_hf_conj_end_to_end(tiny_dir: Path) -> None:
    base = HFJudge.from_pretrained(tiny_dir)
    judge = _ScriptedJudge(base.model, base.tokenizer)
    start = [p.detach().clone() for p in judge.model.parameters()]
    result = train_hf_conj(
        judge, PAIRS, steps=4, eval_pairs=PAIRS, samples=2, hint_samples=1, lr=1e-3, seed=0
    )
    assert len(result.contrastive) == 3 and len(result.log["dpo"]) == 4
    assert result.before["verdict_accuracy"] == pytest.approx(2 / 3)  # scripted generation
    assert result.log["dpo"][0] == pytest.approx(np.log(2), abs=1e-5)
    assert not all(torch.equal(a, b) for a, b in zip(start, judge.model.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(start, result.reference.parameters(), strict=True))
    with pytest.raises(InputError, match="steps"):
        train_hf_conj(judge, PAIRS, steps=0)


def test_train_hf_conj_without_any_verdict_raises(tiny_dir: Path) -> None:
    judge = HFJudge.from_pretrained(tiny_dir, max_new_tokens=2)  # random LM: no verdict line
    with pytest.raises(InputError, match="no contrastive pair"):
        train_hf_conj(judge, PAIRS[:1], steps=1, samples=1, hint_samples=1)


def test_balanced_pairs_split_positions_evenly() -> None:
    from edgekit.models.con_j.train import ConJConfig

    held = ConJConfig().prefs().heldout_unseen()
    chosen = balanced_pairs(held, 8)
    assert len(chosen) == 8 and sum(p.better == "a" for p in chosen) == 4
    assert len(set(map(id, chosen))) == 8 and all(p in held for p in chosen)
    with pytest.raises(InputError, match="even"):
        balanced_pairs(held, 7)
    with pytest.raises(InputError, match="answer b better"):
        balanced_pairs([p for p in held if p.better == "a"], 4)


# ---- card and CLI ------------------------------------------------------------------------------
def test_cli_eval_con_j_with_a_local_judge(tiny_dir: Path) -> None:
    from typer.testing import CliRunner

    from edgekit.cli.app import app
    from edgekit.models.con_j.card import ConJCard

    result = CliRunner().invoke(app, ["eval", "con-j", "--option", f"judge={tiny_dir}"])
    assert result.exit_code == 0, result.output
    found = re.search(r"verdict_accuracy: ([0-9.]+)", result.output)
    assert found is not None, result.output
    card = ConJCard()
    expected = card.evaluate_judge(card.judge(tiny_dir))
    assert float(found.group(1)) == pytest.approx(expected["verdict_accuracy"], abs=1e-4)
    assert "invalid_rate" in result.output
    old = CliRunner().invoke(app, ["eval", "con-j", "--judge", str(tiny_dir)])  # old spelling
    assert old.exit_code == 0 and "use --option judge=FOLDER" in old.output
    assert re.search(r"verdict_accuracy: ([0-9.]+)", old.output).group(1) == found.group(1)
    none = CliRunner().invoke(app, ["eval", "sdlg", "--option", "judge=/x"])
    assert none.exit_code != 0 and "has no LLM judge" in none.output
