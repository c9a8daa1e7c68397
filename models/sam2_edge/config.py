"""The sizes of sam2-edge, in one frozen dataclass (part of the trained weights' cache key)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class EdgeConfig:
    """Architecture of the compact SAM 2.

    The image is ``image_size`` square; the image embedding is ``dim`` channels at stride 16.
    Memory frames are compressed to (grid / ``memory_pool``)^2 pooled tokens plus
    ``memory_latents`` global latents (a Perceiver-style cross-attention), EdgeTAM's idea at
    edge scale: 64 + 16 = 80 tokens per memory frame instead of 256, stored as a
    (mem_dim, 10, 8) map (``memory_grid``: 8 rows of the pooled 8x8 grid + 2 rows of latents).
    """

    image_size: int = 256
    dim: int = 64  # image embedding / transformer width (SAM 2: 256)
    mem_dim: int = 64  # memory feature width (SAM 2: 64)
    widths: tuple[int, int, int] = (32, 48, 96)  # CNN widths at strides 4, 8, 16
    blocks: tuple[int, int, int] = (1, 2, 3)  # residual blocks at strides 4, 8, 16
    decoder_depth: int = 2
    decoder_heads: int = 2
    decoder_mlp: int = 256
    multimask_outputs: int = 3
    upscale_channels: tuple[int, int] = (32, 16)  # decoder upsampling widths at strides 8, 4
    memory_layers: int = 2
    memory_heads: int = 1
    memory_mlp: int = 256
    memory_pool: int = 2  # average-pool each memory frame by this factor per side
    memory_latents: int = 16  # global latent tokens per memory frame
    readout_key: int = 16  # channels of the appearance key each memory map stores
    num_maskmem: int = 7  # the prompted frame + 6 most recent frames (SAM 2's default)
    max_obj_ptrs: int = 16

    @property
    def grid(self) -> int:
        """Side of the image-embedding grid (image_size / 16)."""
        return self.image_size // 16

    @property
    def low_res(self) -> int:
        """Side of the decoder's low-resolution mask logits (image_size / 4)."""
        return self.image_size // 4

    @property
    def feat_s0_channels(self) -> int:
        """Channels of the stride-4 high-resolution features (the contract's C / 8)."""
        return self.dim // 8

    @property
    def feat_s1_channels(self) -> int:
        """Channels of the stride-8 high-resolution features (the contract's C / 4)."""
        return self.dim // 4

    @property
    def memory_grid(self) -> tuple[int, int]:
        """(hm, wm) of one memory frame's map: the pooled grid, then the global latents laid
        out as extra rows of the same width."""
        side = self.grid // self.memory_pool
        return side + self.memory_latents // side, side

    def __post_init__(self) -> None:
        side = self.grid // self.memory_pool
        if self.image_size % 64 or self.memory_latents % side or self.dim % 8:
            raise ValueError(
                f"EdgeConfig needs image_size % 64 == 0, memory_latents % {side} == 0 and "
                f"dim % 8 == 0; got {self.image_size}, {self.memory_latents}, {self.dim}"
            )

    def to_json(self) -> dict:
        return asdict(self)
