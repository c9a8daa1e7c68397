"""Paired comparisons of SAM 2 settings (``edgekit eval NAME --against KEY=VALUE``): both sides
track the same objects; the table's A column is the card's own evaluation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from edgekit.build.verify import reference_runners
from edgekit.errors import InputError
from edgekit.models.sam2_edge import clips as C
from edgekit.models.sam2_edge import evaluation
from edgekit.models.sam2_edge.card import SAM2EdgeCard

SMALL = {"eval_clips": 2, "eval_frames": 6}


@pytest.fixture(scope="module")
def card() -> SAM2EdgeCard:
    return SAM2EdgeCard(**SMALL)


@pytest.fixture(scope="module")
def runners(card):
    return reference_runners(card)


def test_a_setting_against_itself_is_all_ties_and_a_is_the_cards_evaluation(card, runners) -> None:
    same = card.compare(runners, card.against({"memory_stride": 1}), runners)
    clips = card.heldout()
    assert set(same) == {"J&F"} | {f"J&F_{clip.case}" for clip in clips}
    row = same["J&F"]
    assert row["delta"] == 0.0 and row["delta_se"] == 0.0
    assert row["tied"] == row["objects"] == sum(len(c.object_ids) for c in clips)
    metrics = card.evaluate(runners)
    assert row["A"] == pytest.approx(metrics["J&F"]) == pytest.approx(row["B"])


def test_another_setting_moves_objects_and_the_table_says_which_way(card, runners) -> None:
    other = card.against({"tracker": "sam2", "memory_stride": 3, "refine_radius": 0})
    assert other.stream_config().memory_stride == 3 and card.stream_config().memory_stride == 1
    assert other.stream_config().motion_weight is None and card.stream_config().motion_weight
    rows = card.compare(runners, other, reference_runners(other))
    row = rows["J&F"]
    assert row["better"] + row["worse"] + row["tied"] == row["objects"]
    assert row["tied"] < row["objects"] and row["delta"] != 0.0  # the change moves an object
    assert row["delta"] == pytest.approx(row["B"] - row["A"])
    text = evaluation.format_paired(rows, "title")
    assert text.splitlines()[0] == "title" and "better/worse/tied" in text
    assert f"{row['delta']:+.2f} +- {row['delta_se']:.2f}" in text
    one = {"J&F_exit": {**row, "objects": 1.0, "delta_se": float("nan")}}
    assert "+- n/a" in evaluation.format_paired(one, "one object")


def test_the_calibration_set_and_bad_eval_options() -> None:
    calibration = SAM2EdgeCard(eval_set="calibration", **SMALL).heldout()
    expected = evaluation.calibration_clips(2, 6)
    assert [c.index for c in calibration] == [c.index for c in expected]
    assert calibration[0].split == "train" and SAM2EdgeCard(**SMALL).heldout()[0].split == "heldout"
    with pytest.raises(InputError, match="unknown eval_set 'test'.*heldout, calibration"):
        SAM2EdgeCard(eval_set="test").heldout()
    for bad in ({"eval_clips": "abc"}, {"eval_clips": 0}, {"eval_frames": 2.5}):
        with pytest.raises(InputError, match="eval_clips must be an integer >= 1"):
            SAM2EdgeCard(**bad).heldout()
    with pytest.raises(InputError, match="cannot change eval_clips.*same clips"):
        SAM2EdgeCard().against({"eval_clips": 3})
    with pytest.raises(InputError, match="at least one KEY=VALUE"):
        SAM2EdgeCard().against({})


def test_bundles_compare_stream_options_only_and_other_cards_refuse(card, runners) -> None:
    from edgekit.cli.stream import paired_table
    from edgekit.registry import get_card

    with pytest.raises(InputError, match="only stream options.*steps would need other graphs"):
        paired_table(card, runners, "onnx-fp32", {"steps": 10}, from_bundle=True)
    with pytest.raises(InputError, match="'photo-cnn' is not one"):
        paired_table(get_card("photo-cnn"), {}, "torch", {"x": 1}, from_bundle=False)


def test_the_cli_prints_the_paired_table() -> None:
    exe = shutil.which("edgekit", path=os.path.dirname(sys.executable)) or "edgekit"
    args = ["eval", "sam2-edge", "--option", "eval_clips=1", "--option", "eval_frames=5"]
    out = subprocess.run(
        [exe, *args, "--against", "tracker=sam2", "--against", "memory_stride=2"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "sam2-edge [torch], paired on 1 held-out clips" in out.stdout
    assert "B = A with tracker=sam2, memory_stride=2" in out.stdout
    assert any(line.startswith("J&F ") for line in out.stdout.splitlines())
    assert C.clip_set("heldout", 1, frames=5)[0].case in out.stdout
    bad = subprocess.run(
        [exe, *args, "--against", "eval_frames=9"], capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 2 and "cannot change eval_frames" in bad.stderr
    lens = subprocess.run(
        [exe, "eval", "lens", "--against", "memory_stride=2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert lens.returncode == 2 and "does not combine with --ray or `eval lens`" in lens.stderr
