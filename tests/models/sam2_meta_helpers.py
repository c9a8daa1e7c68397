"""Shared helpers of the SAM 2.1 parity tests against Meta's code (PyPI ``sam2`` 1.1.0):
tests/models/test_sam2_parity_meta.py and tests/models/test_sam2_meta_streams.py.

Install (test-only; never pulls torchvision or another torch):
``SAM2_BUILD_CUDA=0 pip install --no-deps sam2==1.1.0 && pip install hydra-core iopath``.
Importing this module skips the importing test module when Meta's ``sam2`` is not importable.

Meta's hiera-tiny is built at image size 256 (a hydra override; the streaming arithmetic is the
same as at 1024, RoPE and encodings follow the size) with seeded random weights, adjusted so that
the check can fail: tensors Meta initialises to a constant are perturbed (every parameter
matters), the object-score head is biased so the objects are present, and the memory
cross-attention is sharpened and amplified (with Meta's random init the memory barely moves the
masks; amplified, a wrong memory bank breaks the per-frame check itself). The same weights are
loaded into edgekit's model strictly (``build_pair``).

Whole streams run on a clip of real frames that are not the model's size: 320 x 480 JPEG frames
(a pan over scikit-image's astronaut with the chelsea cat moving across it), read by Meta's video
predictor from the folder and given to edgekit's stream as decoded frames, with prompts in frame
pixels (a box, two positive and one negative point, a mask) and a corrective click mid-stream.
The per-frame bars: max |logit difference| at frame size and mask IoU with Meta's mask.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
try:
    from sam2.build_sam import build_sam2_video_predictor
except ImportError as exc:  # pragma: no cover - depends on the optional test dependency
    pytest.skip(
        f"Meta's sam2 is not importable ({exc}); install it with "
        "SAM2_BUILD_CUDA=0 pip install --no-deps sam2==1.1.0 && pip install hydra-core iopath",
        allow_module_level=True,
    )

from edgekit.models.sam2 import build_sam2 as build_edgekit  # noqa: E402
from edgekit.models.sam2 import load_state_dict_strict, torch_graph_set  # noqa: E402
from edgekit.segmentation import graphs as G  # noqa: E402
from edgekit.segmentation.stream import Prompt, SAM2Stream, StreamConfig  # noqa: E402

S = 256  # model input size used here (official: 1024)
H, W = 320, 480  # the clip's frames: neither the model's size nor square
T = 9  # frames in the clip
CONFIGS = {
    "tiny": "configs/sam2.1/sam2.1_hiera_t.yaml",
    "small": "configs/sam2.1/sam2.1_hiera_s.yaml",
    "base_plus": "configs/sam2.1/sam2.1_hiera_b+.yaml",
    "large": "configs/sam2.1/sam2.1_hiera_l.yaml",
}
#: the bars every frame and object must pass: max |logit - Meta's| at frame size (observed
#: <= 3e-6 on torch and ONNX Runtime) and mask IoU with Meta's mask
LOGIT_ATOL = 5e-5
IOU_FLOOR = 0.999
# prompts in frame pixels on frame 0: a box around the cat, 2 positive + 1 negative points, a mask
PROMPTS = {
    1: {"box": [95.0, 70.0, 265.0, 235.0]},
    2: {"points": [[300.0, 110.0], [330.0, 200.0], [60.0, 280.0]], "labels": [1, 1, 0]},
}
DISC = (100, 380, 40)  # object 3's mask prompt: a disc (row, column, radius) in frame pixels
CORRECTIONS = [(4, 1, {"points": [[250.0, 200.0]], "labels": [0]})]  # frame 4, one click


def build_pair(seed: int, score_bias: float = 3.0) -> tuple:
    """Meta's tiny video predictor at S with random weights of ``seed`` (adjusted as the module
    says; the object-score head's last bias set to ``score_bias``) and edgekit's tiny model with
    the same weights."""
    torch.manual_seed(seed)
    overrides = [f"++model.image_size={S}"]
    meta = build_sam2_video_predictor(
        CONFIGS["tiny"], None, device="cpu", hydra_overrides_extra=overrides
    )
    meta.fill_hole_area = 0  # its hole filling needs a CUDA extension; off on both sides
    with torch.no_grad():
        for p in meta.parameters():
            if p.numel() > 1 and torch.all(p == p.flatten()[0]):  # zeros, ones, 1e-6 scales
                p.add_(0.05 * torch.randn_like(p))
        meta.sam_mask_decoder.pred_obj_score_head.layers[-1].bias.fill_(score_bias)
        for layer in meta.memory_attention.layers:
            attention = layer.cross_attn_image
            attention.q_proj.weight.mul_(3.0)
            attention.k_proj.weight.mul_(3.0)
            attention.out_proj.weight.mul_(10.0)
    mine = build_edgekit("tiny", S)
    load_state_dict_strict(mine, meta.state_dict(), "(Meta's tiny)")  # strict: no missing keys
    return meta, mine


def cat_patch() -> tuple[np.ndarray, np.ndarray]:
    """The chelsea cat's face (160, 180, 3) uint8 and its elliptical mask (160, 180) bool."""
    from skimage import data

    patch = data.chelsea()[40:200, 150:330]
    yy, xx = np.mgrid[:160, :180]
    return patch, ((yy - 80) / 80) ** 2 + ((xx - 90) / 90) ** 2 < 1


def paste(frame: np.ndarray, patch: np.ndarray, mask: np.ndarray, center: tuple[int, int]) -> None:
    """Paste ``patch`` where ``mask`` is set into ``frame`` (H, W, 3), centred at (row, column)
    and clipped at the frame's border (a patch may leave the frame)."""
    ph, pw = mask.shape
    top, left = center[0] - ph // 2, center[1] - pw // 2
    y0, y1 = max(top, 0), min(top + ph, frame.shape[0])
    x0, x1 = max(left, 0), min(left + pw, frame.shape[1])
    if y0 >= y1 or x0 >= x1:
        return
    sub = (slice(y0 - top, y1 - top), slice(x0 - left, x1 - left))
    region = frame[y0:y1, x0:x1]
    region[mask[sub]] = patch[sub][mask[sub]]


def save_clip(folder, frames: list[np.ndarray]) -> list[np.ndarray]:
    """Write ``frames`` as the JPEG folder Meta's predictor reads ("<t>.jpg"); return the
    decoded frames (what both predictors then see)."""
    from PIL import Image

    decoded = []
    for t, frame in enumerate(frames):
        Image.fromarray(frame).save(folder / f"{t}.jpg", quality=95)
        decoded.append(np.asarray(Image.open(folder / f"{t}.jpg").convert("RGB")))
    return decoded


def photo_clip(folder) -> list[np.ndarray]:
    """T frames (H, W) panning over the astronaut, the cat moving right and down across it."""
    from skimage import data

    photo = data.astronaut()  # (512, 512, 3)
    patch, mask = cat_patch()
    frames = []
    for t in range(T):
        frame = photo[8 * t : 8 * t + H, 4 * t : 4 * t + W].copy()
        paste(frame, patch, mask, (150 + 6 * t, 170 + 14 * t))
        frames.append(frame)
    return save_clip(folder, frames)


def disc_mask() -> np.ndarray:
    row, col, radius = DISC
    yy, xx = np.mgrid[:H, :W]
    return (yy - row) ** 2 + (xx - col) ** 2 < radius**2


def meta_predict(meta, folder, prompts, corrections=()) -> tuple[dict, dict]:
    """Meta's video predictor on the JPEG folder: ``prompts`` {object: points/box or "mask"}
    on frame 0, then ``corrections`` [(frame, object, clicks)] in frame order, propagating in
    between -> ({frame: logits (objects, H, W)} as tracked, {frame: logits} corrected)."""
    tracked, corrected = {}, {}
    with torch.inference_mode():
        state = meta.init_state(str(folder))
        for obj, prompt in prompts.items():
            if "mask" in prompt:
                meta.add_new_mask(state, 0, obj, prompt["mask"])
            else:
                meta.add_new_points_or_box(state, 0, obj, **prompt)
        start = 0
        for frame, obj, clicks in corrections:
            for t, _, m in meta.propagate_in_video(state, start, frame - start):
                tracked[t] = m[:, 0].numpy().copy()
            corrected[frame] = meta.add_new_points_or_box(state, frame, obj, **clicks)[2]
            corrected[frame] = corrected[frame][:, 0].numpy().copy()
            start = frame + 1
        for t, _, m in meta.propagate_in_video(state, start):
            tracked[t] = m[:, 0].numpy().copy()
    return tracked, corrected


def stream_prompts(objects=(1, 2, 3)) -> dict:
    prompts = {**PROMPTS, 3: {"mask": disc_mask()}}
    return {k: prompts[k] for k in objects}


def run_stream(graphs, frames, prompts, corrections=(), **config) -> tuple[list, dict]:
    """edgekit's stream on ``frames`` with the same prompts and corrections -> (per-frame
    results as tracked, {frame: result after its correction}). Meta's offline predictor
    normalises pointer distances by min(num_frames, 16) - 1, hence ``max_obj_ptrs``."""
    config = {"image_size": S, "max_obj_ptrs": min(len(frames), 16), **config}
    stream = SAM2Stream(graphs, StreamConfig(**config))
    clicks = {frame: (obj, c) for frame, obj, c in corrections}
    results = [stream.start(frames[0], {k: Prompt(**p) for k, p in prompts.items()})]
    corrected = {}
    for t in range(1, len(frames)):
        results.append(stream.track(frames[t]))
        if t in clicks:
            corrected[t] = stream.add_prompt(clicks[t][0], **clicks[t][1])
    return results, corrected


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.count_nonzero(a | b)
    return 1.0 if union == 0 else np.count_nonzero(a & b) / union


def frame_parity(meta_run, results, corrected) -> list[tuple]:
    """Per frame (and per correction) and object: (frame, object, mask IoU with Meta's, max
    |logit difference| at frame size). edgekit's logits are upsampled as Meta upsamples its
    own (bilinear, align_corners=False, to the frame); its mask is its own output. An absent
    object (score <= 0) differs by 0 if Meta's is absent too, else by inf."""
    tracked, meta_corrected = meta_run
    pairs = [(t, tracked[t], r) for t, r in enumerate(results)]
    pairs += [(f"{t}+click", meta_corrected[t], r) for t, r in corrected.items()]
    rows = []
    for t, want, got in pairs:
        for obj, mask in got.masks.items():
            ref = want[obj - 1]
            if got.object_scores[obj] > 0:
                low = torch.from_numpy(got.low_res_logits[obj])[None, None]
                up = torch.nn.functional.interpolate(low, size=ref.shape, mode="bilinear")
                diff = float(np.abs(up[0, 0].numpy() - ref).max())
            else:
                diff = 0.0 if (ref <= -1000).all() else float("inf")
            rows.append((t, obj, iou(ref > 0, mask), diff))
    return rows


def passes(rows) -> bool:
    """Both bars on every frame and object."""
    return all(i >= IOU_FLOOR and d <= LOGIT_ATOL for _, _, i, d in rows) and bool(rows)


def assert_parity(rows) -> None:
    worst = sorted(rows, key=lambda r: (r[2] >= IOU_FLOOR, -r[3]))[:4]
    assert passes(rows), f"(frame, object, IoU, max |logit diff|), worst first: {worst}"


class MemoImageEncoder:
    """The torch image encoder, memoised per input (a module's torch runs share the frames)."""

    def __init__(self, graph) -> None:
        self.graph, self.cache = graph, {}

    def __call__(self, feeds):
        key = feeds["image"].tobytes()
        if key not in self.cache:
            self.cache[key] = self.graph(feeds)
        return self.cache[key]


def memo_graphs(model) -> dict:
    graphs = torch_graph_set(model)
    graphs[G.IMAGE_ENCODER] = MemoImageEncoder(graphs[G.IMAGE_ENCODER])
    return graphs
