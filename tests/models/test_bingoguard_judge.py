"""BingoGuard's LLM judge (server class) on a tiny random Llama: verdict and severity parsing,
p(unsafe) from first-token logits, the severity prompt, and the card's judge metrics."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.bingoguard.data import load_heldout
from edgekit.models.bingoguard.metrics import average_precision, binary_metrics, severity_metrics
from edgekit.models.bingoguard.taxonomy import load_taxonomy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# ---- the LLM judge (server class) on a tiny random Llama --------------------------------------
@pytest.fixture(scope="module")
def tiny_judge_dir(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from edgekit.models.minilm.encoder import model_dir

    folder = tmp_path_factory.mktemp("tiny-llama-judge")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def test_level_and_safety_parsing() -> None:
    from edgekit.models.bingoguard.judge import parse_level, parse_safety

    assert parse_level("#level: 3") == 3
    assert parse_level("reasoning...\n#Level:4\n") == 4
    assert parse_level("# level : 0 because benign") == 0
    assert parse_level("#level: 7") is None and parse_level("#level: 12") is None
    assert parse_level("level 2") is None and parse_level("") is None
    assert parse_safety("unsafe\nS1, S8") == (True, ["S1", "S8"])
    assert parse_safety("Safe") == (False, [])
    assert parse_safety("unsafe\nS10,S11,S12") == (True, ["S10", "S11"])
    assert parse_safety("maybe") == (None, [])


def test_judge_p_unsafe_from_first_token_logits(tiny_judge_dir: Path) -> None:
    from edgekit.models.bingoguard.judge import BingoGuardJudge

    judge = BingoGuardJudge.from_pretrained(tiny_judge_dir)
    texts = ["Here is how to hurt him.", "Please call a support line."]
    probs = judge.p_unsafe(texts)
    assert probs.shape == (2,) and ((probs > 0) & (probs < 1)).all()
    tok = judge.tokenizer
    safe_id = tok.encode("safe", add_special_tokens=False)[0]
    unsafe_id = tok.encode("unsafe", add_special_tokens=False)[0]
    for text, p in zip(texts, probs, strict=True):
        prompt = judge.safety_prompt(text)
        assert "S11: Misinformation" in prompt and text in prompt
        ids = tok(prompt, return_tensors="pt")
        with torch.inference_mode():
            logits = judge.model(**ids).logits[0, -1].double()
        full = torch.softmax(logits, dim=-1)
        assert p == pytest.approx(float(full[unsafe_id] / (full[safe_id] + full[unsafe_id])))
    assert probs[0] != probs[1]


def test_judge_severity_prompt_and_generation(tiny_judge_dir: Path) -> None:
    from edgekit.models.bingoguard.judge import BingoGuardJudge, parse_level

    judge = BingoGuardJudge.from_pretrained(tiny_judge_dir, max_new_tokens=4)
    prompt = judge.severity_prompt("some reply", topic="privacy")
    assert "S9 (Privacy)" in prompt and "#level: N" in prompt
    assert load_taxonomy().topic("S9").rubric[4] in prompt
    ((level, answer),) = judge.severity(["some reply"], ["S9"])
    # the answer is the model's greedy continuation of the severity prompt, 4 tokens at most
    prompt_ids = judge.tokenizer(judge.severity_prompt("some reply", topic="S9"))["input_ids"]
    ids = torch.tensor([prompt_ids])  # (1, L)
    with torch.inference_mode():
        for _ in range(4):
            token = judge.model(ids).logits[0, -1].argmax().view(1, 1)
            ids = torch.cat([ids, token], dim=1)
            if int(token) == judge.tokenizer.eos_token_id:
                break
    greedy = ids[0, len(prompt_ids) :]
    assert answer == judge.tokenizer.decode(greedy, skip_special_tokens=True)
    assert level == parse_level(answer)
    # and the level is read from the answer to the prompt of the reply's own topic
    rubric = load_taxonomy().topic("S9").rubric[4]
    judge.generate = lambda prompt: "reasoning\n#level: 3" if rubric in prompt else "#level: 1"
    assert judge.severity(["some reply", "another"], ["S9", "S2"]) == [
        (3, "reasoning\n#level: 3"),
        (1, "#level: 1"),
    ]
    with pytest.raises(InputError, match="unknown BingoGuard topic"):
        judge.severity_prompt("x", topic="S12")
    with pytest.raises(InputError, match="empty"):
        judge.p_unsafe([" "])
    with pytest.raises(InputError, match="config.json"):
        BingoGuardJudge.from_pretrained(tiny_judge_dir / "missing")
    judge.tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    assert judge.safety_prompt("reply").endswith("<assistant>")


def test_card_evaluates_a_judge_with_the_paper_metrics(tiny_judge_dir: Path) -> None:
    from edgekit.models.bingoguard.card import BingoGuardCard

    card = BingoGuardCard(judge_path=str(tiny_judge_dir))
    judge = card.judge(max_new_tokens=3)
    examples = [e for e in load_heldout() if e.topic == 8][:5]  # privacy, levels 0-1
    metrics = card.evaluate_judge(judge, examples)
    expected = {"binary_f1", "binary_auprc", "severity_macro_f1", "severity_unparsed_rate"}
    assert expected <= set(metrics)
    # the metrics are those of the judge's own answers, prompted with each response's query,
    # against the examples' labels
    texts, queries = [e.text for e in examples], [e.query for e in examples]
    assert all(queries)
    p_unsafe = judge.p_unsafe(texts, queries)
    assert not np.allclose(p_unsafe, judge.p_unsafe(texts))  # the query reaches the prompt
    unsafe = np.array([e.unsafe for e in examples])
    assert 0 < unsafe.mean() < 1  # both classes, so a label mix-up changes the numbers
    assert metrics["binary_auprc"] == pytest.approx(average_precision(unsafe, p_unsafe))
    assert metrics["binary_f1"] == pytest.approx(binary_metrics(unsafe, p_unsafe)["f1"])
    parsed = [lv for lv, _ in judge.severity(texts, ["S9"] * len(texts), queries)]
    assert metrics["severity_unparsed_rate"] == pytest.approx(np.mean([p is None for p in parsed]))
    graded = np.array([0 if lv is None else lv for lv in parsed])
    truth = np.array([e.level for e in examples])
    want = severity_metrics(truth, graded)["severity_macro_f1"]
    assert metrics["severity_macro_f1"] == pytest.approx(want)
    with pytest.raises(InputError, match="local weights"):
        BingoGuardCard().judge()
