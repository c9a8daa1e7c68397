"""Sizes of the official SAM 2.1 models (tiny, small, base_plus, large), as dataclasses.

The numbers are those of Meta's ``configs/sam2.1/sam2.1_hiera_{t,s,b+,l}.yaml``; everything
outside the Hiera trunk (neck, prompt encoder, decoder, memory) is the same in all four.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from edgekit.errors import InputError


@dataclass(frozen=True)
class HieraConfig:
    """The Hiera trunk: a 4-stage hierarchical ViT with windowed and global attention."""

    embed_dim: int
    num_heads: int
    stages: tuple[int, int, int, int]
    global_att_blocks: tuple[int, ...]
    window_spec: tuple[int, int, int, int] = (8, 4, 14, 7)
    window_pos_embed_bkg_spatial_size: tuple[int, int] = (14, 14)
    q_pool: int = 3  # stages (after the first) that halve the resolution by pooling queries
    q_stride: tuple[int, int] = (2, 2)
    dim_mul: float = 2.0
    head_mul: float = 2.0
    mlp_ratio: float = 4.0

    @property
    def depth(self) -> int:
        return sum(self.stages)

    @property
    def stage_ends(self) -> list[int]:
        """Index of the last block of each stage."""
        return [sum(self.stages[: i + 1]) - 1 for i in range(len(self.stages))]

    @property
    def channel_list(self) -> list[int]:
        """Output channels per stage, lowest resolution first (the FPN neck's order)."""
        return [int(self.embed_dim * self.dim_mul**i) for i in range(len(self.stages))][::-1]


@dataclass(frozen=True)
class SAM2Config:
    """A whole SAM 2.1 model. ``image_size`` must be a multiple of 32."""

    name: str
    hiera: HieraConfig
    image_size: int = 1024
    d_model: int = 256  # C: neck, prompt encoder, decoder and memory-attention width
    mem_dim: int = 64  # Cm: memory feature width
    num_maskmem: int = 7  # conditioning frame + 6 most recent frames
    max_obj_ptrs: int = 16
    memory_attention_layers: int = 4
    memory_attention_ffn: int = 2048
    rope_theta: float = 10000.0
    decoder_depth: int = 2
    decoder_heads: int = 8
    decoder_mlp_dim: int = 2048
    mask_in_chans: int = 16
    fuser_layers: int = 2
    sigmoid_scale_for_mem_enc: float = 20.0
    sigmoid_bias_for_mem_enc: float = -10.0
    backbone_stride: int = 16
    fpn_top_down_levels: tuple[int, ...] = (2, 3)

    @property
    def embed_size(self) -> int:
        """h = w: side of the image-embedding grid."""
        return self.image_size // self.backbone_stride

    def with_image_size(self, image_size: int) -> SAM2Config:
        """The same model at another (square) input size; RoPE and encodings follow the size."""
        _check_image_size(image_size)
        return replace(self, image_size=image_size)


def _check_image_size(image_size: int) -> None:
    if not isinstance(image_size, int) or image_size < 64 or image_size % 32:
        raise InputError(f"SAM 2 image_size must be a multiple of 32 (>= 64), got {image_size!r}")


SIZES: dict[str, SAM2Config] = {
    "tiny": SAM2Config(
        "tiny",
        HieraConfig(
            embed_dim=96,
            num_heads=1,
            stages=(1, 2, 7, 2),
            global_att_blocks=(5, 7, 9),
            window_pos_embed_bkg_spatial_size=(7, 7),
        ),
    ),
    "small": SAM2Config(
        "small",
        HieraConfig(
            embed_dim=96,
            num_heads=1,
            stages=(1, 2, 11, 2),
            global_att_blocks=(7, 10, 13),
            window_pos_embed_bkg_spatial_size=(7, 7),
        ),
    ),
    "base_plus": SAM2Config(
        "base_plus",
        HieraConfig(
            embed_dim=112,
            num_heads=2,
            stages=(2, 3, 16, 3),
            global_att_blocks=(12, 16, 20),
        ),
    ),
    "large": SAM2Config(
        "large",
        HieraConfig(
            embed_dim=144,
            num_heads=2,
            stages=(2, 6, 36, 4),
            global_att_blocks=(23, 33, 43),
            window_spec=(8, 4, 16, 8),
            window_pos_embed_bkg_spatial_size=(7, 7),
        ),
    ),
}


def sam2_config(size: str, image_size: int = 1024) -> SAM2Config:
    """The configuration of SAM 2.1 ``size`` (tiny | small | base_plus | large) at ``image_size``."""
    if size not in SIZES:
        raise InputError(f"unknown SAM 2.1 size '{size}'; known sizes: {', '.join(SIZES)}")
    return SIZES[size].with_image_size(image_size)
