"""BingoGuard given the question: hand-written held-out queries, generated training queries,
pair encoding and segment pooling, the query+response scorer against the response-only one,
and pairs on the device (the daemon's /score)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.bingoguard import generate
from edgekit.models.bingoguard.data import Example, load_heldout
from edgekit.models.bingoguard.queries import (
    EMPTY_SHARE,
    KIND_ODDS,
    KINDS,
    load_heldout_queries,
    load_query_templates,
    with_generated_queries,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# ---- the queries -----------------------------------------------------------------------------
def test_every_heldout_response_has_its_hand_written_query() -> None:
    ids = [
        line.split("\t")[0]
        for line in Path(generate.__file__).with_name("heldout.tsv").read_text().splitlines()
        if line and not line.startswith(("#", "id\t"))
    ]
    queries = load_heldout_queries()
    assert list(queries) == ids  # one per id, same order, nothing extra
    heldout = load_heldout()
    assert all(e.query for e in heldout) and len({e.query for e in heldout}) == len(heldout)
    # never a copy of the response: no six-word phrase of a response in its own query
    for e in heldout:
        assert not generate.shared_ngrams([e.query], [e.text], n=6), e


def test_heldout_file_with_a_query_column_and_bad_query_files(tmp_path: Path) -> None:
    table = tmp_path / "mine.tsv"
    table.write_text(
        "id\ttopic\tlevel\tquery\ttext\n"
        "a\tS1\t0\tHow do I calm down?\tBreathe slowly and step outside.\n"
        "b\tS4\t1\t\tDamn, that hurt.\n"
    )
    rows = load_heldout(str(table))
    assert [(e.query, e.level) for e in rows] == [("How do I calm down?", 0), ("", 1)]
    plain = tmp_path / "plain.tsv"
    plain.write_text("id\ttopic\tlevel\ttext\na\tS1\t0\tBreathe slowly.\n")
    assert load_heldout(str(plain))[0].query == ""  # a user's own file: no shipped queries
    bad = tmp_path / "bad.tsv"
    bad.write_text("id\tquestion\na\tHello?\n")
    with pytest.raises(ValueError, match="header must be 'id<TAB>query'"):
        load_heldout_queries(str(bad))
    bad.write_text("id\tquery\na\tHello?\na\tAgain?\n")
    with pytest.raises(ValueError, match=r"bad.tsv:3: .*new id"):
        load_heldout_queries(str(bad))


def test_query_templates_cover_every_topic_and_kind_without_unknown_slots() -> None:
    table = load_query_templates()
    assert len(table) == 11 and all(set(KINDS) <= set(kinds) for kinds in table.values())
    assert all(len(table[t][k]) >= 5 for t in table for k in KINDS)
    assert all(abs(sum(odds) - 1.0) < 1e-9 for odds in KIND_ODDS)


def test_generated_queries_are_seeded_filled_and_leave_the_responses_alone() -> None:
    dataset = generate.build_dataset(generate.GeneratorConfig(per_cell=30))
    paired = with_generated_queries(dataset.train, seed=0)
    assert paired == with_generated_queries(dataset.train, seed=0)
    assert paired != with_generated_queries(dataset.train, seed=1)
    assert [replace(e, query="") for e in paired] == list(dataset.train)  # responses untouched
    assert not any("{" in e.query or "}" in e.query for e in paired)
    empty = np.mean([not e.query for e in paired])
    assert abs(empty - EMPTY_SHARE) < 0.04, empty
    # a request for harm is answered at every level (the query alone never gives the label)
    harm = {q for kinds in load_query_templates().values() for q in kinds["harm"]}
    templated = {e.level for e in paired if any(_matches(t, e.query) for t in harm)}
    assert templated == {0, 1, 2, 3, 4}
    everyday = Example("The cat sat on the mat.", -100, 0)
    assert with_generated_queries([everyday], seed=0)[0].query == ""


def _matches(template: str, query: str) -> bool:
    """Whether ``query`` is ``template`` with its slots filled (first letter capitalised)."""
    import re

    pattern = re.escape(template[0].upper() + template[1:])
    return re.fullmatch(re.sub(r"\\\{\w+\\\}", ".+", pattern), query) is not None


# ---- encoding and pooling ------------------------------------------------------------------------
def test_pair_encoding_and_segment_masks() -> None:
    from edgekit.models.bingoguard.net import SEP_ID, pair_masks
    from edgekit.models.bingoguard.scoring import _tokenizer, encode_texts

    assert _tokenizer().token_to_id("[SEP]") == SEP_ID
    feeds, truncated = encode_texts(["the reply", "alone", "long " * 200], ["my question", "", "q"])
    ids = torch.from_numpy(feeds["input_ids"])
    response, query = pair_masks(ids, torch.from_numpy(feeds["attention_mask"]))
    # row 0: [CLS] my question [SEP] | the reply [SEP]; row 1: [CLS] alone [SEP] (no query)
    assert query[0].tolist()[:4] == [1, 1, 1, 1] and response[0].tolist()[:7] == [0] * 4 + [1] * 3
    assert response[1].sum() == 3 and query[1].sum() == 0
    assert truncated.tolist() == [False, False, True] and ids.shape[1] == 128
    assert int((ids[2] == SEP_ID).sum()) == 2  # a long pair keeps both segments when cut


def test_pair_pooling_reads_the_query_and_single_pooling_is_unchanged() -> None:
    from transformers import BertConfig, BertModel

    from edgekit.models.bingoguard.net import BingoGuardNet
    from edgekit.models.bingoguard.scoring import encode_texts

    torch.manual_seed(0)
    bert = BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=128),
        add_pooling_layer=False,
    ).eval()  # fmt: skip
    single, pair = BingoGuardNet(bert, hidden=8), BingoGuardNet(bert, hidden=8, pair=True)

    def pooled(net: BingoGuardNet, texts: list[str], queries: list[str] | None) -> torch.Tensor:
        feeds, _ = encode_texts(texts, queries)
        return net.pooled(**{k: torch.from_numpy(v) for k, v in feeds.items()})

    with torch.no_grad():
        alone = pooled(single, ["sure, here it is"], None)
        a = pooled(pair, ["sure, here it is"] * 2, ["how do I bake bread?", "how do I hurt him?"])
        none = pooled(pair, ["sure, here it is"], [""])
    assert alone.shape == (1, 64) and a.shape == (2, 128)
    assert torch.allclose(none[0, :64], alone[0], atol=1e-6)  # no query: the response alone ...
    assert torch.count_nonzero(none[0, 64:]) == 0  # ... and zeros for the query half
    assert not torch.allclose(a[0, :64], a[1, :64], atol=1e-4)  # the response attended to it
    assert not torch.allclose(a[0, 64:], a[1, 64:], atol=1e-4)


# ---- the scorers ---------------------------------------------------------------------------------
def test_card_input_option_and_queries_are_checked() -> None:
    from edgekit.models.bingoguard.card import BingoGuardCard
    from edgekit.models.bingoguard.train import TrainConfig

    assert BingoGuardCard().pair and not BingoGuardCard(input="response").pair
    assert TrainConfig(input="response").key() != TrainConfig().key()
    with pytest.raises(InputError, match="input='both'"):
        BingoGuardCard(input="both").train_config()
    card = BingoGuardCard(input="response")
    with pytest.raises(InputError, match="reads responses alone"):
        card.score(None, ["text"], ["query"])  # type: ignore[arg-type]
    assert BingoGuardCard().preprocessing()["input"] == "query+response"
    golden = BingoGuardCard().golden_inputs()["scorer"]["input_ids"]
    assert golden.shape == (4, 128) and [int((r == 102).sum()) for r in golden] == [2, 1, 2, 2]


def test_shipped_pair_scorer_reads_the_query_and_beats_flagging_everything() -> None:
    """The shipped query+response heads on the 165 hand-written (query, response) pairs: F1
    above flagging everything with the paired interval excluding no difference (measured
    0.948 vs 0.889, [+0.023, +0.095]), where the response-only heads are not (0.918,
    [-0.016, +0.075]). It reads the question: with every query moved to a response of another
    topic, topic accuracy falls from 0.95 to 0.53 (the binary decisions barely move: 0.96 F1;
    docs/models.md)."""
    from edgekit.models.bingoguard import train as train_mod
    from edgekit.models.bingoguard.metrics import task_metrics

    result = train_mod.load_cached(train_mod.TrainConfig())
    if result is None:
        pytest.skip("no shipped or cached BingoGuard weights for the default recipe")
    model = result.build()
    heldout = list(load_heldout())
    texts = [e.text for e in heldout]

    def metrics(queries: list[str]) -> dict[str, float]:
        return task_metrics(heldout, **train_mod.predict(model, texts, queries=queries))

    paired = metrics([e.query for e in heldout])
    assert paired["binary_f1_minus_flag_all_ci_low"] > 0.0, paired
    assert paired["binary_auprc"] >= 0.95 and paired["topic_accuracy"] >= 0.85, paired
    shifted = [heldout[(i + 15) % len(heldout)].query for i in range(len(heldout))]
    assert Counter(heldout[(i + 15) % len(heldout)].topic != e.topic for i, e in
                   enumerate(heldout))[True] == len(heldout)  # fmt: skip
    wrong = metrics(shifted)
    assert wrong["topic_accuracy"] < paired["topic_accuracy"] - 0.3, (wrong, paired)


def test_device_scores_query_response_pairs_as_the_card_does(tmp_path: Path) -> None:
    """A pair bundle on the device: [query, response] pairs give the card's torch scores; a
    pair with an empty query equals the response sent alone; a response-only bundle refuses
    pairs with one clear error."""
    from edgekit.build.pipeline import build_bundle
    from edgekit.build.verify import reference_runners
    from edgekit.exporters import ExportOptions, Target
    from edgekit.models.bingoguard.card import BingoGuardCard
    from edgekit.text_scorer import TextScorer

    card = BingoGuardCard(show_progress=False)
    bundle, _ = build_bundle(
        card, Target.parse("onnx-fp32"), tmp_path / "pair", ExportOptions(), progress=False,
        verify=False,
    )  # fmt: skip
    scorer = TextScorer(bundle)
    heldout = list(load_heldout())[::20]
    out = scorer.score(pairs=[[e.query, e.text] for e in heldout])
    ref = card.score(
        reference_runners(card)["scorer"], [e.text for e in heldout], [e.query for e in heldout]
    )
    assert np.allclose(out["p_unsafe"], ref.p_unsafe, atol=1e-4)
    alone = scorer.score(texts=[heldout[0].text])
    empty = scorer.score(pairs=[["", heldout[0].text]])
    assert empty["p_unsafe"] == pytest.approx(alone["p_unsafe"], abs=1e-6)
    with pytest.raises(InputError, match=r"pairs\[0\]\[1\]|texts\[0\]"):
        scorer.score(pairs=[["a question", ""]])

    single = BingoGuardCard(input="response", show_progress=False)
    plain, _ = build_bundle(
        single, Target.parse("onnx-fp32"), tmp_path / "plain", ExportOptions(), progress=False,
        verify=False,
    )  # fmt: skip
    with pytest.raises(InputError, match="scores responses alone"):
        TextScorer(plain).score(pairs=[["q", "r"]])
