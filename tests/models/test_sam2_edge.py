"""sam2-edge: graph I/O against the SAM 2 contract, shapes, streaming, and training steps.

Everything runs on a small configuration (128x128 input) with random or briefly trained
weights so the whole file stays fast on 2 CPU cores.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.sam2_edge import clips as C
from edgekit.models.sam2_edge import rollout
from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.graphs import (
    contract_dims,
    example_inputs,
    graph_modules,
    torch_graph_set,
)
from edgekit.models.sam2_edge.model import EdgeSAM2, parameter_count
from edgekit.models.sam2_edge.train import (
    TrainConfig,
    clip_case,
    load_cached,
    load_init,
    recolour,
    train_cached,
    train_model,
    training_batch,
)
from edgekit.segmentation import graphs as contract
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig

SMALL = EdgeConfig(image_size=128)


pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


@pytest.fixture(scope="module")
def model() -> EdgeSAM2:
    torch.manual_seed(0)
    return EdgeSAM2(SMALL).eval()


def test_default_model_is_compact() -> None:
    count = parameter_count(EdgeSAM2())
    assert 200_000 < count < 3_000_000


def test_every_graph_matches_the_contract(model: EdgeSAM2) -> None:
    dims = contract_dims(model)
    assert dims == {"S": 128, "C": 64, "Cm": 64, "h": 8, "w": 8, "hm": 8, "wm": 4}
    graphs = torch_graph_set(model)
    assert set(graphs) == set(contract.GRAPH_NAMES)
    for name, inputs in example_inputs(model, num_frames=3, num_ptrs=5, num_points=4).items():
        assert list(inputs) == contract.input_names(name)
        for spec in contract.GRAPH_INPUTS[name]:
            assert str(inputs[spec.name].numpy().dtype) == spec.dtype
            assert tuple(inputs[spec.name].shape) == spec.resolve({**dims, "F": 3, "P": 5, "N": 4})
        out = graphs[name]({k: v.numpy() for k, v in inputs.items()})
        contract.check_outputs(name, out, dims)


def test_every_graph_runs_wherever_its_module_is() -> None:
    """No forward makes a tensor on the CPU (a GPU run then mixes devices): every graph of a
    model moved to the data-free "meta" device runs on "meta" inputs."""
    torch.manual_seed(0)
    moved = EdgeSAM2(SMALL).eval().to("meta")
    inputs = example_inputs(moved, num_frames=3, num_ptrs=5, num_points=4)
    for name, module in graph_modules(moved).items():
        with torch.no_grad():
            out = module(*(v.to("meta") for v in inputs[name].values()))
        outs = (out,) if isinstance(out, torch.Tensor) else out
        assert all(t.device.type == "meta" for t in outs), name


def test_memory_pos_does_not_depend_on_inputs(model: EdgeSAM2) -> None:
    module = graph_modules(model)[contract.MEMORY_ENCODER]
    inputs = example_inputs(model)[contract.MEMORY_ENCODER]
    with torch.inference_mode():
        _, pos_a = module(*inputs.values())
        other = {k: torch.randn_like(v) for k, v in inputs.items()}
        feats_b, pos_b = module(*other.values())
    assert torch.equal(pos_a, pos_b)
    assert feats_b.shape == (1, 64, *SMALL.memory_grid)


def test_no_object_score_mixes_in_the_no_object_pointer(model: EdgeSAM2) -> None:
    inputs = example_inputs(model)[contract.MASK_DECODER]
    with torch.inference_mode():
        _, _, ptrs, score = model.decode(*inputs.values())
    expected = model.no_obj_ptr.expand_as(ptrs)
    assert torch.equal(ptrs, expected) == bool(score.item() <= 0)


def test_memory_attention_accepts_any_memory_length(model: EdgeSAM2) -> None:
    graph = graph_modules(model)[contract.MEMORY_ATTENTION]
    for frames, ptrs in ((1, 1), (7, 16)):
        inputs = example_inputs(model, num_frames=frames, num_ptrs=ptrs)[contract.MEMORY_ATTENTION]
        with torch.inference_mode():
            out = graph(*inputs.values())
        assert out.shape == (1, 64, 8, 8)
    # the bank is a set: reordering its entries (each with its own temporal position) changes
    # nothing, while other memory features change the conditioned features (by 1.2 here)
    frames, ptrs = torch.randperm(7), torch.randperm(16)
    moved = dict(inputs)
    for key in ("mem_feats", "mem_pos", "mem_tpos_idx"):
        moved[key] = inputs[key][frames]
    for key in ("obj_ptrs", "obj_ptr_tpos"):
        moved[key] = inputs[key][ptrs]
    other = {**inputs, "mem_feats": torch.randn_like(inputs["mem_feats"])}
    with torch.inference_mode():
        torch.testing.assert_close(graph(*moved.values()), out, atol=1e-5, rtol=1e-5)
        assert (graph(*other.values()) - out).abs().max() > 0.1


def test_a_grown_network_starts_as_the_trained_one(model: EdgeSAM2) -> None:
    """Memory layers added to trained weights start as no-ops: the grown network's memory
    attention computes what the trained one did, and only the new layers start fresh."""
    grown = EdgeSAM2(replace(SMALL, memory_layers=SMALL.memory_layers + 1)).eval()
    fresh = load_init(grown, model.state_dict())
    added = f"memory_attention.layers.{SMALL.memory_layers}."
    assert fresh and all(k.startswith(added) for k in fresh)
    inputs = example_inputs(model, num_frames=3, num_ptrs=2)[contract.MEMORY_ATTENTION]
    with torch.inference_mode():
        before = graph_modules(model)[contract.MEMORY_ATTENTION](*inputs.values())
        after = graph_modules(grown)[contract.MEMORY_ATTENTION](*inputs.values())
    assert torch.equal(before, after)
    smaller = EdgeSAM2(replace(SMALL, memory_layers=1))
    with pytest.raises(ValueError, match="memory_attention.layers.1"):
        load_init(smaller, model.state_dict())  # weights the architecture has no place for
    wider = EdgeSAM2(replace(SMALL, decoder_mlp=128))
    with pytest.raises(ValueError, match="mask_decoder"):
        load_init(wider, model.state_dict())  # a shape mismatch


def test_streaming_predictor_runs_the_graph_set(model: EdgeSAM2) -> None:
    clip = C.make_clip("heldout", 1, frames=4, size=128)
    stream = SAM2Stream(torch_graph_set(model), StreamConfig(image_size=128))
    result = stream.start(clip.frames[0], {1: Prompt(points=[[60, 60]], labels=[1])})
    for frame in clip.frames[1:]:
        result = stream.track(frame)
    assert result.masks[1].shape == (128, 128) and result.masks[1].dtype == bool
    assert stream.memory_stats()[1]["recent_frames"] == 3
    result = stream.add_prompt(1, Prompt(mask=clip.masks[-1, 0]))
    assert result.object_scores[1] > 0


def _tiny_config(steps: int) -> TrainConfig:
    return TrainConfig(
        steps=steps, clips_per_step=2, frames=3, max_items=3, lr=3e-3, threads=1, arch=SMALL
    )


def test_training_steps_reduce_the_loss_on_a_fixed_batch() -> None:
    torch.manual_seed(0)
    net = EdgeSAM2(SMALL)
    batch = rollout.make_batch([C.make_clip("train", i, frames=3, size=128) for i in range(2)], 3)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        loss, parts = rollout.rollout_loss(net, batch, np.random.default_rng(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        assert set(parts) == {"prompted", "tracked", "masks"}
    assert losses[-1] < 0.8 * losses[0]


def test_training_is_deterministic_and_cached(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    config = _tiny_config(2)
    first = train_cached(config, show_progress=False)
    assert not first.cached and first.path is not None and first.path.is_relative_to(tmp_path)
    again = train_model(config)
    for key, value in first.state_dict.items():
        assert torch.equal(value, again.state_dict[key]), key
    cached = load_cached(config)
    assert cached is not None and cached.cached
    assert torch.equal(cached.state_dict["no_mem_embed"], first.state_dict["no_mem_embed"])
    assert _tiny_config(3).key() != config.key()


def test_interrupted_training_resumes_to_the_same_weights(tmp_path, monkeypatch) -> None:
    """Training checkpoints every CHECKPOINT_EVERY steps; a run killed mid-way and started
    again continues from the checkpoint and ends with the uninterrupted run's weights and loss
    log; the checkpoint is removed once the weights are saved; a corrupt or foreign one is
    ignored."""
    from edgekit.models.sam2_edge import train as train_mod
    from edgekit.train_checkpoint import checkpoint_path

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    monkeypatch.setattr(train_mod, "CHECKPOINT_EVERY", 2)
    config = _tiny_config(5)
    whole = train_model(config)
    real_loss, calls = rollout.rollout_loss, []

    def dies_on_the_fourth_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(rollout, "rollout_loss", dies_on_the_fourth_step)
    with pytest.raises(KeyboardInterrupt):
        train_cached(config, show_progress=False)
    partial = checkpoint_path(train_mod.weights_path(config))
    assert partial.is_file() and load_cached(config) is None
    assert torch.load(partial, weights_only=True)["loop"]["step"] == 2
    monkeypatch.setattr(rollout, "rollout_loss", real_loss)
    resumed = train_cached(config, show_progress=False)
    assert not partial.exists() and not resumed.cached
    assert resumed.losses == whole.losses and len(resumed.losses) == 5
    for key, value in whole.state_dict.items():
        assert torch.equal(value, resumed.state_dict[key]), key
    partial.write_bytes(b"not a checkpoint")  # corrupt: ignored, training starts over
    again = train_model(config, checkpoint=partial)
    assert torch.equal(again.state_dict["no_mem_embed"], whole.state_dict["no_mem_embed"])
    other = _tiny_config(4)
    train_model(other, checkpoint=partial)  # leaves a checkpoint of another recipe (step 2)
    assert torch.load(partial, weights_only=True)["key"] == other.key()
    again = train_model(config, checkpoint=partial)
    assert again.losses == whole.losses


def test_card_golden_inputs_are_recorded_stream_feeds() -> None:
    from edgekit.models.sam2_edge.card import SAM2EdgeCard
    from edgekit.models.sam2_edge.stream_card import GOLDEN_FRAME

    card = SAM2EdgeCard()
    card._model = EdgeSAM2(card.train_config().arch).eval()  # random weights: no training
    golden = card.golden_inputs()
    assert set(golden) == set(contract.GRAPH_NAMES)
    for name, feeds in golden.items():
        assert list(feeds) == contract.input_names(name)
    memory = golden[contract.MEMORY_ATTENTION]
    assert memory["mem_feats"].shape == (GOLDEN_FRAME, 64, 17, 16)  # prompted + 4 recent
    assert memory["mem_tpos_idx"].tolist() == [6, 3, 2, 1, 0]
    assert [spec.name for spec in card.graphs()] == list(contract.GRAPH_NAMES)


def test_training_rollout_is_exactly_the_streaming_predictor() -> None:
    """Same prompts, same memory rules: the rollout's chosen logits equal the stream's."""
    net = EdgeSAM2(SMALL).eval()
    with torch.no_grad():  # make the object visible so the masks are not all "no object"
        net.mask_decoder.obj_head.layers[-1].bias += 10.0
    clip = C.make_clip("heldout", 5, frames=10, size=128)
    batch = rollout.make_batch([clip], 4)
    with torch.no_grad():
        _, parts = rollout.rollout_loss(net, batch, np.random.default_rng(0), mode="mask")
    config = StreamConfig(image_size=128, memory_dtype="float32")
    stream = SAM2Stream(torch_graph_set(net), config)
    prompts = {oid: Prompt(mask=clip.masks[0, k]) for k, oid in enumerate(clip.object_ids)}
    for t, frame in enumerate(clip.frames):
        result = stream.start(frame, prompts) if t == 0 else stream.track(frame)
        for k, (_, obj) in enumerate(batch.items):
            got = result.low_res_logits[clip.object_ids[obj]]
            np.testing.assert_allclose(got, parts["masks"][k, t].numpy(), atol=1e-4)


def test_tensorrt_profiles_cover_the_memory_bank(model: EdgeSAM2) -> None:
    from edgekit.models.sam2_edge.card import SAM2EdgeCard
    from edgekit.models.sam2_edge.graphs import graph_specs

    specs = graph_specs(model)
    extra = SAM2EdgeCard().export_extra(specs)
    maxima = extra["trt_max_shapes"]
    assert maxima["mem_feats"][0] == 7 and maxima["mem_tpos_idx"] == [7]
    assert maxima["obj_ptrs"][0] == 16 and maxima["point_labels"] == [1, 16]
    assert "image" not in maxima  # static inputs keep their one shape
    example = list(specs[1].example_inputs["mem_feats"].shape)
    assert maxima["mem_feats"][1:] == example[1:]  # only the memory axis grows


def test_packaged_weights_are_the_default_recipe() -> None:
    """The weights shipped in the package are named by the default recipe's cache key (recipe
    version + config), so a changed config or a bumped RECIPE_VERSION never loads them."""
    from edgekit.models.sam2_edge.card import (
        BLEND_RECIPE,
        DEFAULT_RECIPE,
        MIX_LONG_RECIPE,
        OCCLUDER_RECIPE,
        STAGE4_RECIPE,
        SYNTHETIC_RECIPE,
        WIDE_ARCH,
        WIDE_RECIPE,
        SAM2EdgeCard,
        packaged_weights,
        recipe_stages,
    )

    card = SAM2EdgeCard()
    recipe = card.train_config()
    assert recipe == DEFAULT_RECIPE and recipe.split == "train-fast" and recipe.wise == 1.0
    assert recipe.init == BLEND_RECIPE and BLEND_RECIPE.wise == 0.5
    assert BLEND_RECIPE.init == OCCLUDER_RECIPE and OCCLUDER_RECIPE.init == MIX_LONG_RECIPE
    stages = recipe_stages(recipe)  # ten: five synthetic, mix, mix-long, occluder, blend, fast
    assert len(stages) == 10 and stages[0] == TrainConfig() and stages[4] == SYNTHETIC_RECIPE
    # the default, the blend it continues, the occluder stage the blend starts from
    for stage in (recipe, recipe.init, OCCLUDER_RECIPE, SYNTHETIC_RECIPE):
        path = packaged_weights(stage)  # from ship (options of the last retrain from there)
        assert path.is_file(), f"no packaged weights at {path}"
    result = card.train()
    assert result.path == packaged_weights(recipe) and result.cached
    net = result.build()
    assert parameter_count(net) == parameter_count(EdgeSAM2(recipe.arch))
    assert SAM2EdgeCard(steps=10).train_config().init == BLEND_RECIPE  # options: last stage
    assert SAM2EdgeCard(recolour=1).train_config().recolour == 1
    synthetic = SAM2EdgeCard(recipe="synthetic")
    assert synthetic.train_config() == SYNTHETIC_RECIPE and synthetic.train().cached
    # recipes and their stages: option stage picks one, TrainConfig options override it
    assert SAM2EdgeCard(stage=1).train_config() == TrainConfig()
    assert SAM2EdgeCard(stage=4, steps=10).train_config() == replace(STAGE4_RECIPE, steps=10)
    wide = recipe_stages(SAM2EdgeCard(recipe="wide").train_config())
    assert wide[-1] == WIDE_RECIPE and len(wide) == 4 and wide[0] == TrainConfig(arch=WIDE_ARCH)
    assert all(stage.arch == WIDE_ARCH for stage in wide)
    assert SAM2EdgeCard(recipe="wide", stage=1).train_config() == wide[0]
    assert 1.4e6 < parameter_count(EdgeSAM2(WIDE_ARCH)) < 1.6e6  # 2.3x the default's
    for bad, named in (
        ({"recolour": 1.5}, "from 0 to 1"),
        ({"recolour": "abc"}, "must be a number"),
        ({"steps": 2.5}, "must be an integer"),
        ({"lr": None}, "lr=None must be a number"),
        ({"recipe": "huge"}, "unknown recipe 'huge'; expected one of default, synthetic, wide"),
        (
            {"stage": 0},
            "stage=0 picks a stage of recipe 'default', expected an integer from 1 to 10",
        ),
        ({"recipe": "wide", "stage": 5}, "expected an integer from 1 to 4"),
        ({"stage": "last"}, "stage='last' picks a stage"),
    ):
        with pytest.raises(InputError, match=named):
            SAM2EdgeCard(**bad).train_config()


def test_a_wise_stage_blends_its_trained_weights_with_its_start(tmp_path, monkeypatch) -> None:
    """``wise`` < 1: the same stage with wise=1 is trained (and cached) first, then every float
    tensor is (1 - wise) * start + wise * trained; the blend is cached under its own key."""
    from edgekit.models.sam2_edge.train import blend

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    first = _tiny_config(1)
    tuned_config = replace(first, init=first, clip_offset=100, lr=1e-3)
    half = replace(tuned_config, wise=0.25)
    assert half.key() != tuned_config.key() and tuned_config.key() == replace(first, init=first,
        clip_offset=100, lr=1e-3).key()  # fmt: skip
    result = train_cached(half, show_progress=False)
    start, tuned = load_cached(first), load_cached(tuned_config)
    assert start is not None and tuned is not None  # both trained and cached on the way
    for key, value in result.state_dict.items():
        if not value.is_floating_point():  # counters: the trained stage's
            assert torch.equal(value, tuned.state_dict[key]), key
            continue
        want = 0.75 * start.state_dict[key] + 0.25 * tuned.state_dict[key]
        assert torch.allclose(value, want, atol=1e-7), key
    again = train_cached(half, show_progress=False)
    assert again.cached and torch.equal(
        again.state_dict["no_mem_embed"], result.state_dict["no_mem_embed"]
    )
    with pytest.raises(ValueError, match="same keys and shapes"):
        blend({"a": torch.zeros(2)}, {"a": torch.zeros(3)}, 0.5)
    with pytest.raises(ValueError, match="wise must be in"):
        train_cached(replace(first, wise=0.5), show_progress=False)  # no init to blend with


def test_staged_training_starts_from_the_earlier_stage(tmp_path, monkeypatch) -> None:
    """A stage with ``init`` trains (and caches) that recipe first and starts from its weights;
    ``clip_offset`` moves it onto other clips and ``case_weights`` draws the motion cases."""
    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path))
    first = _tiny_config(1)
    second = replace(first, init=first, clip_offset=100, case_weights=(0, 0, 1, 1, 0), lr=1e-3)
    result = train_cached(second, show_progress=False)
    assert load_cached(first) is not None  # the first stage was trained and cached on the way
    from_scratch = train_model(replace(second, init=None))
    from_first = train_model(replace(second, init=None), init_weights=load_cached(first).state_dict)
    for key, value in result.state_dict.items():
        assert torch.equal(value, from_first.state_dict[key]), key
    assert not torch.equal(
        result.state_dict["no_mem_embed"], from_scratch.state_dict["no_mem_embed"]
    )
    cases = [clip_case(second, i) for i in range(200)]
    assert set(cases) == {"crossing", "occlusion"} and 60 < cases.count("crossing") < 140
    assert cases == [clip_case(second, i) for i in range(200)]  # seeded
    assert clip_case(first, 7) is None  # no weights: clips' own case cycle
    batch = training_batch(second, 0)
    assert batch is not None
    with pytest.raises(ValueError, match="one per case"):
        clip_case(replace(second, case_weights=(1.0, 2.0)), 0)


def test_recoloured_training_clips_keep_their_masks() -> None:
    """``recolour`` changes the pixels of a share of the clips, the same way on every frame
    and seeded, and never the masks or the items; 0 leaves the batch as it was."""
    plain = _tiny_config(1)
    every = replace(plain, recolour=1.0)
    base, changed = training_batch(plain, 0), training_batch(every, 0)
    assert torch.equal(base.truth, changed.truth) and base.items == changed.items
    assert not torch.equal(base.images, changed.images)
    assert torch.equal(changed.images, training_batch(every, 0).images)  # seeded
    assert torch.equal(base.images, training_batch(replace(plain, recolour=0.0), 0).images)
    frames = C.make_clip("train", 3, frames=3, size=64).frames
    out = recolour(frames, np.random.default_rng(0))
    assert out.shape == frames.shape and out.dtype == np.uint8
    flat = np.full_like(frames, 128)  # one colour everywhere stays one colour, on every frame
    assert len(np.unique(recolour(flat, np.random.default_rng(1)).reshape(-1, 3), axis=0)) == 1


def test_wide_split_changes_the_training_clips_and_is_checked() -> None:
    """``split="train-wide"`` trains on the wide split's clips; the card refuses a split that
    is not a training split (the held-out one above all)."""
    from edgekit.models.sam2_edge.card import SAM2EdgeCard

    plain = _tiny_config(1)
    wide = replace(plain, split="train-wide")
    assert not torch.equal(training_batch(plain, 0).images, training_batch(wide, 0).images)
    assert plain.key() != wide.key()
    assert SAM2EdgeCard(split="train-wide").train_config().split == "train-wide"
    for bad in ("heldout", "test"):
        with pytest.raises(InputError, match="option split="):
            SAM2EdgeCard(split=bad).train_config()


def test_mix_split_draws_its_share_of_clips_and_is_checked() -> None:
    """``mix_split``/``mix_share`` draw that share of the training clips from a second split
    (seeded per clip); unset, the key and the clips are the single split's; bad values are
    refused by the card."""
    from edgekit.models.sam2_edge.card import RECIPES, SAM2EdgeCard
    from edgekit.models.sam2_edge.train import clip_split

    plain = _tiny_config(1)
    mixed = replace(plain, split="train-cutout", mix_split="train", mix_share=0.5)
    picks = [clip_split(mixed, i) for i in range(400)]
    assert 0.4 < picks.count("train") / len(picks) < 0.6 and set(picks) == {"train", "train-cutout"}
    assert {clip_split(replace(mixed, mix_share=0.0), i) for i in range(50)} == {"train-cutout"}
    assert clip_split(plain, 3) == "train" and plain.key() != replace(plain, mix_share=0.5).key()
    assert RECIPES["mix"].mix_split == "train" and RECIPES["mix"].split == "train-cutout"
    for bad in ({"mix_split": "heldout"}, {"mix_share": 1.5}):
        with pytest.raises(InputError, match="option mix_"):
            SAM2EdgeCard(**bad).train_config()


def test_card_stream_options_turn_on_memory_selection_and_bundles_record_them() -> None:
    """sam2-edge streams with SAMURAI's predictor settings and refined output masks; option
    tracker=sam2 gives SAM 2's FIFO bank, other card options set single fields or turn
    refinement off; bundles record the choice."""
    from edgekit.models.sam2_edge.card import SAM2EdgeCard
    from edgekit.models.sam2_edge.evaluation import evaluate_graphs, stream_config
    from edgekit.models.sam2_edge.stream_card import TRACKERS, StreamingSAM2Card

    assert StreamingSAM2Card.stream_options == {} and StreamingSAM2Card.tracker == "sam2"
    assert SAM2EdgeCard.stream_options == {"refine_radius": 12, "refine_eps": 1e-4}
    card = SAM2EdgeCard()
    refined = stream_config(card.image_size, refine_radius=12, refine_eps=1e-4)
    assert card.stream_config() == stream_config(
        card.image_size, refine_radius=12, refine_eps=1e-4, **TRACKERS["samurai"]
    )
    assert SAM2EdgeCard(tracker="sam2").stream_config() == refined
    assert card.preprocessing()["stream_config"]["memory_min_iou"] == 0.5
    assert card.preprocessing()["stream_config"]["motion_weight"] == 0.25
    assert card.preprocessing()["stream_config"]["refine_radius"] == 12
    assert SAM2EdgeCard(refine_radius=0).stream_config().refine_radius == 0  # off
    chosen = SAM2EdgeCard(tracker="sam2", memory_min_score=0.0)
    config = chosen.stream_config()
    assert (config.memory_min_score, config.memory_min_iou) == (0.0, None)
    assert config.image_size == card.image_size and config.num_maskmem == 7
    assert chosen.preprocessing()["stream_config"]["memory_min_score"] == 0.0
    with pytest.raises(InputError, match="unknown tracker 'kalman'; expected one of sam2, samurai"):
        SAM2EdgeCard(tracker="kalman").stream_config()
    with pytest.raises(InputError, match="tracker 'samurai' sets .* --option tracker=sam2"):
        SAM2EdgeCard(memory_stride=3).stream_config()  # stride and memory selection exclude
    assert SAM2EdgeCard(tracker="sam2", memory_stride=3).stream_config().memory_stride == 3
    # the evaluation streams with the config it is given (a full-memory check would differ)
    net = EdgeSAM2(SMALL).eval()
    clip = C.make_clip("heldout", 0, frames=4, size=128)
    strict = StreamConfig(image_size=128, memory_min_iou=0.999, multimask_tracking=False)
    calls: list[int] = []
    graphs = torch_graph_set(net)
    attention = graphs[contract.MEMORY_ATTENTION]

    def counting(feeds):
        calls.append(int(feeds["mem_feats"].shape[0]))
        return attention(feeds)

    graphs[contract.MEMORY_ATTENTION] = counting
    evaluate_graphs(graphs, [clip], 128, strict)
    assert calls and max(calls) == 1  # only the conditioning frame: nothing passed IoU 0.999
