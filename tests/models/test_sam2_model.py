"""edgekit's SAM 2.1 model: official sizes, the graph contract, RoPE in real arithmetic,
checkpoint loading (strict, with named errors)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from edgekit.errors import InputError  # noqa: E402
from edgekit.models.sam2 import (  # noqa: E402
    HieraConfig,
    SAM2Config,
    SAM2Model,
    load_checkpoint,
    parameter_count,
    sam2_config,
    torch_graph_set,
)
from edgekit.models.sam2.graphs import example_inputs  # noqa: E402
from edgekit.models.sam2.hiera import window_partition, window_unpartition  # noqa: E402
from edgekit.models.sam2.memory_attention import apply_rope, rope_angles  # noqa: E402
from edgekit.segmentation import graphs as G  # noqa: E402


def micro_config(image_size: int = 128) -> SAM2Config:
    hiera = HieraConfig(
        embed_dim=16,
        num_heads=1,
        stages=(1, 1, 2, 1),
        global_att_blocks=(3,),
        window_pos_embed_bkg_spatial_size=(7, 7),
    )
    return SAM2Config(
        "micro",
        hiera,
        image_size=image_size,
        d_model=64,
        mem_dim=16,
        memory_attention_layers=2,
        memory_attention_ffn=128,
        decoder_mlp_dim=128,
    )


@pytest.mark.parametrize(
    ("size", "millions"),
    [("tiny", 38.96), ("small", 46.06), ("base_plus", 80.85), ("large", 224.45)],
)
def test_official_sizes_have_the_published_parameter_counts(size, millions):
    with torch.device("meta"):  # shapes only, no memory
        model = SAM2Model(sam2_config(size))
    assert round(parameter_count(model) / 1e6, 2) == millions


def test_bad_sizes_are_refused():
    with pytest.raises(InputError, match="unknown SAM 2.1 size 'huge'"):
        sam2_config("huge")
    with pytest.raises(InputError, match="multiple of 32"):
        sam2_config("tiny", image_size=1000)


def test_graphs_follow_the_contract():
    torch.manual_seed(0)
    model = SAM2Model(micro_config()).eval()
    graphs = torch_graph_set(model)
    dims = {"S": 128, "C": 64, "Cm": 16, "h": 8, "w": 8, "hm": 8, "wm": 8}
    examples = example_inputs(model, num_frames=3, num_ptrs=4, num_points=5)
    for name in G.GRAPH_NAMES:
        feeds = {k: v.numpy() for k, v in examples[name].items()}
        assert list(feeds) == G.input_names(name)
        for spec in G.GRAPH_INPUTS[name]:
            assert feeds[spec.name].dtype == np.dtype(spec.dtype), (name, spec.name)
        G.check_outputs(name, graphs[name](feeds), dims)
    with pytest.raises(InputError, match="did not return 'pix_feat'"):
        G.check_outputs(G.MEMORY_ATTENTION, {})


def test_decoder_pointer_is_the_no_object_pointer_when_absent():
    torch.manual_seed(0)
    model = SAM2Model(micro_config()).eval()
    feeds = {k: v.numpy() for k, v in example_inputs(model)[G.MASK_DECODER].items()}
    head = model.sam_mask_decoder.pred_obj_score_head.layers[-1]
    with torch.no_grad():
        head.bias.fill_(-100.0)
    out = torch_graph_set(model)[G.MASK_DECODER](feeds)
    assert out["object_score_logits"][0, 0] < 0
    want = model.no_obj_ptr.detach().numpy()[0]
    np.testing.assert_allclose(out["obj_ptrs"][0], np.stack([want] * 4), atol=1e-6)


def test_rope_in_real_arithmetic_equals_complex_rotation():
    h = w = 6
    dim = 32
    x = torch.randn(2, 1, h * w, dim)
    angles = rope_angles(dim, h, w)
    got = apply_rope(x, angles.cos(), angles.sin())
    # reference: consecutive channel pairs as complex numbers times e^(i angle)
    z = torch.view_as_complex(x.reshape(2, 1, h * w, dim // 2, 2))
    want = torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # the first half of the pairs turns with the column, the second half with the row
    col_step = angles[1] - angles[0]
    assert torch.all(col_step[dim // 4 :] == 0) and torch.all(col_step[: dim // 4] > 0)


def test_window_partition_round_trip_with_padding():
    x = torch.randn(2, 10, 13, 4)
    windows, padded = window_partition(x, 4)
    assert windows.shape == (2 * 3 * 4, 4, 4, 4) and padded == (12, 16)
    torch.testing.assert_close(window_unpartition(windows, 4, padded, (10, 13)), x)


def test_checkpoint_round_trip_and_named_errors(tmp_path):
    torch.manual_seed(0)
    source = SAM2Model(micro_config()).eval()
    state = source.state_dict()
    good = tmp_path / "sam2.1_micro.pt"
    torch.save({"model": state}, good)
    target = SAM2Model(micro_config()).eval()
    load_checkpoint(target, good)
    feeds = {k: v.numpy() for k, v in example_inputs(source)[G.IMAGE_ENCODER].items()}
    a = torch_graph_set(source)[G.IMAGE_ENCODER](feeds)
    b = torch_graph_set(target)[G.IMAGE_ENCODER](feeds)
    np.testing.assert_array_equal(a["image_embed"], b["image_embed"])

    broken = dict(state)
    del broken["memory_attention.layers.0.linear1.weight"]
    broken["image_encoder.trunk.extra.weight"] = torch.zeros(1)
    broken["no_obj_ptr"] = torch.zeros(1, 3)
    bad = tmp_path / "broken.pt"
    torch.save({"model": broken}, bad)
    with pytest.raises(InputError) as err:
        load_checkpoint(target, bad)
    message = str(err.value)
    assert "1 missing keys: memory_attention.layers.0.linear1.weight" in message
    assert "1 unexpected keys: image_encoder.trunk.extra.weight" in message
    assert "no_obj_ptr (1, 3) (expected (1, 64))" in message

    with pytest.raises(InputError, match="not found"):
        load_checkpoint(target, tmp_path / "absent.pt")
    junk = tmp_path / "junk.pt"
    torch.save({"model": [1, 2, 3]}, junk)
    with pytest.raises(InputError, match="not a SAM 2 checkpoint"):
        load_checkpoint(target, junk)
    text = tmp_path / "text.pt"
    text.write_text("not a checkpoint")
    with pytest.raises(InputError, match="cannot read"):
        load_checkpoint(target, text)
