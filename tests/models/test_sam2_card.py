"""The official SAM 2.1 card: checkpoint loading and its errors, options, the CLI's --option.

The bundle path (export, verify with rollout parity, self-test) runs in test_model_exports_sam2.py
with seeded random weights at 128x128.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.sam2.card import SAM21Card
from edgekit.models.sam2.config import sam2_config
from edgekit.models.sam2.model import SAM2Model
from edgekit.segmentation import graphs as contract

torch.set_num_threads(1)

SMALL = {"image_size": 128, "eval_clips": 1, "eval_frames": 4}


def _checkpoint(path: Path, drop: str | None = None, extra: str | None = None) -> Path:
    """A checkpoint in Meta's layout ({"model": state_dict}) of seeded random tiny weights."""
    torch.manual_seed(3)
    state = SAM2Model(sam2_config("tiny", 128)).state_dict()
    if drop:
        state.pop(drop)
    if extra:
        state[extra] = torch.zeros(2)
    torch.save({"model": state}, path)
    return path


def test_a_checkpoint_is_required_and_nothing_is_downloaded(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="checkpoint=PATH"):
        SAM21Card()
    with pytest.raises(InputError, match="does not exist"):
        SAM21Card(checkpoint=str(tmp_path / "sam2.1_hiera_tiny.pt"))
    with pytest.raises(InputError, match="size must be one of"):
        SAM21Card(size="huge", random_weights=True)
    with pytest.raises(InputError, match="multiple of 32"):
        SAM21Card(random_weights=True, image_size=100)
    with pytest.raises(InputError, match="unknown"):
        SAM21Card(random_weights=True, colour="red")


def test_the_checkpoint_loads_exactly_and_bad_keys_are_named(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "ok.pt")
    card = SAM21Card(checkpoint=str(path), **SMALL)
    saved = torch.load(path, weights_only=True)["model"]
    got = card.model().state_dict()
    assert set(got) == set(saved)
    for key in ("image_encoder.trunk.patch_embed.proj.weight", "maskmem_tpos_enc"):
        torch.testing.assert_close(got[key], saved[key], rtol=0, atol=0)
    assert card.train().path == path.resolve()  # the manifest names these weights
    assert card.options["checkpoint"] == str(path.resolve())  # verify can rebuild the card

    key = "sam_mask_decoder.iou_prediction_head.layers.0.weight"
    broken = SAM21Card(checkpoint=str(_checkpoint(tmp_path / "missing.pt", drop=key)), **SMALL)
    with pytest.raises(Exception, match="iou_prediction_head"):
        broken.model()
    extra = SAM21Card(checkpoint=str(_checkpoint(tmp_path / "extra.pt", extra="bogus.w")), **SMALL)
    with pytest.raises(Exception, match="bogus.w"):
        extra.model()


def test_random_weights_are_seeded_and_carry_masks_through_the_stream() -> None:
    a = SAM21Card(random_weights=True, seed=1, **SMALL)
    b = SAM21Card(random_weights=True, seed=1, **SMALL)
    c = SAM21Card(random_weights=True, seed=2, **SMALL)
    key = "memory_attention.layers.0.linear1.weight"
    wa, wb, wc = (card.model().state_dict()[key] for card in (a, b, c))
    torch.testing.assert_close(wa, wb, rtol=0, atol=0)
    assert not torch.equal(wa, wc)
    golden = a.golden_inputs()
    assert set(golden) == set(contract.GRAPH_NAMES)
    memory = golden[contract.MEMORY_ATTENTION]
    assert memory["mem_feats"].shape == (5, 64, 8, 8)  # 128 / 16 = 8; 5 memory frames
    assert np.abs(memory["mem_feats"]).max() > 0
    assert a.preprocessing()["weights"] == "random (seed 1)"
    assert a.preprocessing()["stream_config"]["image_size"] == 128
    extra = a.export_extra(a.graphs())
    assert extra["trt_max_shapes"]["mem_feats"][0] == 7


def test_cli_options_are_parsed_as_json_or_text() -> None:
    from edgekit.cli.options import parse_options

    got = parse_options(["image_size=512", "random_weights=true", "checkpoint=/w/t.pt"])
    assert got == {"image_size": 512, "random_weights": True, "checkpoint": "/w/t.pt"}
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_options(["image_size"])
