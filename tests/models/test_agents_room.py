"""Agents' Room: world and prompts, compact vocabulary, decoding, rooms and orchestrators,
the pairwise judge with position swap, training cache, ONNX and transformers backends."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import minilm_fast_tokenizer

from edgekit.errors import InputError
from edgekit.models.agents_room import world
from edgekit.models.agents_room.agents import Agent, default_agents
from edgekit.models.agents_room.backend import StoryLMBackend, TextBackend
from edgekit.models.agents_room.judge import (
    BackendJudge,
    CriteriaJudge,
    PairResult,
    Verdict,
    judge_pair,
    longest_increasing_run,
    mentions,
    plan_adherence,
    sign_test_p,
    story_scores,
    win_rate,
    words,
)
from edgekit.models.agents_room.orchestrator import (
    BackendOrchestrator,
    FixedOrder,
    ShuffledPlanning,
    end_to_end,
    run_agents_room,
)
from edgekit.models.agents_room.scratchpad import (
    Scratchpad,
    end_to_end_prompt,
    planning_prompt,
    writing_prompt,
)
from edgekit.models.agents_room.train import (
    StoryLMConfig,
    collate,
    encode_pair,
    story_pairs,
    train_cached,
)
from edgekit.models.agents_room.vocab import CLS, EOS, SEP, UNK, CompactVocab, story_vocab
from edgekit.models.tinylm.causal import CausalLM

torch.set_num_threads(1)

PREMISE = world.Premise("mara", "weaver", "oakvale", "dragon")
PLAN = world.Plan(
    trait="brave",
    companion="bram",
    companion_role="fisher",
    landmark="old tower",
    treasure="golden bell",
    fear="fire",
    tool="iron key",
    season="winter",
    outcome=0,
    variants=(0,) * 9,
)
STORY = world.reference_story(PREMISE, PLAN)


# ---- world, scratchpad, vocabulary ---------------------------------------------------------
def test_reference_story_fills_every_section_from_one_plan() -> None:
    assert STORY.startswith(
        "exposition : in oakvale , near the old tower , lived mara , a brave weaver ."
    )
    assert "rising action : one winter night the dragon came and stole the golden bell ." in STORY
    assert "falling action : the dragon was trapped ." in STORY
    train, test = world.split_premises(64)
    assert len(train) + len(test) == 6144 and not set(train) & set(test)
    rng = random.Random(0)
    assert all(world.sample_plan(p, rng).companion != p.hero for p in test)
    with pytest.raises(InputError, match="story section"):
        world.section_text("epilogue", PREMISE, PLAN)
    with pytest.raises(InputError, match="test premises"):
        world.split_premises(0)


def test_prompts_read_the_pad_in_canonical_order_whatever_the_write_order() -> None:
    pad = Scratchpad(PREMISE.text())
    pad.write("plot", "P.")
    pad.write("conflict", "C.")
    assert planning_prompt(pad, "setting") == (
        "premise : mara , a weaver from oakvale , must face the dragon . "
        "conflict : C. plot : P. plan : setting"
    )
    assert planning_prompt(pad, "plot").endswith("conflict : C. plan : plot")  # not its own entry
    pad.write("climax", "X.")
    assert writing_prompt(pad, "resolution").endswith("plot : P. write : resolution")
    assert "climax" not in writing_prompt(pad, "resolution")  # written sections are not read
    assert pad.log == ["plot", "conflict", "climax"] and pad.story() == "climax : X."
    assert end_to_end_prompt(" a premise ") == "premise : a premise write : story"
    with pytest.raises(InputError, match="already holds"):
        pad.write("plot", "again")
    with pytest.raises(InputError, match="scratchpad key"):
        pad.write("epilogue", "x")
    with pytest.raises(InputError, match="non-empty premise"):
        Scratchpad("  ")


def test_compact_vocab_round_trips_the_world_and_maps_unknown_pieces_to_unk() -> None:
    vocab = story_vocab()
    assert 100 < len(vocab) < 400 and vocab.wordpiece[:4] == [0, 100, 101, 102]
    ids = vocab.encode(STORY)
    assert UNK not in ids and max(ids) < len(vocab)
    assert words(vocab.decode(ids)) == words(STORY)
    assert vocab.encode("zebra")[0] == UNK
    small = CompactVocab.from_texts(["the mill"])
    assert small.decode(small.encode("the mill the")) == "the mill the"
    assert small.wordpiece[4:] == sorted(small.wordpiece[4:])
    with pytest.raises(InputError, match="compact vocabulary"):
        CompactVocab([5, 100, 101, 102])
    with pytest.raises(InputError, match="outside the vocabulary"):
        small.decode([len(small)])
    ids, targets = encode_pair("plan : plot", "bram .")
    assert ids[0] == CLS and ids[-1] == EOS and SEP in ids
    supervised = [t for t in targets if t != -100]
    assert supervised == [*vocab.encode("bram ."), EOS]  # output and EOS only


# ---- judge ---------------------------------------------------------------------------------
def test_story_scores_hand_computed() -> None:
    ref = story_scores(STORY, PREMISE, target_words=len([w for w in words(STORY) if w.isalpha()]))
    assert all(v == 1.0 for v in ref.values()), ref
    # a second companion name and a foreign town: one extra entity in each category
    broken = STORY.replace("mara and bram", "mara and nina").replace(
        "back to oakvale", "back to ashford"
    )
    scores = story_scores(broken, PREMISE)
    assert scores["character_consistency"] == pytest.approx(0.5)
    assert scores["setting_consistency"] == pytest.approx(0.5)
    assert scores["premise_coverage"] == 1.0
    # the hero's trade replaced: coverage 3/4, two non-premise trades (one allowed)
    wrong_trade = STORY.replace("brave weaver", "brave smith")
    scores = story_scores(wrong_trade, PREMISE)
    assert scores["premise_coverage"] == 0.75 and scores["character_consistency"] == 0.5
    # sections climax and rising action swapped: headers 0 2 1 3 4 -> increasing run of 4
    parts = {s: world.with_header(s, world.section_text(s, PREMISE, PLAN)) for s in world.SECTIONS}
    order = ["exposition", "climax", "rising action", "falling action", "resolution"]
    assert story_scores(" ".join(parts[s] for s in order), PREMISE)["structure"] == 0.8
    # one duplicated section: 6 headers, increasing run 5 -> 5/6; its 4-grams repeat
    twice = " ".join([*parts.values(), parts["resolution"]])
    scores = story_scores(twice, PREMISE)
    assert scores["structure"] == pytest.approx(5 / 6)
    body = [w for w in words(twice) if w.isalpha() and w not in {"exposition", "rising", "action", "climax", "falling", "resolution"}]  # fmt: skip
    grams = [tuple(body[i : i + 4]) for i in range(len(body) - 3)]
    assert scores["non_repetition"] == pytest.approx(len(set(grams)) / len(grams))
    assert story_scores("mara wove .", PREMISE, target_words=10)["length"] == pytest.approx(0.2)
    found = mentions(words("the old tower and the dark forest near the tower"))
    assert found["landmark"] == ["old tower", "dark forest"]


def test_plan_adherence_counts_section_entities_missing_from_the_plan() -> None:
    plan = "premise : mara , a weaver from oakvale . setting : near the old tower in winter ."
    # mentions: mara, old tower, winter (planned), frozen lake, bram (not planned) -> 3 / 5
    sections = "mara went from the old tower to the frozen lake in winter with bram ."
    assert plan_adherence(plan, sections) == pytest.approx(3 / 5)
    assert plan_adherence(plan, "they went home .") == 1.0


def test_sign_test_matches_binomial_tails() -> None:
    assert sign_test_p(5, 0) == pytest.approx(2 / 32)  # 2 * P(X = 0), X ~ Bin(5, 1/2)
    assert sign_test_p(2, 8) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert sign_test_p(0, 0) == 1.0 and sign_test_p(3, 3) == 1.0


def test_longest_increasing_run() -> None:
    assert longest_increasing_run([]) == 0
    assert longest_increasing_run([0, 1, 2, 3, 4]) == 5
    assert longest_increasing_run([4, 3, 2, 1]) == 1
    assert longest_increasing_run([0, 2, 1, 3, 3, 4]) == 4


class _FirstIsBetter:
    """A judge with pure position bias: always prefers the story shown first."""

    name = "biased"

    def compare(self, premise: world.Premise, first: str, second: str) -> Verdict:
        return Verdict("first")


def test_position_swap_cancels_position_bias_and_keeps_real_preferences() -> None:
    biased = judge_pair(_FirstIsBetter(), PREMISE, STORY, "nothing")
    assert biased.winner == "tie" and not biased.consistent
    broken = STORY.replace("back to oakvale", "back to ashford").replace("climax :", "")
    judge = CriteriaJudge()
    real = judge_pair(judge, PREMISE, STORY, broken)
    assert real.winner == "a" and real.consistent
    assert (
        real.forward.votes["setting_consistency"] == 1
        and real.forward.votes["premise_coverage"] == 0
    )
    assert judge_pair(judge, PREMISE, broken, STORY).winner == "b"
    # one word longer moves length by ~1 %, under the 0.05 margin: no vote, a tie
    longer = judge_pair(judge, PREMISE, STORY, STORY + " mara .")
    assert longer.winner == "tie" and not any(longer.forward.votes.values())
    rates = win_rate([real, biased, PairResult("b", True, real.forward, real.backward)])
    assert rates == {
        "wins": 1,
        "losses": 1,
        "ties": 1,
        "win_rate": 0.5,
        "sign_test_p": 1.0,
        "position_consistency": pytest.approx(2 / 3),
    }
    with pytest.raises(InputError, match="criteria"):
        CriteriaJudge(criteria=["wit"])


def test_backend_judge_parses_answers_and_the_swap_removes_its_position_bias() -> None:
    answers = _Answers(["story b .", "A", "no idea", "a", "a"])
    judge = BackendJudge(answers)
    assert judge.compare(PREMISE, STORY, "x").winner == "second"
    assert judge.compare(PREMISE, STORY, "x").winner == "first"
    assert judge.compare(PREMISE, STORY, "x").winner == "tie"
    always_a = judge_pair(judge, PREMISE, STORY, "x")  # answers "a" in both orders
    assert always_a.winner == "tie" and not always_a.consistent and not answers.answers


# ---- backends, agents, orchestrators -------------------------------------------------------
class _ScriptLM:
    """A fake LM backend: after the first [SEP] it spells ``script`` then EOS (logits one-hot)."""

    def __init__(self, script: Sequence[int], size: int) -> None:
        self.script, self.size = list(script), size

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        logits = np.zeros((*ids.shape, self.size), np.float32)
        for row in range(len(ids)):
            end = int(mask[row].sum())
            done = end - 1 - int(np.argmax(ids[row] == SEP))  # tokens generated so far
            token = self.script[done] if done < len(self.script) else EOS
            logits[row, end - 1, token] = 10.0
        return logits


def test_story_lm_backend_decodes_until_eos_and_counts_truncation() -> None:
    vocab = story_vocab()
    script = vocab.encode("mara and bram walked home .")
    backend = StoryLMBackend(CausalLM(_ScriptLM(script, len(vocab)), 64))
    assert isinstance(backend, TextBackend)
    out = backend.generate(["plan : plot", "premise : a much longer prompt"], 40)
    assert out == ["mara and bram walked home."] * 2 and backend.truncated == 0
    assert backend.generated == 2 * len(script) and backend.lm.calls == len(script) + 1
    assert backend.generate(["plan : plot"], 3) == ["mara and bram"] and backend.truncated == 1
    with pytest.raises(InputError, match="no room"):
        backend.generate(["the " * 70], 4)
    with pytest.raises(InputError, match="temperature"):
        StoryLMBackend(backend.lm, temperature=-1)


def test_sampling_follows_the_temperature_scaled_distribution() -> None:
    lm = CausalLM(lambda ids, mask: np.zeros((*ids.shape, 6), np.float32), 64)
    backend = StoryLMBackend(lm, temperature=1.0, seed=3)
    log_p = np.log(np.tile([0.0, 0.0, 0.0, 0.0, 0.2, 0.8], (20000, 1)) + 1e-300)
    draws = backend._choose(log_p)
    assert np.mean(draws == 5) == pytest.approx(0.8, abs=0.015) and set(draws) == {4, 5}
    backend.temperature = 0.5  # p^2 renormalised: 0.04 / 0.68 for token 4
    assert np.mean(backend._choose(log_p) == 4) == pytest.approx(0.04 / 0.68, abs=0.01)
    backend.reseed(7)
    first = backend._choose(log_p[:50])
    backend.reseed(7)
    np.testing.assert_array_equal(backend._choose(log_p[:50]), first)
    backend.temperature = 0.0
    assert set(backend._choose(log_p)) == {5}


class _ReferenceWriter:
    """A fake backend that answers every agent with the reference entry of (PREMISE, PLAN)."""

    name = "reference"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        self.batches.append(len(prompts))
        out = []
        for prompt in prompts:
            verb, task = prompt.rsplit(" : ", 1)[0].split()[-1], prompt.rsplit(" : ", 1)[1]
            if task == "story":
                out.append(STORY)
            elif verb == "plan":
                out.append(world.plan_entry(task, PREMISE, PLAN))
            else:
                out.append(world.section_text(task, PREMISE, PLAN))
        return out


def test_room_of_agents_writes_the_story_the_plan_implies() -> None:
    backend = _ReferenceWriter()
    rooms = run_agents_room([PREMISE.text()] * 3, backend)
    assert [r.story for r in rooms] == [STORY] * 3
    assert rooms[0].order == [*world.PLANNING, *world.SECTIONS]
    assert backend.batches == [3] * 9  # lockstep: one batched call per turn
    assert end_to_end([PREMISE.text()], backend) == [STORY]
    shuffled = run_agents_room(
        [PREMISE.text(), "another premise ."], backend, orchestrator=ShuffledPlanning(1)
    )
    assert shuffled[0].story == STORY
    assert sorted(shuffled[0].order[:4]) == sorted(world.PLANNING)
    assert shuffled[0].order[4:] == list(world.SECTIONS)
    assert [r.order for r in shuffled] != [
        shuffled[0].order
    ] * 2  # the order depends on the premise
    again = run_agents_room([PREMISE.text()], backend, orchestrator=ShuffledPlanning(1))
    assert again[0].order == shuffled[0].order


class _Answers:
    name = "answers"

    def __init__(self, answers: list[str]) -> None:
        self.answers = answers

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        return [self.answers.pop(0) for _ in prompts]


def test_backend_orchestrator_follows_valid_answers_and_falls_back_otherwise() -> None:
    agents = default_agents()
    pad = Scratchpad(PREMISE.text())
    chooser = BackendOrchestrator(_Answers(["the climax , then more", "banana", "Rising Action!"]))
    assert chooser.choose(pad, agents).name == "climax"
    assert chooser.choose(pad, agents).name == "conflict" and chooser.fallbacks == 1
    assert chooser.choose(pad, agents[1:]).name == "rising action" and chooser.decisions == 3

    class Rogue:
        name = "rogue"

        def choose(self, pad: Scratchpad, remaining: Sequence[Agent]) -> Agent:
            return agents[0]

    with pytest.raises(InputError, match="not waiting"):
        run_agents_room([PREMISE.text()], _ReferenceWriter(), orchestrator=Rogue())
    with pytest.raises(InputError, match="planning agent"):
        Agent("climax", "planning", 10)
    assert FixedOrder(["plot", "conflict"]).choose(pad, agents[:4]).name == "plot"


# ---- training, ONNX, transformers ----------------------------------------------------------
TINY = StoryLMConfig(stories=40, dim=32, layers=2, heads=2, steps=60, batch_size=8, lr=1e-2)


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the TINY story LM (trained once for the module)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEKIT_CACHE", str(folder))
        assert not train_cached(TINY).cached
    return folder


def _loss(model: torch.nn.Module, pairs: list[tuple[str, str]]) -> float:
    ids, mask, targets = collate(pairs, TINY.max_len)
    with torch.no_grad():
        return float(
            torch.nn.functional.cross_entropy(model(ids, mask).flatten(0, 1), targets.flatten())
        )


def test_training_pairs_and_cache(tiny_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = story_pairs(PREMISE, PLAN, random.Random(0))
    assert len(pairs) == 10 and pairs[-1] == (end_to_end_prompt(PREMISE.text()), STORY)
    assert pairs[4][0].endswith("write : exposition") and "plot :" in pairs[4][0]
    monkeypatch.setenv("EDGEKIT_CACHE", str(tiny_cache))
    cached = train_cached(TINY)
    assert cached.cached and len(list((tiny_cache / "agents-room").glob("story-lm-*.pt"))) == 1
    torch.manual_seed(TINY.seed)
    fresh = TINY.build().eval()  # the initial weights training started from
    assert _loss(cached.model, pairs) < _loss(fresh, pairs) - 0.5
    with pytest.raises(InputError, match="max_len"):
        StoryLMConfig(max_len=64)


def test_exported_graph_writes_the_same_stories_as_torch(
    tiny_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.registry import get_card
    from edgekit.runtimes import RuntimeOptions, get_runtime

    monkeypatch.setenv("EDGEKIT_CACHE", str(tiny_cache))
    fields = ("stories", "dim", "layers", "heads", "steps", "batch_size", "lr")
    card = get_card("agents-room", **{k: getattr(TINY, k) for k in fields})
    assert card.train().cached
    (graph,) = card.graphs()
    onnx_path = export_onnx(graph, tmp_path / "lm.onnx", opset=17)
    session = get_runtime("onnxruntime").load(onnx_path, "cpu", RuntimeOptions(threads=1))
    texts = [p.text() for p in card.eval_premise_list()[:2]]
    torch_backend = StoryLMBackend.from_module(graph.module)
    onnx_backend = StoryLMBackend.from_runner(session, TINY.max_len)
    assert end_to_end(texts, onnx_backend, 12) == end_to_end(texts, torch_backend, 12)
    feeds = card.golden_inputs()["lm"]
    assert feeds["input_ids"].shape[0] == 4 and feeds["input_ids"].dtype == np.int64
    logits = session.run(feeds)["logits"]
    assert logits.shape == (*feeds["input_ids"].shape, len(story_vocab()))
    with pytest.raises(InputError, match="StoryLMConfig"):
        get_card("agents-room", epochs=3)


def test_transformers_backend_from_a_local_tiny_gpt2(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from edgekit.models.agents_room.hf_backend import TransformersBackend

    tokenizer = minilm_fast_tokenizer()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=32, n_embd=16, n_layer=1, n_head=2
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    backend = TransformersBackend.from_pretrained(tmp_path)
    assert isinstance(backend, TextBackend) and backend.context() == 32
    prompt = "mara the weaver"
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    expected = model.generate(
        torch.tensor([ids]), max_new_tokens=4, do_sample=False, pad_token_id=0
    )[0, len(ids) :]
    assert backend.generate([prompt], 4) == [
        tokenizer.decode(expected, skip_special_tokens=True).strip()
    ]
    assert backend.generated == 4
    with pytest.raises(InputError, match="context"):
        backend.generate([prompt], 40)
    with pytest.raises(InputError, match="config.json"):
        TransformersBackend.from_pretrained(tmp_path / "missing")
