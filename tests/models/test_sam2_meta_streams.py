"""More of Meta's video predictor against edgekit's stream (random weights, real-size frames):
memory stride, bounded conditioning frames, and an object that leaves the frame and comes back.

The models, the clip and the per-frame bars are tests/models/sam2_meta_helpers.py's (see its
docstring); without Meta's ``sam2`` this module is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from sam2_meta_helpers import (  # noqa: E402 - skips this module without Meta's sam2
    CORRECTIONS,
    H,
    W,
    assert_parity,
    build_pair,
    cat_patch,
    frame_parity,
    memo_graphs,
    meta_predict,
    passes,
    paste,
    photo_clip,
    run_stream,
    save_clip,
    stream_prompts,
)

from edgekit.segmentation import graphs as G  # noqa: E402
from edgekit.segmentation import stream as stream_module  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread_module")


@pytest.fixture(scope="module")
def seed0(tmp_path_factory):
    """Seed 0's models, torch graphs and the photo clip's folder and frames."""
    meta, mine = build_pair(0)
    folder = tmp_path_factory.mktemp("sam2_clip")
    return {"meta": meta, "graphs": memo_graphs(mine), "folder": folder,
            "frames": photo_clip(folder)}  # fmt: skip


def test_memory_stride_parity_with_meta(seed0):
    """Meta's memory_temporal_stride_for_eval = 2 against StreamConfig(memory_stride=2); the
    default stride fails the bars on the same run (the option changes the memory)."""
    meta = seed0["meta"]
    meta.memory_temporal_stride_for_eval = 2
    try:
        meta_run = meta_predict(meta, seed0["folder"], stream_prompts(), CORRECTIONS)
    finally:
        meta.memory_temporal_stride_for_eval = 1
    for stride, ok in ((2, True), (1, False)):
        results, corrected = run_stream(
            seed0["graphs"], seed0["frames"], stream_prompts(), CORRECTIONS,
            resize="pil-bicubic", memory_stride=stride,
        )  # fmt: skip
        rows = frame_parity(meta_run, results, corrected)
        if ok:
            assert_parity(rows)
        else:
            assert not passes(rows)


# three clicks on object 1: with corrections as conditioning frames it has four
CLICKS = [
    (2, 1, {"points": [[200.0, 150.0]], "labels": [1]}),
    (4, 1, {"points": [[250.0, 200.0]], "labels": [0]}),
    (6, 1, {"points": [[120.0, 250.0]], "labels": [1]}),
]


def test_bounded_conditioning_frames_match_meta(seed0, monkeypatch):
    """Meta's add_all_frames_to_correct_as_cond with max_cond_frames_in_attn = 2 against
    StreamConfig(corrections_as_conditioning=True, max_cond_frames=2): the two most recent
    conditioning frames stay so, the older ones serve as recent memory and pointers. Keeping
    all of them (edgekit's default, Meta's -1) fails the bars here, and so does dropping the
    older ones (edgekit before issue 36)."""
    meta = seed0["meta"]
    meta.add_all_frames_to_correct_as_cond, meta.max_cond_frames_in_attn = True, 2
    try:
        meta_run = meta_predict(meta, seed0["folder"], stream_prompts((1,)), CLICKS)
    finally:
        meta.add_all_frames_to_correct_as_cond, meta.max_cond_frames_in_attn = False, -1
    config = {"resize": "pil-bicubic", "corrections_as_conditioning": True}

    def rows(**extra):
        results, corrected = run_stream(
            seed0["graphs"], seed0["frames"], stream_prompts((1,)), CLICKS, **config, **extra
        )
        return frame_parity(meta_run, results, corrected)

    assert_parity(rows(max_cond_frames=2))
    assert not passes(rows())  # all four kept
    monkeypatch.setattr(stream_module, "_demote", lambda obj, memory: None)
    assert not passes(rows(max_cond_frames=2))


# ---- an object that leaves the frame and comes back ----------------------------------------
ABSENT_SEED = 3  # weights whose object-score probe (below) gives a clean leave-and-return
ABSENT_T = 10
CAT_X = [200, 300, 420, 560, 640, 640, 560, 420, 300, 240]  # the cat's centre column per frame
BOX = [110.0, 80.0, 290.0, 240.0]  # around the cat on frame 0
PRESENT, ABSENT = [1, 2, 7, 8, 9], [4, 5]  # tracked frames with the cat inside / outside
SCORE_GAIN = 100.0  # object-score logits per unit of the probe direction
NO_OBJECT_POINTER_GAIN = 40.0  # Meta's init (std 0.02) would barely move the masks


def leaving_clip(folder) -> list[np.ndarray]:
    """ABSENT_T frames (H, W): a photo of the cat (its 160 x 180 rectangle) over a plain grey
    wall (mild noise) leaves the frame on the right (frames 3-6) and comes back."""
    patch, mask = cat_patch()
    noise = np.random.default_rng(0)
    frames = []
    for x in CAT_X:
        frame = (90 + noise.integers(0, 6, (H, W, 3))).astype(np.uint8)
        paste(frame, patch, np.ones_like(mask), (160, x))
        frames.append(frame)
    return save_clip(folder, frames)


def set_object_score_probe(meta, folder) -> None:
    """Random weights do not know whether the cat is there; make the object-score head a
    linear probe that does. Track the clip with the object always present, record the score
    head's input (the object-score token), and make the head score SCORE_GAIN * u . (x - mid):
    u the direction from the token on frames without the cat to frames with it (made
    orthogonal to the prompted frame's offset from the latter, so the prompted frame scores as
    they do), mid their midpoint. The head stays Meta's 3-layer MLP (ReLU), linear on the
    tokens through an offset that keeps every unit positive."""
    tokens = []
    head = meta.sam_mask_decoder.pred_obj_score_head
    hook = head.register_forward_hook(lambda m, i, o: tokens.append(i[0].detach().reshape(-1)))
    try:
        meta_predict(meta, folder, {1: {"box": BOX}})
    finally:
        hook.remove()
    x = torch.stack(tokens)  # (frames, 256): the prompt on frame 0, then one per tracked frame
    inside, outside = x[PRESENT].mean(0), x[ABSENT].mean(0)
    d, e = inside - outside, x[0] - inside
    u = d - (d @ e) / (e @ e) * e
    u = u / u.norm()
    offset = float((-x.min()).clamp(min=0)) + 50.0
    threshold = float(u @ (inside + outside)) / 2
    first, second, last = head.layers
    with torch.no_grad():
        first.weight.copy_(torch.eye(256))
        first.bias.fill_(offset)
        second.weight.copy_(torch.eye(256))
        second.bias.zero_()
        last.weight.copy_(SCORE_GAIN * u[None])
        last.bias.fill_(-SCORE_GAIN * (threshold + offset * float(u.sum())))


@pytest.fixture(scope="module")
def leaving(tmp_path_factory):
    """Meta's predictor and edgekit's stream (same weights) on the clip where the cat leaves;
    Meta's object scores per frame."""
    from edgekit.models.sam2 import load_state_dict_strict

    meta, mine = build_pair(ABSENT_SEED, score_bias=10.0)
    folder = tmp_path_factory.mktemp("sam2_leaving")
    frames = leaving_clip(folder)
    set_object_score_probe(meta, folder)
    with torch.no_grad():
        meta.no_obj_ptr.mul_(NO_OBJECT_POINTER_GAIN)
    load_state_dict_strict(mine, meta.state_dict(), "(Meta's tiny, probed)")
    scores = []  # one call per frame: the prompt on frame 0, then each tracked frame
    head = meta.sam_mask_decoder.pred_obj_score_head
    hook = head.register_forward_hook(lambda m, i, o: scores.append(float(o)) or None)
    try:
        meta_run = meta_predict(meta, folder, {1: {"box": BOX}})
    finally:
        hook.remove()
    assert len(scores) == ABSENT_T
    return {"graphs": memo_graphs(mine), "frames": frames, "meta_run": meta_run,
            "scores": scores}  # fmt: skip


def test_object_leaves_the_frame_and_comes_back_as_in_meta(leaving):
    """Meta's object score goes below 0 while the cat is out and above 0 when it is back; the
    absent frames' memory (Meta's no-object spatial embedding, its no-object pointer) and
    everything after them match per frame, object scores included."""
    present = [s > 0 for s in leaving["scores"]]
    assert present == [True] * 3 + [False] * 4 + [True] * 3, leaving["scores"]
    results, corrected = run_stream(
        leaving["graphs"], leaving["frames"], {1: {"box": BOX}}, resize="pil-bicubic"
    )
    assert_parity(frame_parity(leaving["meta_run"], results, corrected))
    ours = [r.object_scores[1] for r in results]
    np.testing.assert_allclose(ours, leaving["scores"], atol=1e-3)


def absent_controls(graphs) -> dict:
    """Graph sets with the absent-object path broken: the memory encoder told the object is
    there (no no-object spatial embedding), or absent frames' pointers zeroed (not Meta's
    no-object pointer)."""
    encode, decode = graphs[G.MEMORY_ENCODER], graphs[G.MASK_DECODER]

    def always_present(feeds):
        return encode({**feeds, "object_score_logits": np.abs(feeds["object_score_logits"])})

    def zero_pointer(feeds):
        out = dict(decode(feeds))
        if float(out["object_score_logits"].reshape(-1)[0]) <= 0:
            out["obj_ptrs"] = np.zeros_like(out["obj_ptrs"])
        return out

    return {
        "no spatial embedding": {**graphs, G.MEMORY_ENCODER: always_present},
        "zero pointer": {**graphs, G.MASK_DECODER: zero_pointer},
    }


@pytest.mark.parametrize("control", ["no spatial embedding", "zero pointer"])
def test_the_bars_fail_a_wrong_absent_path(leaving, control):
    graphs = absent_controls(leaving["graphs"])[control]
    results, corrected = run_stream(
        graphs, leaving["frames"], {1: {"box": BOX}}, resize="pil-bicubic"
    )
    assert not passes(frame_parity(leaving["meta_run"], results, corrected))
