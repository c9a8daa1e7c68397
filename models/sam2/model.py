"""edgekit's SAM 2.1: the whole model, its parameter names those of Meta's official checkpoints.

``SAM2Model`` holds every component and exposes the five steps the streaming predictor chains
(see ``edgekit.segmentation.graphs`` for the contract): ``encode_image``, ``condition_on_memory``,
``decode``, ``encode_memory`` and ``mask_prompt_input``. The memory bank and the choice among the
decoder's masks live outside, in ``edgekit.segmentation.stream``.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.models.sam2.config import SAM2Config, sam2_config
from edgekit.models.sam2.hiera import Hiera
from edgekit.models.sam2.layers import MLP
from edgekit.models.sam2.mask_decoder import MaskDecoder
from edgekit.models.sam2.memory_attention import MemoryAttention
from edgekit.models.sam2.memory_encoder import MemoryEncoder
from edgekit.models.sam2.neck import FpnNeck, sine_position_encoding
from edgekit.models.sam2.prompt_encoder import PromptEncoder

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageEncoder(nn.Module):
    """Hiera trunk + FPN neck: (B, 3, S, S) -> maps at strides 4, 8, 16 (B, C, ., .)."""

    def __init__(self, config: SAM2Config) -> None:
        super().__init__()
        self.trunk = Hiera(config.hiera)
        self.neck = FpnNeck(config.d_model, config.hiera.channel_list, config.fpn_top_down_levels)

    def forward(self, x: torch.Tensor, pos_embed: torch.Tensor | None = None) -> list[torch.Tensor]:
        return self.neck(self.trunk(x, pos_embed))


def sine_1d(positions: torch.Tensor, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """(P,) positions -> (P, dim) [sin | cos] encoding over a geometric ladder of wavelengths."""
    half = dim // 2
    steps = torch.arange(half, dtype=torch.float32)
    wavelengths = temperature ** (2 * torch.div(steps, 2, rounding_mode="floor") / half)
    angles = positions.unsqueeze(-1) / wavelengths
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class SAM2Model(nn.Module):
    """SAM 2.1 (image encoder, prompt encoder, mask decoder, memory encoder and attention)."""

    def __init__(self, config: SAM2Config) -> None:
        super().__init__()
        self.config = config
        c, cm, hw = config.d_model, config.mem_dim, config.embed_size
        self.image_encoder = ImageEncoder(config)
        self.memory_attention = MemoryAttention(
            c,
            cm,
            config.memory_attention_layers,
            config.memory_attention_ffn,
            hw,
            hw,
            config.rope_theta,
        )
        self.memory_encoder = MemoryEncoder(c, cm, config.fuser_layers)
        self.maskmem_tpos_enc = nn.Parameter(torch.zeros(config.num_maskmem, 1, 1, cm))
        self.no_mem_embed = nn.Parameter(torch.zeros(1, 1, c))
        self.no_mem_pos_enc = nn.Parameter(torch.zeros(1, 1, c))
        self.no_obj_ptr = nn.Parameter(torch.zeros(1, c))
        self.no_obj_embed_spatial = nn.Parameter(torch.zeros(1, cm))
        self.mask_downsample = nn.Conv2d(1, 1, kernel_size=4, stride=4)
        self.sam_prompt_encoder = PromptEncoder(c, hw, config.image_size, config.mask_in_chans)
        self.sam_mask_decoder = MaskDecoder(
            c, config.decoder_depth, config.decoder_heads, config.decoder_mlp_dim
        )
        self.obj_ptr_proj = MLP(c, c, c, 3)
        self.obj_ptr_tpos_proj = nn.Linear(c, cm)
        for p in (self.maskmem_tpos_enc, self.no_mem_embed, self.no_mem_pos_enc):
            nn.init.trunc_normal_(p, std=0.02)
        for p in (self.no_obj_ptr, self.no_obj_embed_spatial):
            nn.init.trunc_normal_(p, std=0.02)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        self.register_buffer("pixel_mean", mean, persistent=False)
        self.register_buffer("pixel_std", std, persistent=False)

    # ---- 1. image encoder --------------------------------------------------------------------
    def encode_image(
        self, image: torch.Tensor, pos_embed: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """(1, 3, S, S) RGB in [0, 1] -> image_embed, image_embed_nomem, image_pos (1, C, h, w),
        feat_s0 (1, C/8, 4h, 4w), feat_s1 (1, C/4, 2h, 2w)."""
        x = (image - self.pixel_mean) / self.pixel_std
        s4, s8, s16 = self.image_encoder(x, pos_embed)
        decoder = self.sam_mask_decoder
        _, c, h, w = s16.shape
        return {
            "image_embed": s16,
            "image_embed_nomem": s16 + self.no_mem_embed.reshape(1, c, 1, 1),
            "image_pos": sine_position_encoding(c, h, w).expand(s16.shape[0], -1, -1, -1),
            "feat_s0": decoder.conv_s0(s4),
            "feat_s1": decoder.conv_s1(s8),
        }

    # ---- 2. memory attention ------------------------------------------------------------------
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
        """Frame features (1, C, h, w) attended to F memory frames (F, Cm, h, w) and P object
        pointers (P, C) -> pix_feat (1, C, h, w). See the graph contract for the inputs."""
        _, c, h, w = image_embed.shape
        cm = mem_feats.shape[1]
        curr = image_embed.flatten(2).transpose(1, 2)  # (1, hw, C)
        curr_pos = image_pos.flatten(2).transpose(1, 2)
        mem = mem_feats.flatten(2).transpose(1, 2)  # (F, hw, Cm)
        tpos = self.maskmem_tpos_enc.reshape(-1, 1, cm)[mem_tpos_idx]  # (F, 1, Cm)
        pos = mem_pos.flatten(2).transpose(1, 2) + tpos
        mem, pos = mem.reshape(1, -1, cm), pos.reshape(1, -1, cm)
        ptr, ptr_pos = self.pointer_tokens(obj_ptrs, obj_ptr_tpos)
        out = self.memory_attention(curr, curr_pos, mem, pos, ptr, ptr_pos)
        return out.transpose(1, 2).reshape(1, c, h, w)

    def pointer_tokens(
        self, obj_ptrs: torch.Tensor, obj_ptr_tpos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, C) pointers, (P,) normalised temporal distances -> tokens and encodings
        (1, P * C/Cm, Cm): each pointer split into C/Cm tokens sharing its encoding."""
        c, cm = self.config.d_model, self.config.mem_dim
        pos = self.obj_ptr_tpos_proj(sine_1d(obj_ptr_tpos, c))  # (P, Cm)
        split = c // cm
        tokens = obj_ptrs.reshape(1, -1, cm)
        pos = pos.unsqueeze(1).expand(-1, split, -1).reshape(1, -1, cm)
        return tokens, pos

    # ---- 3. prompt encoder + mask decoder ------------------------------------------------------
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
        """-> low_res_masks (1, 4, 4h, 4w), iou_pred (1, 4), obj_ptrs (1, 4, C) with the
        no-object pointer mixed in when absent, object_score_logits (1, 1)."""
        pe = self.sam_prompt_encoder
        sparse = pe.embed_points(point_coords, point_labels)
        dense = pe.embed_mask(mask_input, has_mask_input)
        masks, iou, tokens, score = self.sam_mask_decoder(
            pix_feat, pe.dense_pe(), sparse, dense, feat_s0, feat_s1
        )
        present = (score > 0).to(tokens.dtype).unsqueeze(-1)  # (1, 1, 1)
        ptrs = present * self.obj_ptr_proj(tokens)
        ptrs = ptrs + (1 - present) * self.no_obj_ptr
        return masks, iou, ptrs, score

    # ---- 4. memory encoder --------------------------------------------------------------------
    def encode_memory(
        self,
        image_embed: torch.Tensor,
        mask_logits: torch.Tensor,
        binarize: torch.Tensor,
        object_score_logits: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """features (1, C, h, w) + chosen logits (1, 1, 4h, 4w) -> mem_feats, mem_pos (1, Cm, h, w)."""
        s = self.config.image_size
        high = F.interpolate(mask_logits, size=(s, s), mode="bilinear", align_corners=False)
        hard = (high > 0).to(high.dtype)
        mask = torch.where(binarize.reshape(-1, 1, 1, 1) > 0.5, hard, torch.sigmoid(high))
        mask = mask * self.config.sigmoid_scale_for_mem_enc + self.config.sigmoid_bias_for_mem_enc
        feats, pos = self.memory_encoder(image_embed, mask)
        absent = 1 - (object_score_logits > 0).to(feats.dtype)  # (1, 1)
        feats = feats + absent[..., None, None] * self.no_obj_embed_spatial[..., None, None]
        return feats, pos

    # ---- 5. mask prompts ---------------------------------------------------------------------
    def mask_prompt_input(self, mask: torch.Tensor) -> torch.Tensor:
        """(1, 1, S, S) mask in {0, 1} -> (1, 1, 4h, 4w) decoder mask input."""
        return self.mask_downsample(mask)


def build_sam2(
    size: str = "tiny", image_size: int = 1024, checkpoint: str | Path | None = None
) -> SAM2Model:
    """SAM 2.1 ``size`` at ``image_size`` in eval mode, with the official checkpoint at
    ``checkpoint`` (a local ``sam2.1_hiera_*.pt``) or random weights when None."""
    model = SAM2Model(sam2_config(size, image_size))
    if checkpoint is not None:
        from edgekit.models.sam2.checkpoint import load_checkpoint

        load_checkpoint(model, checkpoint)
    return model.eval()


def parameter_count(model: nn.Module) -> int:
    """Number of parameters (the official tiny has 38.96M)."""
    return sum(math.prod(p.shape) for p in model.parameters())
