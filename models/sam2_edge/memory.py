"""Memory encoder (with token compression) and memory attention of sam2-edge.

Memory encoder: the current frame's image embedding (B, dim, g, g) and its mask (B, 1, 4g, 4g)
(thresholded logits on prompted frames, their sigmoid on tracked ones) are fused (SAM 2's mask
downsampler + two ConvNeXt-style blocks) into a (B, mem_dim, g, g) map, then compressed
EdgeTAM-style into (g / pool)^2 average-pooled 2D tokens plus ``memory_latents`` global latents
that cross-attend to the whole map. Both are returned as one (B, mem_dim, hm, wm) map (10 x 8 at
256x256: 8 rows of pooled tokens, 2 rows of latents), the contract's memory grid. The pooled
tokens also carry the frame's appearance key and the mask's coverage of their cell (see
MemoryEncoder). Frames where the object is absent (object score <= 0) get a learned
"no object" embedding added.

Memory attention: first a readout propagates the memory masks to the current frame by
appearance matching (STM / XMem style, ``MemoryAttention.readout``) and adds an embedding of
it to the image tokens; then the tokens go through ``memory_layers``
pre-norm layers of self-attention, cross-attention to the memory tokens (every memory map's
tokens and the object pointers) and an MLP, and comes back as the memory-conditioned embedding
(B, dim, g, g). Positions: 2D rotary encodings (real cos / sin) on image tokens and pooled
memory tokens in self- and cross-attention (global latents and pointers take none), plus
additive encodings on the memory keys: sine grid / learned latent positions (``mem_pos``), a
learned temporal encoding per memory slot (``mem_tpos_idx``) and a projected sine encoding of
each pointer's frame distance.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from edgekit.models.sam2_edge.config import EdgeConfig
from edgekit.models.sam2_edge.layers import Attention, LayerNorm2d, axial_rope, sine_grid_encoding


class FuserBlock(nn.Module):
    """ConvNeXt-style block: depthwise 7x7, LayerNorm, pointwise MLP, residual."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = LayerNorm2d(channels)
        self.pw1 = nn.Conv2d(channels, channels * 2, 1)
        self.pw2 = nn.Conv2d(channels * 2, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pw2(F.gelu(self.pw1(self.norm(self.dw(x)))))


class MemoryEncoder(nn.Module):
    """(embedding, mask logits, binarize, object score) -> compressed memory map
    (B, mem_dim, hm, wm): the pooled grid, then the global latents as extra rows.

    Channels of the pooled grid: learned memory features, then ``readout_key`` channels of the
    frame's appearance key (unit length before pooling), then the mask's coverage of the cell.
    """

    def __init__(self, config: EdgeConfig, key_proj: nn.Module) -> None:
        super().__init__()
        dim, mem = config.dim, config.mem_dim
        self.pool = config.memory_pool
        self.grid = config.memory_grid  # (hm, wm)
        self.key_proj = key_proj  # shared with MemoryAttention: (B, dim, g, g) -> (B, Ck, g, g)
        features = mem - config.readout_key - 1
        self.mask_down = nn.Sequential(  # (B, 1, 4g, 4g) -> (B, dim, g, g)
            nn.Conv2d(1, 16, 3, 2, 1),
            LayerNorm2d(16),
            nn.GELU(),
            nn.Conv2d(16, dim, 3, 2, 1),
        )
        self.pix_proj = nn.Conv2d(dim, dim, 1)
        self.fuser = nn.Sequential(FuserBlock(dim), FuserBlock(dim))
        self.out_proj = nn.Conv2d(dim, features, 1)
        self.no_object = nn.Parameter(torch.zeros(1, features, 1, 1))
        self.latents = nn.Parameter(torch.randn(1, config.memory_latents, mem) * 0.02)
        self.latent_attn = Attention(mem, 1)
        self.latent_norm = nn.LayerNorm(mem)
        self.latent_pos = nn.Parameter(torch.randn(1, config.memory_latents, mem) * 0.02)
        self.register_buffer(
            "map_pos", sine_grid_encoding(mem, config.grid, config.grid), persistent=False
        )
        side = config.grid // config.memory_pool
        self.register_buffer("pooled_pos", sine_grid_encoding(mem, side, side), persistent=False)

    def memory_pos(self) -> torch.Tensor:
        """Positional encoding of one memory map (1, mem_dim, hm, wm), input-independent."""
        hm, wm = self.grid
        latent = self.latent_pos.transpose(1, 2).reshape(1, -1, hm - wm, wm)
        return torch.cat([self.pooled_pos, latent], dim=2)

    def forward(
        self,
        embedding: torch.Tensor,
        mask_logits: torch.Tensor,
        binarize: torch.Tensor,
        object_score: torch.Tensor,
    ) -> torch.Tensor:
        """embedding (B, dim, g, g), mask_logits (B, 1, 4g, 4g), binarize (B,) 1 / 0,
        object_score (B, 1) -> memory map (B, mem_dim, hm, wm)."""
        hard = binarize.view(-1, 1, 1, 1)
        mask = hard * (mask_logits > 0).to(mask_logits.dtype) + (1 - hard) * torch.sigmoid(
            mask_logits
        )
        x = self.pix_proj(embedding) + self.mask_down(mask)
        x = self.out_proj(self.fuser(x))  # (B, mem - Ck - 1, g, g)
        present = (object_score > 0).to(x.dtype).view(-1, 1, 1, 1)
        x = x + (1 - present) * self.no_object
        key = F.normalize(self.key_proj(embedding), dim=1)  # (B, Ck, g, g)
        coverage = F.avg_pool2d(mask, mask.shape[-1] // embedding.shape[-1])  # (B, 1, g, g)
        x = torch.cat([x, key, coverage], dim=1)  # (B, mem, g, g)
        pooled = F.avg_pool2d(x, self.pool)  # (B, mem, g/p, g/p)
        full = x.flatten(2).transpose(1, 2)  # (B, g*g, mem)
        keys = full + self.map_pos.flatten(2).transpose(1, 2)
        b, c = x.shape[:2]
        latents = self.latents.expand(b, -1, -1)
        latents = self.latent_norm(latents + self.latent_attn(latents, keys, full))  # (B, L, mem)
        hm, wm = self.grid
        rows = latents.transpose(1, 2).reshape(b, c, hm - wm, wm)
        return torch.cat([pooled, rows], dim=2)


class MemoryLayer(nn.Module):
    """Pre-norm self-attention, cross-attention to memory, MLP; rotary positions on both."""

    def __init__(self, dim: int, mem_dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.cross_attn = Attention(dim, heads, kv_dim=mem_dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3))

    def forward(self, x, memory, memory_pos, rope_q, rope_k) -> torch.Tensor:
        y = self.norms[0](x)
        x = x + self.self_attn(y, y, y, rope_q=rope_q, rope_k=rope_q)
        y = self.norms[1](x)
        x = x + self.cross_attn(y, memory + memory_pos, memory, rope_q=rope_q, rope_k=rope_k)
        return x + self.mlp(self.norms[2](x))

    def start_as_identity(self) -> None:
        """Zero the three residual branches' output projections: the layer then passes its
        input through unchanged (a layer added to a trained network starts as a no-op)."""
        with torch.no_grad():
            for out in (self.self_attn.out, self.cross_attn.out, self.mlp[-1]):
                out.weight.zero_()
                out.bias.zero_()


class MemoryAttention(nn.Module):
    """Condition the current embedding on memory maps and object pointers (see the module
    docstring); the temporal encodings of both are added here, inside the graph."""

    def __init__(self, config: EdgeConfig, key_proj: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            MemoryLayer(config.dim, config.mem_dim, config.memory_heads, config.memory_mlp)
            for _ in range(config.memory_layers)
        )
        self.key_proj = key_proj  # shared with MemoryEncoder
        self.key_start = config.mem_dim - config.readout_key - 1
        self.side = config.grid // config.memory_pool
        self.log_temperature = nn.Parameter(torch.tensor(math.log(10.0)))
        self.locality = nn.Parameter(torch.full((config.num_maskmem,), -3.0))  # softplus -> 0.05
        self.null_logit = nn.Parameter(torch.tensor(5.0))  # "matches nothing in memory"
        self.readout_embed = nn.Sequential(
            nn.Linear(2, config.dim), nn.GELU(), nn.Linear(config.dim, config.dim)
        )
        self.norm = nn.LayerNorm(config.dim)
        self.maskmem_tpos = nn.Parameter(torch.randn(config.num_maskmem, config.mem_dim) * 0.02)
        self.ptr_proj = nn.Linear(config.dim, config.mem_dim)
        self.ptr_tpos_proj = nn.Linear(config.mem_dim, config.mem_dim)
        self.mem_dim = config.mem_dim
        head = config.dim // config.memory_heads
        g, pool = config.grid, config.memory_pool
        cells = torch.arange(g, dtype=torch.float32)
        image_xy = torch.stack(torch.meshgrid(cells, cells, indexing="xy"), -1).reshape(-1, 2)
        side = g // pool
        pooled = torch.arange(side, dtype=torch.float32) * pool + (pool - 1) / 2
        pooled_xy = torch.stack(torch.meshgrid(pooled, pooled, indexing="xy"), -1).reshape(-1, 2)
        self.register_buffer(
            "dist2", ((image_xy[:, None] - pooled_xy[None]) ** 2).sum(-1), persistent=False
        )  # (g*g, side*side) squared distances in cells
        cos_q, sin_q = axial_rope(image_xy, head)
        cos_k, sin_k = axial_rope(pooled_xy, head)
        latents = config.memory_latents  # global latents take no rotation (nor do pointers)
        cos_k = torch.cat([cos_k, torch.ones(latents, head)])
        sin_k = torch.cat([sin_k, torch.zeros(latents, head)])
        for name, table in (("cos_q", cos_q), ("sin_q", sin_q), ("cos_k", cos_k), ("sin_k", sin_k)):
            self.register_buffer(name, table, persistent=False)

    def forward(
        self,
        embedding: torch.Tensor,
        pos: torch.Tensor,
        mem_feats: torch.Tensor,
        mem_pos: torch.Tensor,
        mem_tpos_idx: torch.Tensor,
        obj_ptrs: torch.Tensor,
        obj_ptr_tpos: torch.Tensor,
    ) -> torch.Tensor:
        """embedding (B, dim, g, g), pos (1 | B, dim, g, g); mem_feats, mem_pos
        (B, F, mem_dim, hm, wm), or (F, mem_dim, hm, wm) for one object (B = 1);
        mem_tpos_idx (F,) int64; obj_ptrs (B, P, dim); obj_ptr_tpos (P,) normalised frame
        distances -> conditioned embedding (B, dim, g, g)."""
        b, c, h, w = embedding.shape
        x = embedding.flatten(2).transpose(1, 2)  # (B, HW, C)
        x = x + 0.1 * pos.flatten(2).transpose(1, 2)  # SAM 2 adds the position at the input
        tpos = self.maskmem_tpos[mem_tpos_idx][:, :, None, None]  # (F, Cm, 1, 1)
        mem = _tokens(mem_feats, self.mem_dim)  # (B, F*hm*wm, Cm)
        mpos = _tokens(mem_pos + tpos, self.mem_dim)
        ptr = self.ptr_proj(obj_ptrs)  # (B, P, Cm)
        ptr_pos = self.ptr_tpos_proj(sine_1d(obj_ptr_tpos, self.mem_dim))  # (P, Cm)
        memory = torch.cat([mem, ptr], dim=1)
        memory_pos = torch.cat([mpos, ptr_pos[None].expand(mpos.shape[0], -1, -1)], dim=1)
        frames, head = mem_tpos_idx.shape[0], self.cos_k.shape[1]
        identity = torch.ones_like(ptr_pos[:, :1]).expand(-1, head)  # (P, d): no rotation
        cos_k = torch.cat([self.cos_k[None].expand(frames, -1, -1).reshape(-1, head), identity])
        sin_k = torch.cat([self.sin_k[None].expand(frames, -1, -1).reshape(-1, head), 0 * identity])
        rope_q, rope_k = (self.cos_q, self.sin_q), (cos_k, sin_k)
        x = x + self.readout_embed(self.readout(embedding, mem_feats, mem_tpos_idx))
        for layer in self.layers:
            x = layer(x, memory, memory_pos, rope_q, rope_k)
        return self.norm(x).transpose(1, 2).reshape(b, c, h, w)

    def readout(
        self, embedding: torch.Tensor, mem_feats: torch.Tensor, mem_tpos_idx: torch.Tensor
    ) -> torch.Tensor:
        """Mask propagation by appearance matching (as STM / XMem read memory) -> (B, g*g, 2).

        Each image token's softmax affinity to the pooled memory tokens (cosine of the shared
        appearance keys x a learned temperature, minus a learned per-slot distance penalty,
        plus a learned "no match" entry of coverage 0) averages their mask coverage (channel
        0, in [0, 1]); channel 1 is the affinity-weighted cosine: how well the token matched.
        """
        query = F.normalize(self.key_proj(embedding), dim=1).flatten(2).transpose(1, 2)
        spatial = mem_feats[..., : self.side, :]  # the pooled rows (latents excluded)
        tokens = _tokens(spatial, spatial.shape[-3])  # (B, F*S, Cm)
        keys = tokens[..., self.key_start : -1]
        coverage = tokens[..., -1:]  # (B, F*S, 1)
        cosine = query @ keys.transpose(1, 2)  # (B, g*g, F*S)
        penalty = F.softplus(self.locality[mem_tpos_idx])  # (F,)
        bias = (penalty[None, :, None] * self.dist2[:, None, :]).reshape(self.dist2.shape[0], -1)
        logits = cosine * self.log_temperature.exp() - bias
        null = self.null_logit.expand(*logits.shape[:-1], 1)  # (B, g*g, 1)
        attn = torch.softmax(torch.cat([logits, null], dim=-1), dim=-1)[..., :-1]
        matched = (attn * cosine).sum(-1, keepdim=True)
        return torch.cat([attn @ coverage, matched], dim=-1)


def _tokens(maps: torch.Tensor, channels: int) -> torch.Tensor:
    """Memory maps (B, F, Cm, hm, wm) or (F, Cm, hm, wm) -> tokens (B | 1, F*hm*wm, Cm).

    The unbatched form permutes the graph input directly: an unsqueeze before the permute
    would make reshape-transpose-reshape, which OpenVINO's ShuffleChannelsFusion cannot
    handle with a dynamic F.
    """
    if maps.dim() == 4:
        return maps.permute(0, 2, 3, 1).reshape(1, -1, channels)
    return maps.permute(0, 1, 3, 4, 2).reshape(maps.shape[0], -1, channels)


def sine_1d(values: torch.Tensor, channels: int) -> torch.Tensor:
    """Sine encoding of normalised scalars (P,) (frame distances / (max_obj_ptrs - 1)) -> (P, C)."""
    half = channels // 2
    freqs = 10000.0 ** (-torch.arange(half, dtype=torch.float32, device=values.device) / half)
    angle = values[:, None] * freqs[None] * (math.pi * 8)
    return torch.cat([angle.sin(), angle.cos()], dim=-1)
