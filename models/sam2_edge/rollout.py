"""The training rollout of sam2-edge: a batch of clips tracked as the streaming predictor does.

Mirrors ``edgekit.segmentation.stream`` step by step (mask choice, memory slots, pointer distances,
binarised memory on the prompted frame), batched over (clip, object) items. Frame 0 of every
item is prompted with one click (multimask output), a click followed by 1-3 simulated
correction clicks (the previous logits fed back as the mask input), a noisy box, or the
ground-truth mask (used as the output, as SAM 2 does, with the pointer from the decoder); every
later frame is decoded from memory alone: the prompted frame, up to ``num_maskmem - 1`` recent
frames (their *predicted* masks, gradients flowing through) and the object pointers so far.
Losses: 2 x binary cross-entropy + dice on the masks (only where the object is visible),
IoU-head MSE and object-score BCE on every frame. Unlike SAM 2 (focal loss, and only the best
of the three multimask outputs trained), every one of the four mask tokens is trained on the
whole object: the synthetic objects have no part / whole ambiguity, so this gives each token
all the signal, and whichever token the predictor picks is a whole-object mask. Training from
scratch on a CPU budget, this converges several times faster than SAM 2's recipe.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from edgekit.models.sam2_edge import prompts as P
from edgekit.models.sam2_edge.clips import Clip
from edgekit.models.sam2_edge.model import NO_OBJECT_LOGIT, EdgeSAM2
from edgekit.segmentation import metrics as segmetrics

PROMPT_MODES = ("click", "clicks", "box", "mask")
PROMPT_ODDS = (0.35, 0.25, 0.25, 0.15)
PROMPT_LOGIT_CLAMP = 32.0  # previous logits fed back with a correction (sam2_graphs)
MASK_PROMPT_SCORE = 10.0  # object score of a frame prompted with a mask (sam2_stream)
CE_WEIGHT = 2.0  # binary cross-entropy weight next to dice


@dataclass
class Batch:
    """images (B, T, 3, H, W) float32 in [0, 1]; items: (clip, object) pairs; truth (I, T, H, W)."""

    images: torch.Tensor
    items: list[tuple[int, int]]
    truth: torch.Tensor


def make_batch(clips: list[Clip], max_items: int, min_area: float = 0.001) -> Batch:
    """Stack clips of equal length; items are the objects visible on frame 0 (on at least
    ``min_area`` of the pixels) of every clip, at most ``max_items``."""
    frames = np.stack([c.frames for c in clips])  # (B, T, H, W, 3)
    min_pixels = min_area * frames.shape[2] * frames.shape[3]
    images = torch.from_numpy(frames).permute(0, 1, 4, 2, 3).float() / 255.0
    items = [
        (c, k)
        for c, clip in enumerate(clips)
        for k in range(clip.masks.shape[1])
        if clip.masks[0, k].sum() >= min_pixels
    ]
    items = items[:max_items]
    truth = torch.from_numpy(np.stack([clips[c].masks[:, k] for c, k in items]))
    return Batch(images, items, truth)


# ---- losses ------------------------------------------------------------------------------------
def mask_losses(logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """CE_WEIGHT x binary cross-entropy + dice per mask: logits (I, M, L, L), truth (I, S, S) float -> (I, M)."""
    up = F.interpolate(logits, size=truth.shape[-2:], mode="bilinear", align_corners=False)
    target = truth[:, None].expand_as(up)
    prob = torch.sigmoid(up)
    ce = F.binary_cross_entropy_with_logits(up, target, reduction="none").mean(dim=(-1, -2))
    inter = (prob * target).sum(dim=(-1, -2))
    dice = 1 - (2 * inter + 1) / (prob.sum(dim=(-1, -2)) + target.sum(dim=(-1, -2)) + 1)
    return CE_WEIGHT * ce + dice


def _iou_targets(logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """IoU of each mask (logits > 0, upsampled) with truth > 0.5: (I, M), no gradient."""
    with torch.no_grad():
        up = F.interpolate(logits, size=truth.shape[-2:], mode="bilinear", align_corners=False) > 0
        t = truth[:, None] > 0.5
        inter = (up & t).sum(dim=(-1, -2)).float()
        union = (up | t).sum(dim=(-1, -2)).float()
        return torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(union))


def frame_loss(masks, iou, score, truth: torch.Tensor) -> torch.Tensor:
    """Loss of one decoded frame for I objects: masks (I, 4, L, L), iou (I, 4), score (I, 1),
    truth (I, S, S) float (area-downsampled)."""
    visible = truth.flatten(1).amax(dim=1) > 0  # (I,)
    per_mask = mask_losses(masks, truth)  # (I, 4)
    mask_loss = per_mask.mean(dim=1)  # every token learns the whole object (see above)
    iou_err = (iou - _iou_targets(masks, truth)) ** 2  # (I, 4)
    iou_loss = iou_err.mean(dim=1)
    target = visible.float()
    score_loss = F.binary_cross_entropy_with_logits(score[:, 0], target, reduction="none")
    weight = visible.float()
    return ((mask_loss + iou_loss) * weight).sum() / weight.sum().clamp(min=1) + score_loss.mean()


# ---- the predictor's mask choice -----------------------------------------------------------------
def choose(masks, iou, ptrs, score, multimask: torch.Tensor, delta: float = 0.05):
    """The stream's choice per object -> (gated low-res logits (I, 1, L, L), pointer (I, C)).

    Multimask: best of tokens 1-3 by predicted IoU (and its pointer); otherwise token 0 unless
    its stability score is below 0.98 (then the best multimask mask, pointer of token 0).
    """
    rows = torch.arange(masks.shape[0])
    best = iou[:, 1:].argmax(dim=1) + 1
    with torch.no_grad():
        union = (masks[:, 0] > -delta).flatten(1).sum(1).float()
        stable = (masks[:, 0] > delta).flatten(1).sum(1).float() >= 0.98 * union
    mask_index = torch.where(multimask | ~stable, best, torch.zeros_like(best))
    ptr_index = torch.where(multimask, best, torch.zeros_like(best))
    low = masks[rows, mask_index][:, None]
    gated = torch.where(score[:, :, None, None] > 0, low, torch.full_like(low, NO_OBJECT_LOGIT))
    return gated, ptrs[rows, ptr_index]


# ---- frame 0: prompts ----------------------------------------------------------------------------
def _first_prompts(
    rng: np.random.Generator, truth0: np.ndarray, mode: str | None = None
) -> tuple[list, list[str]]:
    if mode is None:
        modes = [PROMPT_MODES[rng.choice(len(PROMPT_MODES), p=PROMPT_ODDS)] for _ in truth0]
    else:
        modes = [mode] * len(truth0)
    prompts = []
    for mode, mask in zip(modes, truth0, strict=True):
        if mode == "box":
            prompts.append(P.box_prompt(P.noisy_box(rng, mask)))
        elif mode == "mask":  # no point: one padding point
            prompts.append((np.zeros((1, 2), np.float32), np.array([P.PAD_LABEL])))
        else:
            prompts.append(P.click_prompt([P.random_click(rng, mask)]))
    return prompts, modes


def _prompted(model: EdgeSAM2, rng, enc: dict, truth0: torch.Tensor, soft0: torch.Tensor, mode):
    """Frame 0 of I objects -> (low (I, 1, L, L), score (I, 1), pointer (I, C), mean loss)."""
    truth_np = truth0.numpy()
    prompts, modes = _first_prompts(rng, truth_np, mode)
    is_mask = torch.tensor([m == "mask" for m in modes])
    multimask = torch.tensor([m in ("click", "clicks") for m in modes])
    points, labels = (torch.from_numpy(a) for a in P.pad_prompts(prompts))
    mask_prompt = model.mask_prompt_input(truth0[:, None].float())  # (I, 1, L, L)
    mask_input = torch.where(
        is_mask[:, None, None, None], mask_prompt, torch.zeros_like(mask_prompt)
    )
    pix = torch.where(is_mask[:, None, None, None], enc["image_embed"], enc["image_embed_nomem"])
    masks, iou, ptrs, score = model.decode(
        pix, enc["feat_s0"], enc["feat_s1"], points, labels, mask_input, is_mask.float()
    )
    losses = [frame_loss(masks, iou, score, soft0)]
    low, ptr = choose(masks, iou, ptrs, score, multimask)
    # a mask prompt is its own output (logits +-10 at low resolution) with score MASK_PROMPT_SCORE
    side = low.shape[-1]
    given = F.interpolate(
        truth0[:, None].float() * 20 - 10, size=(side, side), mode="bilinear", antialias=True
    )
    low = torch.where(is_mask[:, None, None, None], given, low)
    ptr = torch.where(is_mask[:, None], ptrs[:, 0], ptr)
    score = torch.where(is_mask[:, None], torch.full_like(score, MASK_PROMPT_SCORE), score)
    rounds = [int(rng.integers(1, 4)) if m == "clicks" else 0 for m in modes]
    clicks = {
        i: [(int(prompts[i][0][0, 0]), int(prompts[i][0][0, 1]), True)]
        for i, r in enumerate(rounds)
        if r
    }
    for r in range(max(rounds, default=0)):
        idx = [i for i, n in enumerate(rounds) if n > r]
        sub = torch.tensor(idx)
        up = F.interpolate(low[sub].detach(), size=truth0.shape[-2:], mode="bilinear") > 0
        for j, i in enumerate(idx):
            click = segmetrics.next_click(up[j, 0].numpy(), truth_np[i])
            clicks[i].append(click if click is not None else clicks[i][-1])
        pts, labs = (
            torch.from_numpy(a) for a in P.pad_prompts([P.click_prompt(clicks[i]) for i in idx])
        )
        prev = low[sub].detach().clamp(-PROMPT_LOGIT_CLAMP, PROMPT_LOGIT_CLAMP)
        out = model.decode(
            enc["image_embed_nomem"][sub], enc["feat_s0"][sub], enc["feat_s1"][sub],
            pts, labs, prev, torch.ones(len(idx)),
        )  # fmt: skip
        single = torch.zeros(len(idx), dtype=torch.bool)
        losses.append(frame_loss(*out[:2], out[3], soft0[sub]))
        new_low, new_ptr = choose(out[0], out[1], out[2], out[3], single)
        low, ptr, score = (
            low.index_copy(0, sub, new_low),
            ptr.index_copy(0, sub, new_ptr),
            score.index_copy(0, sub, out[3]),
        )
    return low, score, ptr, torch.stack(losses).mean()


# ---- the whole rollout ------------------------------------------------------------------------
def rollout_loss(
    model: EdgeSAM2, batch: Batch, rng: np.random.Generator, mode: str | None = None
) -> tuple[torch.Tensor, dict]:
    """Total loss of one batch (scalar) and its parts {"prompted", "tracked"} as floats; the
    parts also hold "masks": the chosen low-resolution logits of every frame (I, T, L, L).

    ``mode`` forces one frame-0 prompt kind for every item (one of PROMPT_MODES)."""
    cfg = model.config
    b, t = batch.images.shape[:2]
    enc_all = model.encode_image(batch.images.flatten(0, 1))
    clip_index = torch.tensor([c for c, _ in batch.items])
    enc = {k: v.view(b, t, *v.shape[1:])[clip_index] for k, v in enc_all.items()}  # (I, T, ...)
    truth = batch.truth  # (I, T, H, W) bool
    side = 2 * cfg.low_res
    soft = F.interpolate(truth.float(), size=(side, side), mode="area")  # (I, T, S, S)
    n = len(batch.items)
    frame0 = {k: v[:, 0] for k, v in enc.items()}
    low, score, ptr, loss0 = _prompted(model, rng, frame0, truth[:, 0], soft[:, 0], mode)
    chosen = [low]
    cond, _ = model.encode_memory(frame0["image_embed"], low, torch.ones(n), score)
    mem_pos = model.memory_encoder.memory_pos()  # (1, Cm, hm, wm)
    recent: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (frame, memory, pointer)
    pad_points, pad_labels = torch.zeros(n, 1, 2), -torch.ones(n, 1, dtype=torch.int64)
    no_mask, multimask = (
        torch.zeros(n, 1, cfg.low_res, cfg.low_res),
        torch.ones(n, dtype=torch.bool),
    )
    tracked = []
    for step in range(1, t):
        window = [r for r in recent if step - r[0] <= cfg.num_maskmem - 1]
        feats = torch.stack([cond] + [m for _, m, _ in window], dim=1)  # (I, F, Cm, hm, wm)
        idx = torch.tensor([cfg.num_maskmem - 1] + [step - f - 1 for f, _, _ in window])
        ptr_frames = [r for r in reversed(recent) if step - r[0] <= cfg.max_obj_ptrs - 1]
        ptrs = torch.stack([ptr] + [p for _, _, p in ptr_frames], dim=1)  # (I, P, C)
        dist = torch.tensor([step] + [step - f for f, _, _ in ptr_frames], dtype=torch.float32)
        e = {k: v[:, step] for k, v in enc.items()}
        pix = model.condition_on_memory(
            e["image_embed"], e["image_pos"], feats, mem_pos[:, None].expand(n, len(idx), -1, -1, -1),
            idx, ptrs, dist / (cfg.max_obj_ptrs - 1),
        )  # fmt: skip
        out = model.decode(
            pix, e["feat_s0"], e["feat_s1"], pad_points, pad_labels, no_mask, torch.zeros(n)
        )
        tracked.append(frame_loss(out[0], out[1], out[3], soft[:, step]))
        new_low, new_ptr = choose(*out, multimask)
        memory, _ = model.encode_memory(e["image_embed"], new_low, torch.zeros(n), out[3])
        chosen.append(new_low)
        recent = (recent + [(step, memory, new_ptr)])[-(cfg.max_obj_ptrs - 1) :]
    loss1 = torch.stack(tracked).mean() if tracked else torch.zeros(())
    parts = {"prompted": float(loss0.detach()), "tracked": float(loss1.detach())}
    return loss0 + loss1, {**parts, "masks": torch.cat(chosen, dim=1).detach()}
