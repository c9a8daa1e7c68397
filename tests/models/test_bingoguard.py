"""BingoGuard (compact): taxonomy, held-out set, generate-then-filter, metrics, decision parity,
bad input, training cache, and a fast export (the LLM judge: test_bingoguard_judge.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.build.decision_parity import (
    class_flip_rate,
    decided_class_agreement,
    decision_flip_rate,
    decision_parity,
    expected_calibration_error,
    fnr_at_fpr,
    threshold_at_fpr,
)
from edgekit.errors import InputError
from edgekit.models.bingoguard import generate
from edgekit.models.bingoguard.data import load_heldout
from edgekit.models.bingoguard.generate import GeneratorConfig
from edgekit.models.bingoguard.metrics import average_precision, binary_metrics, severity_metrics
from edgekit.models.bingoguard.taxonomy import check_level, load_taxonomy

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PAPER_TOPICS = (
    "Violent crime", "Sex-related crime", "Sexual content", "Profanity",
    "Hate and discrimination", "Self-harm", "Non-violent illegal activity", "Weapon",
    "Privacy", "Intellectual property", "Misinformation",
)  # fmt: skip
SMALL = GeneratorConfig(per_cell=30)


# ---- taxonomy and held-out set -----------------------------------------------------------------
def test_taxonomy_is_complete() -> None:
    tax = load_taxonomy()
    assert [t.id for t in tax.topics] == [f"S{i}" for i in range(1, 12)]
    assert tuple(t.name for t in tax.topics) == PAPER_TOPICS
    assert [lv.level for lv in tax.levels] == [0, 1, 2, 3, 4]
    assert [lv.unsafe for lv in tax.levels] == [False, True, True, True, True]
    assert {d for d, _ in tax.dimensions} >= {"intention", "content", "impact", "graphic"}
    for topic in tax.topics:
        assert len(topic.rubric) == 5 and len(set(topic.rubric)) == 5
        assert all(len(text.split()) >= 8 for text in topic.rubric)
    assert tax.topic("s8") is tax.topic("weapon") is tax.topic("Weapon") is tax.topics[7]
    assert tax.topic("Violent_Crime").id == "S1"
    assert tax.rubric_text("S6", 4).startswith("Extreme risk")


def test_unknown_topic_and_bad_level_are_clear_errors() -> None:
    tax = load_taxonomy()
    with pytest.raises(InputError, match="unknown BingoGuard topic 'gambling'.*S1"):
        tax.topic("gambling")
    for bad in (5, -1, 2.5, "3", None):
        with pytest.raises(InputError, match="integer 0-4"):
            check_level(bad)  # type: ignore[arg-type]


def test_heldout_covers_every_topic_and_level() -> None:
    heldout = load_heldout()
    assert len(heldout) >= 150
    cells = {(e.topic, e.level) for e in heldout}
    assert cells == {(t, lv) for t in range(11) for lv in range(5)}
    counts = np.zeros((11, 5), dtype=int)
    for e in heldout:
        counts[e.topic, e.level] += 1
    assert counts.min() >= 3
    assert len({e.text for e in heldout}) == len(heldout)


def test_heldout_never_overlaps_generated_text() -> None:
    heldout = [e.text for e in load_heldout()]
    candidates = [c.text for c in generate.generate_candidates(GeneratorConfig())]
    normal = {" ".join(t.lower().split()) for t in candidates}
    assert not [t for t in heldout if " ".join(t.lower().split()) in normal]
    # not even a six-word phrase in common with anything the generator can write
    assert generate.shared_ngrams(heldout, candidates, n=6) == set()
    assert generate.shared_ngrams(heldout[:5], heldout[:5], n=6)  # the audit does see overlap


# ---- generate-then-filter -----------------------------------------------------------------------
def test_generator_is_deterministic_and_fills_every_cell() -> None:
    first = generate.generate_candidates(SMALL)
    assert first == generate.generate_candidates(SMALL)
    assert first != generate.generate_candidates(GeneratorConfig(per_cell=30, seed=1))
    cells = {(c.topic, c.level) for c in first}
    assert len(cells) == 55 and len(first) == 55 * 30
    assert not any("{" in c.text or "  " in c.text for c in first)
    kinds = {c.drift for c in first}
    assert kinds == {"", "frame", "level", "topic"}
    for c in first:
        assert (c.drift == "topic") == (c.core[0] != c.topic)
        assert (c.drift == "level") == (c.core[0] == c.topic and c.core[1] != c.level)


def test_filter_removes_strayed_candidates_and_reports_survivors() -> None:
    dataset = generate.build_dataset(SMALL)
    report = dataset.report
    assert report.total_generated == 55 * 30
    assert report.total_kept == len(dataset.train) + len(dataset.validation)
    assert set(report.kept) == set(report.generated) and len(report.kept) == 55
    assert all(0 < report.kept[k] <= report.generated[k] for k in report.kept)
    made, removed = report.by_drift["topic"]
    assert made and removed / made >= 0.8  # another topic's core: nearly always caught
    made, removed = report.by_drift["level"]
    assert made and removed / made >= 0.5
    made, removed = report.by_drift["none"]
    assert removed / made <= 0.03  # faithful candidates survive
    rows = generate.survivor_table(report)
    assert len(rows) == 11 and rows[0][0] == "S1 Violent crime" and rows[0][-1].endswith("/150")
    again = generate.filter_candidates(generate.generate_candidates(SMALL), SMALL)
    assert again[1].kept == report.kept


def test_train_and_validation_never_share_a_core_sentence() -> None:
    survivors, _ = generate.filter_candidates(generate.generate_candidates(SMALL), SMALL)
    val_cores = {c.core for c in survivors if generate.is_validation_core(c.core)}
    train_cores = {c.core for c in survivors if not generate.is_validation_core(c.core)}
    assert val_cores and train_cores and not val_cores & train_cores
    dataset = generate.build_dataset(SMALL)
    assert not {e.text for e in dataset.train} & {e.text for e in dataset.validation}


def test_generator_config_refuses_bad_values() -> None:
    with pytest.raises(InputError, match="probability"):
        GeneratorConfig(drift=1.5)
    with pytest.raises(InputError, match="per_cell"):
        GeneratorConfig(per_cell=0)


# ---- metrics ------------------------------------------------------------------------------------
def test_binary_metrics_on_a_hand_computed_case() -> None:
    labels = np.array([1, 1, 1, 0, 0, 1, 0, 0])
    scores = np.array([0.9, 0.8, 0.3, 0.7, 0.2, 0.6, 0.1, 0.4])
    m = binary_metrics(labels, scores, threshold=0.5)
    # predicted unsafe: 0.9, 0.8, 0.7, 0.6 -> TP 3, FP 1, FN 1, TN 3
    assert m["accuracy"] == pytest.approx(6 / 8)
    assert m["precision"] == pytest.approx(3 / 4) and m["recall"] == pytest.approx(3 / 4)
    assert m["f1"] == pytest.approx(3 / 4) and m["fpr"] == pytest.approx(1 / 4)
    # ranking 1 1 0 1 0 1 0 0: AP = (1/1 + 2/2 + 3/4 + 4/6) / 4
    assert m["auprc"] == pytest.approx((1 + 1 + 3 / 4 + 4 / 6) / 4)


def test_average_precision_groups_ties_like_sklearn() -> None:
    from sklearn.metrics import average_precision_score

    # a tie between a positive and a negative at the top enters together: P = 1/2 at R = 1/2
    assert average_precision([1, 0, 1], [0.9, 0.9, 0.1]) == pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        y = rng.integers(0, 2, 200)
        s = np.round(rng.random(200), 1)  # many ties
        assert average_precision(y, s) == pytest.approx(average_precision_score(y, s))
    assert average_precision([0, 0], [0.3, 0.2]) == 0.0


def test_severity_metrics_on_a_hand_computed_case() -> None:
    true = np.array([0, 0, 1, 1, 2, 3, 4, 4])
    pred = np.array([0, 1, 1, 1, 2, 4, 4, 3])
    m = severity_metrics(true, pred)
    assert list(m)[0] == "severity_macro_f1"
    per_level = [m[f"severity_acc_level{k}"] for k in range(5)]
    assert per_level == pytest.approx([0.5, 1.0, 1.0, 0.0, 0.5])
    # F1 per level: 0: P1 R.5 -> 2/3; 1: P2/3 R1 -> .8; 2: 1; 3: 0; 4: P.5 R.5 -> .5
    assert m["severity_macro_f1"] == pytest.approx((2 / 3 + 0.8 + 1 + 0 + 0.5) / 5)
    with pytest.raises(InputError):
        severity_metrics(np.array([0, 5]), np.array([0, 1]))
    with pytest.raises(InputError):
        binary_metrics(np.array([0, 2]), np.array([0.1, 0.2]))


# ---- decision parity ----------------------------------------------------------------------------
def test_decision_parity_metrics_on_hand_computed_cases() -> None:
    ref = np.array([0.1, 0.45, 0.55, 0.9])
    cand = np.array([0.1, 0.52, 0.55, 0.2])
    assert decision_flip_rate(ref, cand, 0.5) == pytest.approx(0.5)
    assert class_flip_rate(np.eye(3), np.eye(3)[[0, 2, 2]]) == pytest.approx(1 / 3)
    # rows 0-1 decided clearly (softmax margin ~0.9), row 2 a near-tie (margin ~0.05)
    ref_logits = np.array([[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [1.0, 1.1, -5.0]])
    tie_flips = ref_logits.copy()
    tie_flips[2] = [1.1, 1.0, -5.0]
    assert decided_class_agreement(ref_logits, tie_flips, 0.1) == pytest.approx((1.0, 2 / 3))
    clear_flips = tie_flips.copy()
    clear_flips[0] = [0.0, 5.0, 0.0]
    assert decided_class_agreement(ref_logits, clear_flips, 0.1) == pytest.approx((0.5, 2 / 3))
    assert decided_class_agreement(ref_logits, clear_flips, 0.0)[0] == pytest.approx(1 / 3)
    assert decided_class_agreement(ref_logits[2:], tie_flips[2:], 0.1) == (1.0, 0.0)
    with pytest.raises(InputError):
        decided_class_agreement(ref_logits, ref_logits[:, :2], 0.1)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0])
    scores = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 0.7, 0.6, 0.25, 0.85, 0.4])
    # 5 negatives: FPR 0.2 allows one false positive -> threshold just above 0.4
    th = threshold_at_fpr(scores, labels, 0.2)
    assert 0.4 < th < 0.4 + 1e-12
    fnr, _ = fnr_at_fpr(scores, labels, 0.2)
    assert fnr == pytest.approx(1 / 5)  # only 0.25 falls under it
    assert fnr_at_fpr(scores, labels, 0.0)[0] == pytest.approx(3 / 5)  # above 0.8: 0.9, 0.85
    probs = np.array([0.05, 0.15, 0.95, 0.85])
    ece = expected_calibration_error(probs, np.array([0, 1, 1, 1]), bins=10)
    # bins 0, 1, 8, 9 hold one each: |0-.05| + |1-.15| + |1-.85| + |1-.95| over 4
    assert ece == pytest.approx((0.05 + 0.85 + 0.15 + 0.05) / 4)
    same = decision_parity(scores, scores, labels, 0.5)
    assert same["decision_flip_rate"] == 0 and same["fnr_shift_rate"] == 0
    assert same["calibration_shift_error"] == 0
    moved = decision_parity(scores, np.clip(scores + 0.22, 0, 1), labels, 0.5)
    assert moved["decision_flip_rate"] == pytest.approx(2 / 10)  # 0.3 and 0.4 cross 0.5
    with pytest.raises(InputError, match="negative"):
        fnr_at_fpr(scores[labels == 1], labels[labels == 1], 0.1)


# ---- bad input to the scorer ---------------------------------------------------------------------
class _ZeroRunner:
    """Returns fixed logits of the scorer graph's shapes; counts the sequence lengths it saw."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def run(self, feeds):  # noqa: ANN001, ANN201
        n, length = feeds["input_ids"].shape
        self.lengths.append(length)
        return {
            "safety_logits": np.tile([[0.0, 1.0]], (n, 1)).astype(np.float32),
            "topic_logits": np.zeros((n, 11), np.float32),
            "severity_logits": np.zeros((n, 5), np.float32),
        }


def test_scorer_input_rules() -> None:
    from edgekit.models.bingoguard.scoring import score_texts

    runner = _ZeroRunner()
    long_text = "please stay safe " * 200
    scores = score_texts(runner, ["short text", long_text, "caf\u00e9".encode()], batch=2)
    assert scores.truncated.tolist() == [False, True, False] and scores.truncated_count == 1
    assert set(runner.lengths) == {128}  # one padded length for every batch, capped at 128
    assert scores.p_unsafe == pytest.approx([1 / (1 + np.exp(-1))] * 3)
    with pytest.raises(InputError, match="text 1 is empty"):
        score_texts(runner, ["fine", "   "])
    with pytest.raises(InputError, match="not valid UTF-8"):
        score_texts(runner, [b"\xff\xfe bad"])
    with pytest.raises(InputError, match="no texts"):
        score_texts(runner, [])


# ---- training (tiny recipe) ------------------------------------------------------------------------
def test_training_is_cached_and_heads_fit_deterministically(tmp_path, monkeypatch) -> None:
    from edgekit.models.bingoguard import train as train_mod
    from edgekit.models.bingoguard.net import ModerationHeads

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    config = train_mod.TrainConfig(per_cell=4, epochs=3, batch_size=32)
    result = train_mod.train_cached(config, show_progress=False)
    assert not result.cached and result.path and result.path.parent == tmp_path / "bingoguard"
    assert set(result.state_dict) == {f"heads.{k}" for k in ModerationHeads().state_dict()}
    assert result.survivors["total_generated"] == 55 * 4
    # even this tiny recipe beats the trivial scorers: it flags few everyday texts (flagging
    # everything: all of them), and on its validation split always answering the most common
    # level gets one level right at best (0.11 macro-F1; this recipe 0.59, 0.09 when trained
    # on shuffled labels). The split holds 10 texts, too few for a binary claim (trained on
    # shuffled labels the scorer still ranks them perfectly): the shipped scorer's binary
    # skill is tested on the held-out set (test_shipped_scorer_beats_the_trivial_scorers...)
    val = generate.build_dataset(config.generator_config()).validation
    levels = np.array([e.level for e in val])
    majority = severity_metrics(levels, np.full(len(val), np.bincount(levels).argmax()))
    assert result.validation["everyday_fpr"] <= 0.2, result.validation
    sev = result.validation["severity_macro_f1"]
    assert sev >= majority["severity_macro_f1"] + 0.2, (sev, majority)
    again = train_mod.train_cached(config, show_progress=False)
    assert again.cached and all(
        torch.equal(again.state_dict[k], v) for k, v in result.state_dict.items()
    )

    def fit_once() -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        heads = ModerationHeads(dim=48, hidden=16)
        features = torch.randn(96, 48, generator=torch.Generator().manual_seed(1))
        targets = (torch.arange(96) % 2, torch.arange(96) % 11, torch.arange(96) % 5)
        loss = train_mod.fit(heads, features, targets, config)
        assert np.isfinite(loss) and not heads.training
        return heads.state_dict()

    first, second = fit_once(), fit_once()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_shipped_scorer_beats_the_trivial_scorers_on_the_heldout_set() -> None:
    """The shipped heads of the response-only recipe on the 165 hand-written held-out texts (no text
    or core sentence of the generator's): flagging everything ranks at the unsafe share (AUPRC
    0.80) with FPR 1; the most common level and topic get 1 of 5 levels and 1 of 11 topics
    right. Measured: AUPRC 0.97, FPR 0.21 at recall 0.89, severity macro-F1 0.74, topic 0.86."""
    from edgekit.models.bingoguard import train as train_mod
    from edgekit.models.bingoguard.metrics import task_metrics

    result = train_mod.load_cached(train_mod.TrainConfig(input="response"))
    if result is None:
        pytest.skip("no shipped or cached BingoGuard weights for the response-only recipe")
    heldout = list(load_heldout())
    m = task_metrics(heldout, **train_mod.predict(result.build(), [e.text for e in heldout]))
    unsafe = np.array([e.unsafe for e in heldout])
    levels = np.array([e.level for e in heldout])
    flag_all = binary_metrics(unsafe, np.ones(len(heldout)))
    majority = severity_metrics(levels, np.full(len(levels), np.bincount(levels).argmax()))
    assert flag_all["auprc"] == pytest.approx(unsafe.mean()) == pytest.approx(0.8)
    assert m["binary_auprc"] >= flag_all["auprc"] + 0.1, m
    assert m["binary_recall"] >= 0.8 and m["binary_fpr"] <= 0.4, m
    assert m["severity_macro_f1"] >= majority["severity_macro_f1"] + 0.4, m
    assert m["topic_accuracy"] >= 0.6, m  # the most common topic: 15 of 165
    # the report carries the same baselines and intervals (measured: F1 0.918 against
    # flag-everything's 0.889, paired interval [-0.016, +0.075]: no measurable difference)
    assert m["flag_all_f1"] == pytest.approx(flag_all["f1"]) == pytest.approx(2 * 0.8 / 1.8)
    assert m["flag_all_auprc"] == pytest.approx(0.8)
    assert m["majority_severity_macro_f1"] == pytest.approx(majority["severity_macro_f1"])
    assert m["binary_f1_ci_low"] < m["binary_f1"] < m["binary_f1_ci_high"]
    gain = m["binary_f1"] - m["flag_all_f1"]
    assert m["binary_f1_minus_flag_all_ci_low"] < gain < m["binary_f1_minus_flag_all_ci_high"]
    assert m["binary_auprc_minus_flag_all_ci_low"] > 0.1, m
    assert m["severity_macro_f1_minus_majority_ci_low"] > 0.4, m


def test_baseline_metrics_give_flag_all_and_majority_and_paired_intervals() -> None:
    from edgekit.models.bingoguard.metrics import baseline_metrics

    rng = np.random.default_rng(0)
    unsafe = (rng.random(200) < 0.7).astype(int)
    levels = np.where(unsafe == 1, rng.integers(1, 5, 200), 0)
    perfect = baseline_metrics(unsafe, unsafe.astype(float), levels, levels)
    u = unsafe.mean()
    assert perfect["flag_all_f1"] == pytest.approx(2 * u / (1 + u))
    assert perfect["flag_all_precision"] == perfect["flag_all_auprc"] == pytest.approx(u)
    assert perfect["majority_severity_macro_f1"] == pytest.approx(
        severity_metrics(levels, np.full(200, np.bincount(levels).argmax()))["severity_macro_f1"]
    )
    assert perfect["binary_f1_minus_flag_all_ci_low"] > 0.1  # a perfect scorer: clearly better
    assert perfect["severity_macro_f1_minus_majority_ci_low"] > 0.5
    # a scorer that flags everything is the baseline: its paired difference is exactly 0
    trivial = baseline_metrics(unsafe, np.ones(200), levels, np.full(200, 1))
    assert (
        trivial["binary_f1_minus_flag_all_ci_low"]
        == trivial["binary_f1_minus_flag_all_ci_high"]
        == pytest.approx(0.0)
    )
    assert trivial["binary_auprc_minus_flag_all_ci_high"] == pytest.approx(0.0)


# ---- fast export + decision parity (tiny BERT of the same architecture) --------------------------
def _tiny_card():
    from transformers import BertConfig, BertModel

    from edgekit.models.bingoguard.card import BingoGuardCard
    from edgekit.models.bingoguard.net import BingoGuardNet

    class TinyBingoGuard(BingoGuardCard):
        """The real card with a 2-layer, 64-wide random BERT: the same graph, fast to export."""

        name = "bingoguard-tiny-test"
        agreement_floors = {"decision_flip_rate": 0.05, "fnr_shift_rate": 0.1}

        def train(self, progress=None):  # noqa: ANN001, ANN202
            return None

        def model(self):  # noqa: ANN202
            if self._model is None:
                torch.manual_seed(0)
                config = BertConfig(
                    hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=128,
                )  # fmt: skip
                bert = BertModel(config, add_pooling_layer=False)
                model = BingoGuardNet(bert, hidden=32)
                with torch.no_grad():  # spread P(unsafe) over (0, 1) so the threshold matters
                    model.heads.safety.weight.mul_(8.0)
                self._model = model.eval()
            return self._model

        def parity_examples(self):  # noqa: ANN202
            return list(load_heldout())

        def calibration_data(self, limit: int = 64):  # noqa: ANN202
            from edgekit.models.minilm.encoder import tokenize

            texts = [e.text for e in load_heldout()[: min(limit, 16)]]
            return {"scorer": [tokenize([t], pad_to=128) for t in texts]}

    return TinyBingoGuard(show_progress=False)


def test_fast_export_reports_decision_parity(tmp_path: Path) -> None:
    from edgekit.build.pipeline import build_bundle
    from edgekit.build.verify import reference_runners
    from edgekit.exporters import ExportOptions, Target

    card = _tiny_card()
    reference = reference_runners(card)
    probs = card.score(reference["scorer"], [e.text for e in load_heldout()]).p_unsafe
    assert probs.std() > 0.05  # the decisions at 0.5 are not all the same
    fp32, report = build_bundle(
        card, Target.parse("onnx-fp32"), tmp_path / "fp32", ExportOptions(), progress=False
    )
    assert report is not None and report.passed, report.failures()
    assert report.agreement["decision_flip_rate"] == 0.0
    assert report.agreement["fnr_shift_rate"] == 0.0
    assert report.agreement["calibration_shift_error"] < 1e-4
    assert report.agreement["parity_texts"] == len(load_heldout())
    names = {c.name for c in report.checks}
    assert {"agreement decision_flip_rate", "agreement fnr_shift_rate"} <= names
    # the exported graph scores the held-out set as the torch model does, metric for metric
    assert {"binary_f1", "severity_macro_f1"} <= set(report.task["candidate"])
    assert report.task["candidate"] == pytest.approx(report.task["reference"], abs=1e-6)
    assert (fp32.path / "assets" / "taxonomy.json").is_file()
    assert (fp32.path / "assets" / "tokenizer.json").is_file()
    int8, report8 = build_bundle(
        card, Target.parse("onnx-int8"), tmp_path / "int8", ExportOptions(), progress=False,
        verify=False,
    )  # fmt: skip
    sessions = int8.sessions()
    agreement = card.agreement(reference, sessions)
    # int8 keeps the decisions within the card's own floors ...
    assert agreement["decision_flip_rate"] <= card.agreement_floors["decision_flip_rate"]
    assert agreement["fnr_shift_rate"] <= card.agreement_floors["fnr_shift_rate"]
    assert agreement["calibration_shift_error"] < 0.05, agreement
    # ... and every score near fp32's (measured: P(unsafe) within 0.003, 3 of 165 severity and 1
    # topic argmax flipped). 8 of the 165 texts score under 0.5, so a constant P(unsafe) above it
    # would pass the decision floor; it would not pass these (quantised weights zeroed: all fail)
    assert agreement["score_max_abs_error"] < 0.02, agreement
    assert agreement["severity_flip_rate"] <= 0.05 and agreement["topic_flip_rate"] <= 0.05
