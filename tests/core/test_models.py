"""The built-in model cards on real data: MiniLM (pretrained) and photo-cnn (trained in-repo)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from edgekit.build.verify import reference_runners
from edgekit.errors import InputError
from edgekit.registry import get_card

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Measured on the fp32 torch reference (x86 CPU): STS Spearman 0.654, paraphrase accuracy
# 0.824; photo-cnn held-out top-1 0.82 (varies ~0.79-0.84 with CPU float differences).
STS_SPEARMAN_FLOOR = 0.62
PARAPHRASE_ACCURACY_FLOOR = 0.78
PHOTO_TOP1_FLOOR = 0.72
# photo-vit (tiny ViT, same data): held-out top-1 0.875 clean, 0.779 under exposure jitter.
VIT_TOP1_FLOOR = 0.75


# ---- MiniLM ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def minilm():
    return get_card("minilm")


@pytest.fixture(scope="module")
def minilm_reference(minilm):
    return reference_runners(minilm)


def test_pairs_file_is_well_formed() -> None:
    from edgekit.models.minilm.data import PAIRS_FILE, load_pairs

    pairs = load_pairs()
    assert len(pairs) >= 120
    rows = [ln for ln in PAIRS_FILE.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == len(pairs) + 1  # + header; every row parsed
    assert len({(p.sentence1, p.sentence2) for p in pairs}) == len(pairs)
    labels = [p.paraphrase for p in pairs]
    assert 30 <= sum(labels) <= len(pairs) - 30
    scores = np.array([p.score for p in pairs])
    assert scores.min() <= 0.5 and scores.max() >= 4.5
    assert any(" not " in p.sentence2 or "never" in p.sentence2 for p in pairs)  # negations


def test_tokenizer_matches_transformers() -> None:
    from transformers import AutoTokenizer

    from edgekit.models.minilm.data import unique_sentences
    from edgekit.models.minilm.encoder import MAX_LENGTH, model_dir, tokenize

    texts = [*unique_sentences()[:60], "word " * 300, "Ünïcode, punctuation!? and numbers 3.14"]
    ref = AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)(
        texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="np"
    )
    ours = tokenize(texts)
    assert ours["input_ids"].shape[1] == MAX_LENGTH  # the long text is truncated to 128
    np.testing.assert_array_equal(ours["input_ids"], ref["input_ids"])
    np.testing.assert_array_equal(ours["attention_mask"], ref["attention_mask"])
    padded = tokenize(texts[:2], pad_to=MAX_LENGTH)
    assert padded["input_ids"].shape == (2, MAX_LENGTH) and padded["input_ids"].dtype == np.int64


def test_embedding_matches_sentence_transformers(minilm) -> None:
    from sentence_transformers import SentenceTransformer

    from edgekit.models.minilm.data import unique_sentences
    from edgekit.models.minilm.encoder import model_dir, tokenize

    sentences = unique_sentences()[:40]
    st = SentenceTransformer(str(model_dir()), device="cpu", local_files_only=True)
    expected = st.encode(sentences, convert_to_numpy=True, normalize_embeddings=True)
    feeds = tokenize(sentences)
    with torch.inference_mode():
        ours = minilm.encoder()(*(torch.from_numpy(v) for v in feeds.values())).numpy()
    assert ours.shape == (40, 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cosine = (ours * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.9999


def test_minilm_graph_and_data(minilm) -> None:
    (graph,) = minilm.graphs()
    inputs, outputs = graph.io_specs()
    assert [s.name for s in inputs] == ["input_ids", "attention_mask"]
    assert all(s.shape == ("batch", "sequence") and s.dtype == "int64" for s in inputs)
    assert outputs[0].name == "embedding" and outputs[0].shape == ("batch", 384)
    golden = minilm.golden_inputs()["encoder"]
    assert golden["input_ids"].shape == (4, 128) and golden["attention_mask"].sum() > 20
    calib = minilm.calibration_data(8)["encoder"]
    assert len(calib) == 8 and all(f["input_ids"].shape == (1, 128) for f in calib)
    assert minilm.architecture == "transformer" and minilm.int8_mode == "dynamic"
    assert os.path.isfile(minilm.assets()["tokenizer.json"])
    pre = json.loads(json.dumps(minilm.preprocessing()))
    assert pre["max_length"] == 128 and pre["pooling"] == "mean" and pre["normalize"] is True


def test_minilm_metrics_on_shipped_pairs(minilm, minilm_reference) -> None:
    from edgekit.models.minilm.card import word_overlap
    from edgekit.models.minilm.data import load_pairs

    metrics = minilm.evaluate(minilm_reference)
    assert metrics["sts_spearman"] >= STS_SPEARMAN_FLOOR
    assert metrics["paraphrase_accuracy"] >= PARAPHRASE_ACCURACY_FLOOR
    # baselines: the majority label's share, and word overlap (measured 0.457 against 0.654)
    labels = np.array([p.paraphrase for p in load_pairs()])
    assert metrics["majority_paraphrase_accuracy"] == max(labels.mean(), 1 - labels.mean())
    assert word_overlap("The cat sat.", "the CAT sat") == 1.0
    assert word_overlap("a b", "c d") == 0.0 and word_overlap("a b", "a c") == 1 / 3
    assert metrics["word_overlap_spearman"] < metrics["sts_spearman"]
    assert metrics["sts_gain_over_overlap_ci_low"] > 0  # the encoder beats word overlap
    for key in ("sts_spearman", "paraphrase_accuracy"):
        assert metrics[f"{key}_ci_low"] < metrics[key] < metrics[f"{key}_ci_high"]
    same = minilm.agreement(minilm_reference, minilm_reference)
    assert same["embedding_cosine_min"] > 0.99999 and same["paraphrase_flip_rate"] == 0.0
    assert same["ranking_spearman"] > 0.99999
    assert set(minilm.agreement_floors) <= set(same)


# ---- photo-cnn -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def photo():
    card = get_card("photo-cnn")
    card.train()  # trains (about 35-80 s on 2 cores) on first use, then loads from the cache
    return card


def test_photo_cnn_heldout_accuracy(photo) -> None:
    from edgekit.models.photo_cnn.net import count_parameters

    result = photo.train()
    assert result.heldout_accuracy >= PHOTO_TOP1_FLOOR
    assert 50_000 <= count_parameters(photo.model()) <= 200_000
    metrics = photo.evaluate(reference_runners(photo))
    assert metrics["top1_accuracy"] == pytest.approx(result.heldout_accuracy)
    assert metrics["top1_accuracy_exposure"] >= PHOTO_TOP1_FLOOR - 0.1
    # the trivial baseline is the most common class's share: 10 photos, 48 crops each
    assert metrics["majority_class_accuracy"] == pytest.approx(0.1)
    low, high = metrics["top1_accuracy_ci_low"], metrics["top1_accuracy_ci_high"]
    assert low < metrics["top1_accuracy"] < high and high - low < 0.1
    assert low > metrics["majority_class_accuracy"]


def test_photo_cnn_shapes_and_data(photo) -> None:
    from edgekit.models.photo_cnn import data

    (graph,) = photo.graphs()
    inputs, outputs = graph.io_specs()
    assert inputs[0].name == "image" and inputs[0].shape == ("batch", 3, 64, 64)
    assert outputs[0].name == "logits" and outputs[0].shape == ("batch", 10)
    golden = photo.golden_inputs()["classifier"]["image"]
    assert golden.shape == (4, 3, 64, 64) and golden.dtype == np.float32
    assert golden.min() >= 0.0 and golden.max() <= 1.0
    runner = reference_runners(photo)["classifier"]
    assert runner.run({"image": golden})["logits"].shape == (4, 10)
    assert runner.run({"image": golden[:1]})["logits"].shape == (1, 10)
    calib = photo.calibration_data(6)["classifier"]
    assert len(calib) == 6 and calib[0]["image"].shape == (1, 3, 64, 64)
    assert photo.labels() == list(data.PHOTOS) and len(photo.labels()) == 10
    images, labels = data.heldout_set()
    assert len(labels) >= 400 and np.bincount(labels.numpy()).min() >= 40
    assert photo.agreement({"classifier": runner}, {"classifier": runner})["top1_agreement"] == 1


def test_photo_cnn_crops_are_disjoint_and_deterministic() -> None:
    from edgekit.models.photo_cnn import data

    for photo in data.load_photos():
        (tx0, ty0, tx1, ty1), *_ = photo.regions("test")
        for x0, y0, x1, y1 in photo.regions("train"):
            assert min(x1, tx1) <= max(x0, tx0) or min(y1, ty1) <= max(y0, ty0)
    a, la = data.train_batch(24, torch.Generator().manual_seed(3))
    b, lb = data.train_batch(24, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0


def test_photo_cnn_training_is_deterministic_and_cached(tmp_path, monkeypatch) -> None:
    from edgekit.models.photo_cnn.train import TrainConfig, train_cached, train_model

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    tiny = TrainConfig(steps=3, batch_size=20)
    one, two = train_model(tiny), train_model(tiny)
    for key, value in one.state_dict.items():
        assert torch.equal(value, two.state_dict[key]), key
    first = train_cached(tiny)
    assert not first.cached and first.path is not None and first.path.parent.parent == tmp_path
    again = train_cached(tiny)
    assert again.cached and again.path == first.path
    assert all(torch.equal(v, one.state_dict[k]) for k, v in again.state_dict.items())
    assert TrainConfig(steps=4).key() != TrainConfig().key()


def test_extreme_captures_lose_information_as_exposure_and_noise_grow() -> None:
    """Extreme captures stay 8-bit images; a near-black or blown-out or very noisy capture has
    lost most of its information, a mild one little; the sensor-aware soft targets follow."""
    from edgekit.models.photo_cnn import data
    from edgekit.models.photo_cnn.train import with_extreme_captures

    crops, labels = data.heldout_set()
    crops, labels = crops[:64], labels[:64]
    captured, lost = data.extreme_captures(crops, torch.Generator().manual_seed(0))
    assert captured.shape == crops.shape and lost.shape == (64,)
    assert torch.equal(captured, (captured * 255).round() / 255)  # quantised to 8 bits
    assert float(lost.min()) >= 0.0 and float(lost.max()) <= 1.0
    level = captured.mean(dim=(1, 2, 3))
    dark, mid = level < 0.1, (level > 0.25) & (level < 0.75)
    assert dark.any() and mid.any()
    assert float(lost[dark].mean()) > 0.8 > 0.5 > float(lost[mid].min())
    images, targets = with_extreme_captures(crops, labels, 0.5, 0.05, torch.Generator())
    assert images.shape == (96, 3, 64, 64) and targets.shape == (96, 10)
    assert torch.allclose(targets.sum(1), torch.ones(96))
    assert torch.equal(targets[:64].argmax(1), labels)  # the batch itself keeps its labels
    assert float(targets[64:].max(1).values.min()) >= 0.1 - 1e-6  # lost -> uniform at worst


def test_named_recipes_set_fields_and_explicit_options_win() -> None:
    from edgekit.models.photo_cnn.train import TrainConfig, recipe_from_options
    from edgekit.models.photo_vit.recipe import ViTTrainConfig

    aware = recipe_from_options(TrainConfig, {"recipe": "sensor-aware"})
    assert aware.steps == 2 * TrainConfig().steps and aware.extreme_fraction == 0.5
    assert recipe_from_options(TrainConfig, {}) == TrainConfig()
    vit = recipe_from_options(ViTTrainConfig, {"recipe": "sensor-aware", "steps": 5, "x": 1})
    assert vit.steps == 5 and vit.extreme_fraction > 0
    assert aware.key() != TrainConfig().key()
    with pytest.raises(InputError, match="unknown recipe 'robust'.*sensor-aware"):
        recipe_from_options(TrainConfig, {"recipe": "robust"})


# ---- photo-vit -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def photo_vit():
    card = get_card("photo-vit")
    card.train()  # trains (about 40 s on 2 idle cores) on first use, then loads from the cache
    return card


def test_photo_vit_heldout_accuracy_and_shapes(photo_vit) -> None:
    from edgekit.models.photo_vit.net import PhotoViT, count_parameters

    result = photo_vit.train()
    assert result.heldout_accuracy >= VIT_TOP1_FLOOR
    model = photo_vit.model()
    assert isinstance(model, PhotoViT) and 100_000 <= count_parameters(model) <= 300_000
    runners = reference_runners(photo_vit)
    metrics = photo_vit.evaluate(runners)
    assert metrics["top1_accuracy"] == pytest.approx(result.heldout_accuracy)
    assert metrics["top1_accuracy_exposure"] >= VIT_TOP1_FLOOR - 0.1
    (graph,) = photo_vit.graphs()
    inputs, outputs = graph.io_specs()
    assert inputs[0].name == "image" and inputs[0].shape == ("batch", 3, 64, 64)
    assert outputs[0].name == "logits" and outputs[0].shape == ("batch", 10)
    golden = photo_vit.golden_inputs()["classifier"]["image"]
    assert runners["classifier"].run({"image": golden})["logits"].shape == (4, 10)
    assert runners["classifier"].run({"image": golden[:1]})["logits"].shape == (1, 10)
    assert (
        photo_vit.architecture == "transformer"
        and photo_vit.labels() == get_card("photo-cnn").labels()
    )


def test_photo_vit_recipe_reuses_photo_cnn_training(tmp_path, monkeypatch) -> None:
    from edgekit.models.photo_vit.recipe import ViTTrainConfig, train_cached

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    tiny = ViTTrainConfig(steps=2, batch_size=20, dim=32, depth=1, heads=2)
    first = train_cached(tiny)
    assert not first.cached and first.path is not None and first.path.parent.name == "photo-vit"
    again = train_cached(tiny)
    assert again.cached and again.path == first.path
    assert all(torch.equal(v, first.state_dict[k]) for k, v in again.state_dict.items())
    assert ViTTrainConfig(steps=4).key() != ViTTrainConfig().key()
