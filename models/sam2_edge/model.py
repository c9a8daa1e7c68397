"""EdgeSAM2: the compact SAM 2, with one method per graph of the contract (edgekit.segmentation.graphs).

Every method is batched over B objects (the graphs use B = 1); shapes use g = image_size / 16
(16 at 256x256), L = 4g (64, the mask-logit grid), C = dim = 64, Cm = mem_dim = 64 and
(hm, wm) = config.memory_grid (10 x 8).

- ``encode_image``  image (B, 3, S, S) -> image_embed, image_embed_nomem, image_pos,
  feat_s0 (B, C/8, L, L), feat_s1 (B, C/4, 2g, 2g)
- ``condition_on_memory``  the image embedding conditioned on memory maps and pointers
- ``decode``  prompts -> 4 mask logits, IoU, object pointers (B, 4, C), object score
- ``encode_memory``  the chosen mask -> memory map (B, Cm, hm, wm) and its position encoding
- ``mask_prompt_input``  a mask prompt (B, 1, S, S) -> decoder mask input (B, 1, L, L)
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.decoder import MaskDecoder, PromptEncoder
from edgekit.models.sam2_edge.encoder import EdgeImageEncoder
from edgekit.models.sam2_edge.layers import MLP, sine_grid_encoding
from edgekit.models.sam2_edge.memory import MemoryAttention, MemoryEncoder

NO_OBJECT_LOGIT = -1024.0  # mask logits of a frame where the object is not visible (SAM 2)


class EdgeSAM2(nn.Module):
    """All sam2-edge weights; see the module docstring for the per-graph steps."""

    def __init__(self, config: EdgeConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or EdgeConfig()
        self.image_encoder = EdgeImageEncoder(config)
        self.prompt_encoder = PromptEncoder(config)
        self.mask_decoder = MaskDecoder(config)
        key_proj = nn.Conv2d(config.dim, config.readout_key, 1)  # shared appearance key
        self.memory_encoder = MemoryEncoder(config, key_proj)
        self.memory_attention = MemoryAttention(config, key_proj)
        self.no_mem_embed = nn.Parameter(torch.zeros(1, config.dim, 1, 1))
        self.obj_ptr_proj = MLP([config.dim, config.dim, config.dim])
        self.no_obj_ptr = nn.Parameter(torch.zeros(1, 1, config.dim))
        self.mask_downsample = nn.Conv2d(1, 1, 4, 4)  # mask prompt (S, S) -> (L, L)
        self.register_buffer(
            "image_pos", sine_grid_encoding(config.dim, config.grid, config.grid), persistent=False
        )

    def encode_image(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        """image (B, 3, S, S) RGB in [0, 1] -> the image encoder graph's outputs (by name)."""
        embed, feat_s1, feat_s0 = self.image_encoder(image)
        return {
            "image_embed": embed,
            "image_embed_nomem": embed + self.no_mem_embed,
            "image_pos": self.image_pos.expand(embed.shape[0], -1, -1, -1),
            "feat_s0": feat_s0,
            "feat_s1": feat_s1,
        }

    def condition_on_memory(
        self,
        image_embed: torch.Tensor,
        image_pos: torch.Tensor,
        mem_feats: torch.Tensor,
        mem_pos: torch.Tensor,
        mem_tpos_idx: torch.Tensor,
        obj_ptrs: torch.Tensor,
        obj_ptr_tpos: torch.Tensor,
    ) -> torch.Tensor:
        """image_embed, image_pos (B, C, g, g); mem_feats, mem_pos (B, F, Cm, hm, wm) (or
        (F, Cm, hm, wm) when B = 1); mem_tpos_idx (F,) int64; obj_ptrs (B, P, C); obj_ptr_tpos
        (P,) -> pix_feat (B, C, g, g)."""
        return self.memory_attention(
            image_embed, image_pos, mem_feats, mem_pos, mem_tpos_idx, obj_ptrs, obj_ptr_tpos
        )

    def decode(
        self,
        pix_feat: torch.Tensor,
        feat_s0: torch.Tensor,
        feat_s1: torch.Tensor,
        point_coords: torch.Tensor,
        point_labels: torch.Tensor,
        mask_input: torch.Tensor,
        has_mask_input: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> low_res_masks (B, 4, L, L), iou_pred (B, 4), obj_ptrs (B, 4, C) (the no-object
        pointer where the score is <= 0), object_score_logits (B, 1).

        point_coords (B, N, 2) model-input pixels, point_labels (B, N) int64 (-1 padding),
        mask_input (B, 1, L, L) logits, has_mask_input (B,) 1.0 / 0.0.
        """
        sparse, dense = self.prompt_encoder(point_coords, point_labels, mask_input, has_mask_input)
        masks, iou, score, tokens = self.mask_decoder(
            pix_feat, self.prompt_encoder.dense_pe(), sparse, dense, feat_s1, feat_s0
        )
        present = (score > 0).to(tokens.dtype)[:, :, None]  # (B, 1, 1)
        ptrs = self.obj_ptr_proj(tokens)  # (B, 4, C)
        ptrs = present * ptrs + (1 - present) * self.no_obj_ptr
        return masks, iou, ptrs, score

    def encode_memory(
        self,
        image_embed: torch.Tensor,
        mask_logits: torch.Tensor,
        binarize: torch.Tensor,
        object_score_logits: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """image_embed (B, C, g, g), mask_logits (B, 1, L, L), binarize (B,), object_score_logits
        (B, 1) -> mem_feats (B, Cm, hm, wm), mem_pos (B, Cm, hm, wm)."""
        feats = self.memory_encoder(image_embed, mask_logits, binarize, object_score_logits)
        return feats, self.memory_encoder.memory_pos().expand(feats.shape[0], -1, -1, -1)

    def mask_prompt_input(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask prompt (B, 1, S, S) in {0, 1} -> decoder mask input (B, 1, L, L)."""
        return self.mask_downsample(mask)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
