"""MM1.5 recipe: bitmap font, boxes as text, image splitting, mixture config, tiny VLM, ONNX."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.mm15 import vocab
from edgekit.models.mm15.coords import box_iou, box_text, normalise_box, parse_box
from edgekit.models.mm15.font import FONT_CHARS, glyph, render_text, text_size
from edgekit.models.mm15.mixture import DEFAULT_RECIPE, Recipe, Stage, batch_categories
from edgekit.models.mm15.scenes import SHAPES, shape_mask, shape_scene
from edgekit.models.mm15.splitting import (
    candidate_grids,
    image_tiles,
    resize_area,
    select_grid,
    split_image,
)
from edgekit.models.mm15.tasks import CATEGORIES, make_examples

torch.set_num_threads(1)


def test_font_glyphs_are_distinct_and_render_where_asked() -> None:
    bitmaps = {glyph(c).tobytes() for c in FONT_CHARS}
    assert len(bitmaps) == len(FONT_CHARS) == 36
    image = np.zeros((10, 20), np.float32)
    render_text(image, "7A", 2, 3)
    assert text_size("7A") == (5, 7)
    np.testing.assert_array_equal(image[2:7, 3:6], glyph("7"))
    np.testing.assert_array_equal(image[2:7, 7:10], glyph("A"))
    assert image[:, 6].sum() == 0 and image.sum() == glyph("7").sum() + glyph("A").sum()
    big = render_text(np.zeros((10, 6), np.float32), "1", 0, 0, scale=2)
    np.testing.assert_array_equal(big[::2, ::2], glyph("1"))
    with pytest.raises(InputError, match="does not fit"):
        render_text(np.zeros((4, 4), np.float32), "1", 0, 0)
    with pytest.raises(InputError, match="no glyph"):
        glyph("?")


def test_boxes_as_text_round_trip_and_iou() -> None:
    # 32 px wide, 100 bins: x = 8 -> round(8 * 99 / 32) = round(24.75) = 25
    assert normalise_box((8, 4, 16, 32), (32, 32)) == [25, 12, 50, 99]
    text = box_text((8, 4, 16, 32), (32, 32))
    assert text == "<box>25,12,50,99</box>"
    back = parse_box("the answer " + text, (32, 32))
    assert back is not None and np.abs(back - [8, 4, 16, 32]).max() <= 32 / 99 / 2 + 1e-9
    assert parse_box("<box>1,2,3</box>", (32, 32)) is None
    assert parse_box("<box>1,2,3,100</box>", (32, 32)) is None  # beyond bins - 1
    a = np.array([0.0, 0.0, 4.0, 4.0])
    assert box_iou(a, np.array([2.0, 0.0, 6.0, 4.0])) == pytest.approx(8 / 24)
    assert box_iou(a, np.array([5.0, 5.0, 6.0, 6.0])) == 0.0 and box_iou(None, a) == 0.0
    with pytest.raises(InputError, match="not inside"):
        normalise_box((5, 0, 3, 2), (32, 32))
    with pytest.raises(InputError, match="bins"):
        box_text((0, 0, 1, 1), (4, 4), bins=1)


def test_select_grid_keeps_resolution_then_minimises_waste() -> None:
    assert candidate_grids(2) == [(1, 1), (1, 2), (2, 1)]
    assert select_grid(32, 32, 16, 4) == (2, 2)  # exact fit
    assert select_grid(16, 64, 16, 4) == (1, 4)  # wide image -> one row of four
    assert select_grid(10, 10, 16, 4) == (1, 1)  # small image: no split needed
    # 100 x 30, tile 24, <= 6 tiles: (4, 1) scales by 0.8 (eff 1920 px); (5, 1) / (6, 1) reach
    # the same effective resolution but waste more, (3, 2) only reaches 0.72^2 * 3000
    assert select_grid(100, 30, 24, 6) == (4, 1)
    with pytest.raises(InputError):
        select_grid(0, 10, 16, 4)


def test_split_image_gives_overview_then_full_resolution_tiles() -> None:
    image = np.arange(16, dtype=np.float32).reshape(4, 4)
    tiles = split_image(image, 2, (2, 2))
    assert tiles.shape == (5, 2, 2)
    np.testing.assert_allclose(tiles[0], [[2.5, 4.5], [10.5, 12.5]])  # 2x2 block means
    np.testing.assert_array_equal(tiles[1], image[:2, :2])
    np.testing.assert_array_equal(tiles[2], image[:2, 2:])
    np.testing.assert_array_equal(tiles[4], image[2:, 2:])
    # area resize preserves the mean, upsampling by 2 repeats pixels
    rng = np.random.default_rng(0)
    x = rng.random((12, 9)).astype(np.float32)
    assert resize_area(x, 5, 7).mean() == pytest.approx(x.mean(), rel=1e-5)
    np.testing.assert_allclose(resize_area(image, 8, 8)[::2, ::2], image)
    assert image_tiles(x, 4, 4, split=False).shape == (1, 4, 4)


def _ideal_reader_accuracy(split: bool, seed: int = 0, count: int = 8) -> float:
    """Per-character accuracy of a nearest-template reader that knows where the text is:
    every candidate character is rendered at each slot, passed through the same view (split
    tiles or overview) and compared with the view of the real image."""
    from edgekit.models.mm15.scenes import text_scene

    size, tile = 48, 16
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(count):
        text = "".join(rng.choice(list(FONT_CHARS), 4))
        image, box = text_scene(rng, size, text)
        view = image_tiles(image, tile, 9, split)
        for slot, truth in enumerate(text):
            errors = []
            for char in FONT_CHARS:
                probe = render_text(np.zeros_like(image), char, box[1], box[0] + 4 * slot)
                errors.append(((image_tiles(probe, tile, 9, split) - view) ** 2).sum())
            hits += FONT_CHARS[int(np.argmin(errors))] == truth
    return hits / (4 * count)


def test_small_text_is_readable_only_with_splitting() -> None:
    # 48 px image, 16 px tiles: the 3x3 grid keeps every pixel, the overview shrinks 3x
    assert _ideal_reader_accuracy(split=True) == 1.0
    assert _ideal_reader_accuracy(split=False) < 0.6


def test_shapes_and_examples_are_consistent() -> None:
    assert shape_mask("square", 5).all()
    circle = shape_mask("circle", 6)
    assert not circle[0, 0] and circle[3, 3] and circle.sum() < 36
    tri = shape_mask("triangle", 6)
    assert tri[-1].all() and tri[0].sum() <= 2
    image, shapes = shape_scene(np.random.default_rng(1), 32, 4, (5, 7))
    assert len(shapes) == 4 and {s.kind for s in shapes} <= set(SHAPES)
    for s in shapes:  # every shape is inked inside its box and nowhere else overlaps
        x1, y1, x2, y2 = s.box
        assert image[y1:y2, x1:x2].sum() > 0
    cells = {(s.box[0] // 8, s.box[1] // 8) for s in shapes}
    assert len(cells) == 4  # one shape per layout cell, each box inside its cell
    assert all(s.box[2] - 1 < (s.box[0] // 8 + 1) * 8 - 1 for s in shapes)
    covered = np.zeros_like(image, bool)
    for s in shapes:
        covered[s.box[1] : s.box[3], s.box[0] : s.box[2]] = True
    assert image[~covered].sum() == 0
    ground = make_examples("ground", 20, 0)
    for ex in ground:
        box = parse_box(ex.answer, (32, 32), bins=16)
        assert box is not None  # within half a bin (32 / 15 px) of the true box
        assert np.abs(box - np.asarray(ex.target["box"], float)).max() <= 32 / 15 / 2 + 1e-9
        assert ex.prompt.startswith("find ") and ex.prompt[5:] in SHAPES
    refer = make_examples("refer", 5, 0)
    assert all(r.prompt.startswith("<box>") and r.answer in SHAPES for r in refer)
    a, b = make_examples("ocr", 3, 7), make_examples("ocr", 3, 7)
    assert [e.answer for e in a] == [e.answer for e in b]
    np.testing.assert_array_equal(a[0].image, b[0].image)
    with pytest.raises(InputError, match="unknown data category"):
        make_examples("video", 1, 0)


def test_vocab_sequences_mask_only_the_answer() -> None:
    tokens, mask = vocab.batch_sequences(["read", "count"], ["AB", ""])
    assert tokens.shape == (2, 9)
    # "read": BOS r e a d SEP A B EOS -> positions 5, 6, 7 predict A, B, EOS
    assert mask[0].nonzero()[0].tolist() == [5, 6, 7]
    assert tokens[0, 5] == vocab.SEP and tokens[0, 8] == vocab.EOS
    # "count" with an empty answer: SEP (position 6) predicts EOS, then one PAD
    assert mask[1].nonzero()[0].tolist() == [6] and tokens[1, 8] == vocab.PAD
    assert vocab.decode(tokens[0, 6:]) == "AB"
    with pytest.raises(InputError, match="vocabulary"):
        vocab.encode("é")


def test_recipe_validation_ablation_and_mixture_sampling() -> None:
    assert Recipe.from_dict(DEFAULT_RECIPE.to_dict()) == DEFAULT_RECIPE
    no_ocr = DEFAULT_RECIPE.without("ocr")
    assert "ocr" not in no_ocr.categories() and len(no_ocr.stages) == len(DEFAULT_RECIPE.stages)
    only = Recipe.from_dict(
        {"stages": [{"name": "cpt", "steps": 5, "lr": 1e-3, "mixture": {"ocr": 1.0}}]}
    )
    with pytest.raises(InputError, match="leaves no stage"):
        only.without("ocr")
    two = Recipe.from_dict(
        {
            "stages": [
                {"name": "cpt", "steps": 5, "lr": 1e-3, "mixture": {"ocr": 1.0}},
                {"name": "sft", "steps": 5, "lr": 1e-3, "mixture": {"ocr": 1, "count": 3}},
            ]
        }
    )
    assert [s.name for s in two.without("ocr").stages] == ["sft"]
    stage = two.stages[1]
    assert stage.weights() == {"ocr": 0.25, "count": 0.75}
    drawn = batch_categories(stage, 8000, np.random.default_rng(0))
    assert len(drawn) == 8000 and abs(drawn.count("count") / 8000 - 0.75) < 0.02
    bad = [
        ({"name": "s", "steps": 0, "lr": 1e-3, "mixture": {"ocr": 1}}, "steps"),
        ({"name": "s", "steps": 1, "lr": 2.0, "mixture": {"ocr": 1}}, "lr"),
        ({"name": "s", "steps": 1, "lr": 1e-3, "mixture": {"video": 1}}, "unknown data category"),
        ({"name": "s", "steps": 1, "lr": 1e-3, "mixture": {"ocr": -1}}, "finite number >= 0"),
        ({"name": "s", "steps": 1, "lr": 1e-3, "mixture": {"ocr": 0}}, "positive total"),
        ({"name": "s", "steps": 1, "lr": 1e-3}, "missing"),
    ]
    for spec, message in bad:
        with pytest.raises(InputError, match=message):
            Recipe.from_dict({"stages": [spec]})
    with pytest.raises(InputError, match="unique"):
        Recipe((Stage("a", 1, 1e-3, (("ocr", 1.0),)),) * 2)
    assert set(CATEGORIES) == DEFAULT_RECIPE.categories()


def _tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    from edgekit.models.mm15.train import MM15Config

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    return MM15Config(dim=16, heads=2, dec_depth=1, batch=4, max_text=40)


def test_image_token_positions_share_one_frame_across_overview_and_tiles() -> None:
    from edgekit.models.mm15.model import sincos_2d, token_centres

    centres = token_centres((2, 2), 2)
    assert centres.shape == (5, 4, 2)
    torch.testing.assert_close(centres[0, 0], torch.tensor([0.25, 0.25]))  # overview
    torch.testing.assert_close(centres[2, 1], torch.tensor([0.875, 0.125]))  # top-right tile
    # each tile's tokens tile the image: all 16 centres distinct, mean at the image centre
    assert len({tuple(c.tolist()) for c in centres[1:].reshape(-1, 2)}) == 16
    torch.testing.assert_close(centres[1:].reshape(-1, 2).mean(0), torch.tensor([0.5, 0.5]))
    code = sincos_2d(torch.tensor([[0.3, 0.7]]), 8)
    f0, f1 = math.pi, math.pi * 32.0
    expected = [math.sin(0.3 * f0), math.sin(0.3 * f1), math.cos(0.3 * f0), math.cos(0.3 * f1)]
    expected += [math.sin(0.7 * f0), math.sin(0.7 * f1), math.cos(0.7 * f0), math.cos(0.7 * f1)]
    torch.testing.assert_close(code[0], torch.tensor(expected))


def test_decoder_is_causal_and_image_tokens_come_from_every_tile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _tiny(tmp_path, monkeypatch)
    assert config.tiles() == 5 and config.build().image_len == 5 * 2 * 2
    torch.manual_seed(0)
    net = config.build().eval()
    examples = make_examples("ocr", 2, 0)
    tiles = torch.from_numpy(config.encode([e.image for e in examples]))
    assert tiles.shape == (2, 5, 1, 16, 16)
    tokens = torch.from_numpy(vocab.batch_sequences(["read"] * 2, ["AB12", "CD34"])[0])
    with torch.no_grad():
        logits = net(tiles, tokens)
        changed = tokens.clone()
        changed[:, 8] = vocab.encode("Z")[0]
        later = net(tiles, changed)
        other = tiles.clone()
        other[:, 3] = 1.0 - other[:, 3]  # change one sub-image only
        seen = net(other, tokens)
    assert logits.shape == (2, tokens.shape[1], vocab.VOCAB_SIZE)
    torch.testing.assert_close(logits[:, :8], later[:, :8])  # the future does not leak back
    assert not torch.allclose(logits[:, 8:], later[:, 8:])
    assert not torch.allclose(seen, logits)


def test_staged_training_is_cached_per_stage_and_loss_falls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.models.mm15.train import train_recipe

    config = _tiny(tmp_path, monkeypatch)
    recipe = Recipe.from_dict(
        {
            "stages": [
                {"name": "pretrain", "steps": 25, "lr": 5e-3, "mixture": {"count": 1.0}},
                {"name": "sft", "steps": 3, "lr": 1e-3, "mixture": {"count": 1, "ocr": 1}},
            ]
        }
    )
    first = train_recipe(config, recipe)
    assert first.stage_cached == {"pretrain": False, "sft": False}
    # at init every token costs about log(V); 25 steps must have learned the answer format
    assert first.stage_loss["pretrain"] < 0.8 * np.log(vocab.VOCAB_SIZE)
    again = train_recipe(config, recipe)
    assert again.stage_cached == {"pretrain": True, "sft": True}
    for a, b in zip(first.model.parameters(), again.model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # a different SFT mixture reuses the cached pre-training and trains only its own stage
    other = Recipe.from_dict(
        recipe.to_dict()
        | {
            "stages": [
                recipe.to_dict()["stages"][0],
                {"name": "sft", "steps": 3, "lr": 1e-3, "mixture": {"count": 1}},
            ]
        }
    )
    third = train_recipe(config, other)
    assert third.stage_cached == {"pretrain": True, "sft": False}
    assert third.paths[0] == first.paths[0] and third.paths[1] != first.paths[1]


def test_onnx_greedy_decoding_matches_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    from edgekit.exporters.onnx import export_onnx
    from edgekit.models.mm15.evaluate import greedy_decode, score
    from edgekit.models.mm15.graphs import mm15_graphs
    from edgekit.runtimes import RuntimeOptions, get_runtime
    from edgekit.runtimes.torch import eager_runners

    config = _tiny(tmp_path, monkeypatch)
    torch.manual_seed(1)
    net = config.build().eval()
    with torch.no_grad():
        for p in net.parameters():  # spread the logits so greedy answers are not all one token
            p.mul_(3.0)
    examples = make_examples("refer", 3, 0) + make_examples("count", 2, 0)
    tiles = config.encode([e.image for e in examples])
    graphs = mm15_graphs(net, tiles[:2], "read")
    runtime = get_runtime("onnxruntime")
    onnx = {
        g.name: runtime.load(
            export_onnx(g, tmp_path / f"{g.name}.onnx", opset=17), "cpu", RuntimeOptions(threads=1)
        )
        for g in graphs
    }
    prompts = [e.prompt for e in examples]
    ref, ref_first = greedy_decode(eager_runners(graphs), tiles, prompts, 6)
    got, got_first = greedy_decode(onnx, tiles, prompts, 6)
    assert ref == got and len(set(ref)) > 1
    np.testing.assert_allclose(got_first, ref_first, atol=1e-4)
    from edgekit.models.mm15.evaluate import char_accuracy

    assert char_accuracy(["123", "45"], ["124", "4"]) == pytest.approx(3 / 5)
    # scoring: exact match, and IoU >= 0.5 for parsed boxes
    ground = make_examples("ground", 2, 0)
    assert score(ground, [ground[0].answer, "<box>0,0,1,1</box>"], 32, 16).tolist() == [1, 0]
    assert score(examples[:1], [examples[0].answer], 32, 16).tolist() == [1]


def test_constant_answer_chance_is_the_best_blind_guess() -> None:
    from edgekit.models.mm15.experiment import (
        chance_levels,
        constant_answer_chance,
        constant_char_chance,
    )

    count = make_examples("count", 40, 1)
    answers = [e.answer for e in count]
    assert constant_answer_chance(count, 32, 16) == max(map(answers.count, answers)) / 40
    assert constant_char_chance(["123", "143", "923"]) == pytest.approx(7 / 9)
    test = {c: make_examples(c, 30, 2) for c in CATEGORIES}
    chance = chance_levels(test, 32, 16)
    # one constant box grounds at least the shape it was taken from, far from every shape
    assert 1 / 30 <= chance["ground"] < 0.5 and chance["ground_ceiling"] > 0.9
    assert 0 < chance["ocr"] <= chance["ocr_char"] < 0.5


def test_study_summarises_seeds_against_the_full_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from edgekit.models.mm15 import experiment

    config = replace(_tiny(tmp_path, monkeypatch), max_text=48)  # room for a whole caption
    recipe = Recipe.from_dict(
        {
            "stages": [
                {"name": "pretrain", "steps": 2, "lr": 1e-3, "mixture": {"caption": 1.0}},
                {"name": "sft", "steps": 2, "lr": 1e-3, "mixture": {"count": 1, "refer": 1}},
            ]
        }
    )
    names = ("no splitting (overview only)", "without count")
    report = experiment.run_study(
        config, recipe, show_progress=False, seeds=2, variants=names, test_examples=4
    )
    assert report["seeds"] == [0, 1]
    rows = report["rows"]
    assert list(rows) == ["full recipe", *names] and rows["full recipe"]["diff"] is None
    for name in names:
        for c in experiment.COLUMNS:
            values, full = rows[name]["seed_metrics"][c], rows["full recipe"]["seed_metrics"][c]
            assert len(values) == 2 and rows[name]["metrics"][c] == pytest.approx(np.mean(values))
            assert rows[name]["diff"][c]["diff"] == pytest.approx(np.mean(values) - np.mean(full))
    # each seed trains its own stages: 2 full-recipe stages, 2 overview-only, 1 SFT without count
    assert len(list((tmp_path / "cache" / "mm15").glob("*.pt"))) == 2 * (2 + 2 + 1)
    assert len(report["chance"]["per_seed"]) == 2 and 0 < report["chance"]["count"] <= 1
    experiment.print_table(report)
    printed = capsys.readouterr().out
    assert "2 seeds (0..1)" in printed and "constant answer (chance)" in printed
    with pytest.raises(InputError, match="variants"):
        experiment.run_study(config, recipe, show_progress=False, variants=("without vision",))


def test_study_options_of_the_card() -> None:
    """``--option seeds=3 --option variants=headline`` reach run_study; bad values are one
    clear error; neither is taken for a recipe field."""
    from edgekit.errors import InputError
    from edgekit.models.mm15.card import MM15Card
    from edgekit.models.mm15.experiment import HEADLINE, SEEDS, study_arguments

    card = MM15Card(seeds="3", variants="headline")
    assert study_arguments(card.options) == {"seeds": 3, "variants": HEADLINE}
    assert study_arguments(MM15Card().options) == {"seeds": SEEDS, "variants": None}
    for bad in ({"seeds": "0"}, {"seeds": "two"}, {"variants": "some"}):
        with pytest.raises(InputError, match="mm15: option"):
            study_arguments(bad)
