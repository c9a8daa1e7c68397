"""A scripted SAM 2 graph set for predictor tests (records every call; no model)."""

from __future__ import annotations

import numpy as np

from edgekit.segmentation import graphs as G

S, C, CM, H = 64, 8, 2, 4  # fake model: input 64, width 8, memory width 2, 4x4 embedding


class FakeGraphs:
    """A scripted graph set that records every call; decoder scores follow ``scores``."""

    def __init__(self, scores=(), iou=(0.1, 0.2, 0.9, 0.3), stable=True) -> None:
        self.scores = list(scores)
        self.iou = np.array([iou], np.float32)
        self.stable = stable
        self.calls: dict[str, list[dict]] = {g: [] for g in G.GRAPH_NAMES}
        self.frame = -1

    def set(self) -> dict:
        return {name: self._make(name) for name in G.GRAPH_NAMES}

    def _make(self, name):
        def run(feeds):
            self.calls[name].append({k: np.array(v) for k, v in feeds.items()})
            return getattr(self, name)(feeds)

        return run

    def image_encoder(self, feeds):
        assert feeds["image"].shape == (1, 3, S, S) and feeds["image"].dtype == np.float32
        self.frame += 1
        z = np.zeros((1, C, H, H), np.float32)
        return {
            "image_embed": z + self.frame,
            "image_embed_nomem": z - 1,
            "image_pos": z,
            "feat_s0": np.zeros((1, C // 8, 4 * H, 4 * H), np.float32),
            "feat_s1": np.zeros((1, C // 4, 2 * H, 2 * H), np.float32),
        }

    def memory_attention(self, feeds):
        return {"pix_feat": feeds["image_embed"] + 100}

    def mask_decoder(self, feeds):
        n = len(self.calls[G.MASK_DECODER])
        score = self.scores[n - 1] if n - 1 < len(self.scores) else 1.0
        masks = np.full((1, 4, 4 * H, 4 * H), -5.0, np.float32)
        for k in range(4):  # token k marks a k+1 pixels wide left band
            masks[0, k, :, : k + 1] = 5.0
        if not self.stable:  # token 0 logits hover around zero: unstable
            masks[0, 0] = 0.01
        ptrs = np.stack([np.full(C, 10 * n + k, np.float32) for k in range(4)])[None]
        return {
            "low_res_masks": masks,
            "iou_pred": self.iou,
            "obj_ptrs": ptrs,
            "object_score_logits": np.array([[score]], np.float32),
        }

    def memory_encoder(self, feeds):
        mem = np.full((1, CM, H, H), float(feeds["image_embed"].flat[0]), np.float32)
        return {"mem_feats": mem, "mem_pos": np.ones((1, CM, H, H), np.float32)}

    def mask_prompt(self, feeds):
        return {"mask_input": np.zeros((1, 1, 4 * H, 4 * H), np.float32)}


def frame(h=48, w=80, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
