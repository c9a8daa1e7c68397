"""MMIE-Score: the "### Score" parser, rubric labels, aggregation, degradations, the judge's
step features, the zero-shot rule judge, agreement metrics, training cache and ONNX parity."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.mmie.aggregate import aggregate
from edgekit.models.mmie.batch import encode_items, item_texts
from edgekit.models.mmie.data import (
    Item,
    Step,
    _project,
    _reasoning,
    _situational,
    degrade,
    make_items,
)
from edgekit.models.mmie.embed import embed_texts, hashing_embed
from edgekit.models.mmie.images import digit_image, progress_image, shape_image
from edgekit.models.mmie.judge import decide, judge_texts
from edgekit.models.mmie.metrics import agreement_by_category, agreement_metrics
from edgekit.models.mmie.parser import (
    format_judgement,
    paper_parse,
    parse_judgement,
    parse_many,
    parse_score,
    try_parse_score,
)
from edgekit.models.mmie.rubrics import RUBRICS, rubric_score
from edgekit.models.mmie.scorer import ImageEncoder, ScorerHead
from edgekit.models.mmie.zeroshot import RuleThresholds, detect_defects, rule_scores

torch.set_num_threads(1)


# ---- parser ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("### Feedback\nfine\n### Score: 5", 5.0),
        ("### Score:4", 4.0),
        ("### Feedback\nok\n### Score (0-6): 4", 4.0),  # the paper's regex reads 0 here
        ("### Score [1 to 6]\n3", 3.0),
        ("### Score on a 0-6 scale: 2", 2.0),
        ("### Score\n\n**3**/6", 3.0),
        ("### Score: 4.5 out of 6", 4.5),
        ("### score: five", 5.0),
        ("#### SCORES: 1", 1.0),
        ("### Score: 0", 0.0),
        ("### Score: 6.", 6.0),
        # the template restated first: the last heading wins
        ("Finish with '### Score: <0-6>'.\n### Feedback\nbad\n### Score: 2", 2.0),
        # a later heading without a number does not hide the verdict
        ("### Score: 3\n### Score must be an integer", 3.0),
        # the number belongs to its own section, not to the feedback after it
        ("### Score:\n### Feedback\nstep 4 is wrong", None),
        ("The answer is weak. Score: 2", 2.0),  # no heading: the phrase fallback
        ("Step 1 ok. Overall the score is 4, step 5 missing.", 4.0),
        ("Steps 3 and 4 are fine.", None),
        ("", None),
    ],
)
def test_parse_score_reads_verdicts(text: str, expected: float | None) -> None:
    assert try_parse_score(text) == expected


def test_parse_score_rejects_out_of_range_missing_and_non_text() -> None:
    for text in ("### Score: 7", "### Score: -1", "### Score: 10/10", "### Score: none"):
        with pytest.raises(InputError, match="score|Score"):
            parse_score(text)
        assert try_parse_score(text) is None
    with pytest.raises(InputError, match="string"):
        parse_score(5)  # type: ignore[arg-type]
    assert try_parse_score("Score: 3", fallback=False) is None
    assert parse_many(["### Score: 1", "nothing", "### Score: 9"]) == [1.0, None, None]


def test_paper_regex_is_kept_and_differs_where_documented() -> None:
    assert paper_parse("### Score: 3") == 3.0
    assert paper_parse("### Score (0-6): 4") == 0.0  # first number after the heading
    assert paper_parse("### Score: -2") == -2.0 and paper_parse("no verdict") is None
    assert paper_parse("### Score: 2\n### Score: 5") == 2.0
    assert try_parse_score("### Score: 2\n### Score: 5") == 5.0


def test_experiment_parser_check_counts_what_each_reader_gets_right() -> None:
    from edgekit.models.mmie.experiment import TRICKY_VERDICTS, parser_check

    check = parser_check()
    assert check["robust_parser_correct"] == check["cases"] == len(TRICKY_VERDICTS)
    # the paper's regex reads "(0-6)" as 0, misses "six" and the heading-less verdict, takes 9
    assert check["paper_regex_reads"][1] == 0.0 and check["paper_regex_reads"][8] == 9.0
    assert check["paper_regex_correct"] == 6


def test_judgement_round_trip_and_bad_scores() -> None:
    text = format_judgement("  Step 2 shows the wrong digit.\n", 4)
    assert text == "### Feedback\nStep 2 shows the wrong digit.\n### Score: 4"
    parsed = parse_judgement(text)
    assert parsed.feedback == "Step 2 shows the wrong digit." and parsed.score == 4.0
    assert parse_judgement("no template at all").score is None
    with pytest.raises(InputError, match="outside"):
        format_judgement("x", 7)
    logits = np.full((3, 7), -5.0, np.float32)
    logits[[0, 1, 2], [6, 0, 3]] = 5.0
    coverage = np.array([[0.9, 0.2, -1, -1, -1, -1]] * 3, np.float32)
    texts = judge_texts(logits, coverage)
    assert parse_many(texts) == [6.0, 0.0, 3.0] == decide(logits).astype(float).tolist()
    assert "step 2 (match 0.20)" in texts[0]


# ---- rubric and aggregation --------------------------------------------------------------
def test_rubric_score_subtracts_category_penalties_and_clips() -> None:
    assert rubric_score("reasoning", []) == 6
    assert rubric_score("reasoning", ["wrong_final"]) == 3
    assert rubric_score("project", ["wrong_final", "reordered"]) == 3
    assert rubric_score("situational", ["reordered"]) == 6  # order does not matter there
    assert rubric_score("reasoning", ["wrong_final", "text_error", "missing_step"]) == 1  # clip
    assert rubric_score("project", ["image_swap", "image_swap"]) == 4  # repeats count again
    assert "order" in RUBRICS["project"].text() and "6:" in RUBRICS["project"].text()
    with pytest.raises(InputError, match="defect"):
        rubric_score("project", ["typo"])
    with pytest.raises(InputError, match="category"):
        rubric_score("poetry", [])


def test_aggregate_by_hand() -> None:
    cats = ["reasoning", "project", "reasoning", "situational", "project"]
    scores = [6, 3, 2, None, 4.5]
    out = aggregate(cats, scores)
    assert out["per_category"]["reasoning"]["mean"] == pytest.approx(4.0)
    assert out["per_category"]["project"]["mean"] == pytest.approx(3.75)
    assert out["per_category"]["project"]["percent"] == pytest.approx(62.5)
    assert out["per_category"]["situational"]["count"] == 0
    assert out["per_category"]["situational"]["unparsed"] == 1
    assert out["overall"]["mean"] == pytest.approx(15.5 / 4) and out["overall"]["unparsed"] == 1
    assert out["macro"]["mean"] == pytest.approx((4.0 + 3.75) / 2)  # empty category left out
    zero = aggregate(cats, scores, unparsed="zero")
    assert zero["per_category"]["situational"]["mean"] == 0.0
    assert zero["overall"]["mean"] == pytest.approx(15.5 / 5)
    with pytest.raises(InputError, match="one category per score"):
        aggregate(cats, scores[:2])
    with pytest.raises(InputError, match="unparsed"):
        aggregate(cats, scores, unparsed="drop")
    with pytest.raises(InputError, match="outside"):
        aggregate(["project"], [8])
    with pytest.raises(InputError, match="category"):
        aggregate(["essay"], [3])


# ---- data --------------------------------------------------------------------------------
def test_images_pools_and_drawings() -> None:
    rng = np.random.default_rng(0)
    a = digit_image(7, rng, held_out=False)
    assert a.shape == (16, 16) and a.dtype == np.float32 and a.min() >= 0 and a.max() <= 1
    train = {digit_image(3, rng, False).tobytes() for _ in range(40)}
    held = {digit_image(3, rng, True).tobytes() for _ in range(40)}
    assert not train & held  # held-out items never show training handwriting
    image = progress_image(2, 4, rng)
    filled = (image[8:15] > 0.5).any(axis=0)  # columns with a bar at mid height
    assert filled[:8].sum() >= 6 and not filled[8:].any()  # 2 of 4 bars, 4 px each
    circle, ring = shape_image("circle", rng), shape_image("ring", rng)
    assert (circle > 0.5).sum() > (ring > 0.5).sum()
    for bad in (
        lambda: digit_image(10, rng, False),
        lambda: progress_image(5, 4, rng),
        lambda: shape_image("star", rng),
    ):
        with pytest.raises(InputError):
            bad()


@pytest.mark.parametrize("generator", [_situational, _project, _reasoning])
def test_degradations_do_what_they_say(generator) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    _, ref = generator(rng, False)
    n = len(ref)
    assert ref[-1].image is None and all(s.image is not None for s in ref[:-1])

    def one(defect: str) -> list[Step]:
        answer, applied = degrade(ref, (defect,), np.random.default_rng(1))
        assert applied == (defect,)
        return answer

    missing = one("missing_step")
    assert len(missing) == n - 1 and missing[-1] is ref[-1]
    swapped = one("image_swap")
    changed = [i for i in range(n - 1) if not np.array_equal(swapped[i].image, ref[i].image)]
    assert len(changed) == 1 and [s.text for s in swapped] == [s.text for s in ref]
    wrong = one("text_error")
    diff = [i for i in range(n) if wrong[i].text != ref[i].text]
    assert len(diff) == 1 and wrong[diff[0]].text == ref[diff[0]].wrong_text and diff[0] < n - 1
    assert one("wrong_final")[-1].text == ref[-1].wrong_text
    order = one("reordered")
    assert sorted(s.text for s in order) == sorted(s.text for s in ref)
    assert [s.text for s in order] != [s.text for s in ref] and order[-1] is ref[-1]
    assert all(s.image is None for s in one("missing_images"))
    # an image swap in a text-only answer cannot be seen: it is dropped
    _, applied = degrade(ref, ("image_swap", "missing_images"), rng)
    assert applied == ("missing_images",)


def test_items_are_labelled_by_the_rubric() -> None:
    items = make_items(30, seed=5)
    assert [i.category for i in items[:3]] == ["situational", "project", "reasoning"]
    for item in items:
        assert item.score == rubric_score(item.category, item.defects)
    assert len({i.score for i in items}) >= 4
    with pytest.raises(InputError):
        make_items(0, 0)


def test_hashing_embedder() -> None:
    v = hashing_embed(["Half of 8 is 4.", "Half of 8 is 4.", "Half of 8 is 5.", "..."])
    assert v.shape == (4, 384) and np.allclose(np.linalg.norm(v[:3], axis=1), 1)
    assert np.allclose(v[0], v[1]) and 0.3 < float(v[0] @ v[2]) < 0.99 and not v[3].any()
    with pytest.raises(InputError, match="embedder"):
        embed_texts(["x"], "bert")


# ---- the judge ---------------------------------------------------------------------------
def _batch(items: list[Item]):  # noqa: ANN202
    return encode_items(items, embed_texts(item_texts(items), "hashing"))


def _head_inputs(batch, encoder: ImageEncoder) -> list[torch.Tensor]:  # noqa: ANN001
    def emb(side) -> torch.Tensor:  # noqa: ANN001
        b, s = side.mask.shape
        with torch.no_grad():
            return encoder(torch.from_numpy(side.images.reshape(b * s, 1, 16, 16))).reshape(
                b, s, -1
            )

    r, a = batch.reference, batch.answer
    t = torch.from_numpy
    return [
        t(batch.query),
        t(r.text),
        emb(r),
        t(r.mask),
        t(r.has_image),
        t(a.text),
        emb(a),
        t(a.mask),
        t(a.has_image),
        t(batch.category),
    ]


def test_scorer_ignores_padding_and_sees_order() -> None:
    torch.manual_seed(0)
    head, encoder = ScorerHead().eval(), ImageEncoder().eval()
    items = make_items(6, seed=2)
    clean = [replace(i, answer=i.reference, defects=(), score=6) for i in items]
    inputs = _head_inputs(_batch(clean), encoder)
    with torch.no_grad():
        logits, coverage = head(*inputs)
        noisy = [x.clone() for x in inputs]
        for k, mask in ((1, 3), (2, 3), (5, 7), (6, 7)):  # text/image rows of padded steps
            pad = noisy[mask] == 0
            noisy[k][pad] = torch.randn_like(noisy[k][pad])
        logits2, coverage2 = head(*noisy)
        feats, _ = head.features(*inputs[:9])
    torch.testing.assert_close(logits, logits2)
    torch.testing.assert_close(coverage, coverage2)
    assert logits.shape == (6, 7) and torch.all(coverage[inputs[3] == 0] == -1)
    assert torch.allclose(coverage[inputs[3] > 0], torch.ones(()), atol=1e-5)  # answer == ref
    assert torch.all(feats[:, 10] == 0)  # no disorder when the answer is the reference
    flipped = [replace(i, answer=(*i.reference[:-1][::-1], i.reference[-1])) for i in clean]
    with torch.no_grad():
        disorder = head.features(*_head_inputs(_batch(flipped), encoder)[:9])[0][:, 10]
    assert torch.all(disorder > 0.5)


def test_rule_judge_scores_clean_answers_6_and_finds_planted_defects() -> None:
    items = make_items(12, seed=4)
    clean = [replace(i, answer=i.reference, defects=(), score=6) for i in items]
    batch = _batch(clean)
    same = np.random.default_rng(0).normal(size=(*batch.reference.mask.shape, 8))
    assert rule_scores(batch, same, same).tolist() == [6] * 12
    rng = np.random.default_rng(9)
    planted = []
    for item, defect in zip(
        clean, ["missing_step", "missing_images", "off_topic"] * 4, strict=True
    ):
        answer, applied = degrade(list(item.reference), (defect,), rng)
        planted.append(replace(item, answer=tuple(answer), defects=applied))
    batch = _batch(planted)
    found = detect_defects(batch, same, same, RuleThresholds(text=0.99))
    for item, defects in zip(planted, found, strict=True):
        assert item.defects[0] in defects, (item.defects, defects)
    other = same.copy()
    other[:, 0] = -other[:, 0]  # the first answer image now points the other way
    swapped = detect_defects(_batch(clean), same, other, RuleThresholds())
    assert all(d == ["image_swap"] for d in swapped)


def test_agreement_metrics_by_hand_and_against_numpy() -> None:
    pred = [6, 5, None, 2, 1, 3]
    gold = [6, 3, 4, 2, 2, 3]
    m = agreement_metrics(pred, gold)
    assert m["exact"] == pytest.approx(3 / 6) and m["within1"] == pytest.approx(4 / 6)
    assert m["mae"] == pytest.approx((0 + 2 + 0 + 1 + 0) / 5) and m["parsed"] == pytest.approx(
        5 / 6
    )
    kept = np.array([[6, 5, 2, 1, 3], [6, 3, 2, 2, 3]], float)
    assert m["pearson"] == pytest.approx(np.corrcoef(kept)[0, 1])
    by = agreement_by_category(pred, gold, ["project"] * 3 + ["reasoning"] * 3)
    assert by["per_category"]["reasoning"]["exact"] == pytest.approx(2 / 3)
    assert np.isnan(agreement_metrics([3, 3], [1, 5])["spearman"])  # constant judge
    with pytest.raises(InputError):
        agreement_metrics([1], [1, 2])


def test_agreement_intervals_bracket_the_metrics_and_pair_the_judges() -> None:
    from edgekit.models.mmie.experiment import agreement_intervals

    rng = np.random.default_rng(0)
    gold = rng.integers(1, 7, 300).tolist()
    good = [g if rng.random() < 0.9 else None for g in gold]  # right or unparsed
    constant = [3.0] * 300
    out = agreement_intervals({"judge": good, "constant": constant}, gold, "judge")
    exact = agreement_metrics(good, gold)["exact"]
    low, high = out["judge"]["exact"]
    assert low < exact < high and high - low < 0.1
    low, high = out["constant"]["exact"]
    assert low < np.mean(np.array(gold) == 3) < high
    # the paired difference excludes 0 for a judge that is right where the constant is not
    assert out["judge - constant"]["exact"][0] > 0.5
    same = agreement_intervals({"a": good, "b": list(good)}, gold, "a")
    assert same["a - b"] == {"exact": [0.0, 0.0], "within1": [0.0, 0.0]}


def test_training_is_cached_and_onnx_matches_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.mmie.graphs import judge_graphs
    from edgekit.models.mmie.judge import score_batch
    from edgekit.models.mmie.train import MMIEConfig, train_judge
    from edgekit.runtimes import RuntimeOptions, get_runtime
    from edgekit.runtimes.torch import eager_runners

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    config = MMIEConfig(
        train_items=120, val_items=30, test_items=120, embedder="hashing", epochs=6, batch=32
    )
    batches, _ = config.batches()
    first = train_judge(config, batches=batches)
    again = train_judge(config, batches=batches)
    assert not first.cached and again.cached and len(again.val_exact) == 6
    for a, b in zip(
        first.head.state_dict().values(), again.head.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b)
    graphs = judge_graphs(again.image_encoder, again.head, batches["test"].take(np.arange(2)))
    runtime = get_runtime("onnxruntime")
    onnx = {
        g.name: runtime.load(
            export_onnx(g, tmp_path / f"{g.name}.onnx", opset=17), "cpu", RuntimeOptions(threads=1)
        )
        for g in graphs
    }
    ref_logits, ref_cov = score_batch(eager_runners(graphs), batches["test"])
    logits, cov = score_batch(onnx, batches["test"])
    np.testing.assert_allclose(logits, ref_logits, atol=1e-4)
    np.testing.assert_allclose(cov, ref_cov, atol=1e-5)
    # the exported judge agrees with the rubric on the 120 held-out-handwriting test items far
    # better than always answering the most common training score (measured: exact 0.40
    # against 0.21, MAE 0.88 against 1.40, Pearson 0.80); trained on shuffled labels it falls
    # below that baseline (exact 0.13, MAE 1.80)
    gold = batches["test"].label.tolist()
    judged = agreement_metrics(decide(logits).tolist(), gold)
    majority = int(np.bincount(batches["train"].label).argmax())
    baseline = agreement_metrics([majority] * len(gold), gold)
    assert judged["exact"] >= baseline["exact"] + 0.1, (judged, baseline)
    assert judged["mae"] <= baseline["mae"] - 0.3, (judged, baseline)
    assert judged["pearson"] >= 0.5, judged
    # and its coverage output separates clean answers from planted text defects
    clean = [
        replace(i, answer=i.reference, defects=(), score=6)
        for i in make_items(12, seed=7, held_out=True)
    ]
    rng = np.random.default_rng(1)
    bad = []
    for item, defect in zip(
        clean, ["missing_step", "wrong_final", "text_error", "off_topic"] * 3, strict=True
    ):
        answer, applied = degrade(list(item.reference), (defect,), rng)
        bad.append(replace(item, answer=tuple(answer), defects=applied))
    worst = [
        np.array([row[row >= 0].min() for row in score_batch(onnx, _batch(items))[1]])
        for items in (clean, bad)
    ]
    np.testing.assert_allclose(worst[0], 1.0, atol=1e-4)  # every reference step matched
    assert worst[1].max() < 0.95, worst[1]  # each defect leaves a reference step unmatched


def test_card_and_config_reject_bad_options() -> None:
    from edgekit.models.mmie.train import MMIEConfig
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="MMIEConfig"):
        get_card("mmie-score", layers=3)
    with pytest.raises(InputError, match="embedder"):
        MMIEConfig(embedder="clip")
    with pytest.raises(InputError, match="epochs"):
        MMIEConfig(epochs=0)
