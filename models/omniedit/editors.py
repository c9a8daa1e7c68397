"""The three instruction-conditioned editors compared in the study (one-step direct predictors).

All three map source (B, 3, S, S) in [0, 1] and instruction (B, I) to the edit (B, 3, S, S) in
[0, 1] as ``source + delta``. The instruction becomes ``text_tokens`` text tokens and, like
SD3's pooled text vector, an adaLN condition of every block. A gated pixel head applies the
main branch's final image tokens at pixel precision: per pixel, features of its source colour
(a soft one-hot over the scene palette, standing in for the paper's VAE encoder) and of its row
and column, multiplied twice by gates read from its patch token. The head never sees the
instruction: which object, which colour and where to draw reach a pixel only through the
tokens. The editors differ in how the source reaches the main branch, whose image tokens start
as a learned canvas (positions only; the paper's main branch holds the noisy latent, which
carries no source):

- "concat" (InstructPix2Pix-style): the main branch's image tokens are the source's patches;
  one branch of ``2 * depth`` joint blocks over [text; image] (parameter-matched to the others).
- "controlnet": a control branch of ``depth`` blocks over its own [text_c; source patches]
  tokens; after block l its image tokens are added to the main branch's through a
  zero-initialised linear map. One-way: the control branch never sees the main branch.
- "editnet" (OmniEdit): control blocks attend over [main text tokens; source patch tokens], so
  the control branch reads the main branch's instruction tokens and the text tokens it updates
  are the ones the main branch's next block uses; its image tokens are added as in ControlNet.
  Control and main branch interact through the shared text tokens in both directions.
"""

from __future__ import annotations

import torch
from torch import nn

from edgekit.errors import InputError
from edgekit.models.omniedit.blocks import JointBlock, PatchEmbed, sincos_positions
from edgekit.models.omniedit.scenes import PALETTE

ARCHITECTURES = ("concat", "controlnet", "editnet")


class Editor(nn.Module):
    """forward(source (B, 3, S, S) in [0, 1], instruction (B, I)) -> edited (B, 3, S, S)."""

    def __init__(
        self,
        arch: str,
        size: int,
        instruction_dim: int,
        dim: int = 48,
        depth: int = 2,
        heads: int = 4,
        patch: int = 4,
        text_tokens: int = 4,
        head_hidden: int = 64,
    ) -> None:
        super().__init__()
        if arch not in ARCHITECTURES:
            raise InputError(f"editor architecture must be one of {ARCHITECTURES}, got {arch!r}")
        if depth < 1 or text_tokens < 1:
            raise InputError(f"depth and text_tokens must be >= 1, got {depth}, {text_tokens}")
        self.arch, self.size, self.patch = arch, size, patch
        self.dim, self.text_tokens = dim, text_tokens
        self.text = nn.Linear(instruction_dim, text_tokens * dim)
        self.pooled = nn.Sequential(nn.Linear(instruction_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        if arch == "concat":
            self.embed = PatchEmbed(3, size, patch, dim)
        else:
            self.canvas = nn.Parameter(torch.zeros(1, (size // patch) ** 2, dim))
            self.register_buffer("pos", sincos_positions(size // patch, dim), persistent=False)
            self.control_embed = PatchEmbed(3, size, patch, dim)
            self.control = nn.ModuleList(JointBlock(dim, heads) for _ in range(depth))
            self.zero = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
            for layer in self.zero:
                nn.init.zeros_(layer.weight)
                nn.init.zeros_(layer.bias)
        if arch == "controlnet":
            self.control_text = nn.Linear(instruction_dim, text_tokens * dim)
        main_depth = 2 * depth if arch == "concat" else depth
        self.main = nn.ModuleList(JointBlock(dim, heads) for _ in range(main_depth))
        self.out_norm = nn.LayerNorm(dim)
        self.register_buffer("position", _position_codes(size), persistent=False)
        self.register_buffer("palette", torch.from_numpy(PALETTE), persistent=False)
        pixel_in = len(PALETTE) + 2 * size
        self.pixel = nn.Conv2d(pixel_in, head_hidden, 1)
        self.gate1 = nn.Conv2d(dim, head_hidden, 1)
        self.mix = nn.Conv2d(head_hidden, head_hidden, 1)
        self.gate2 = nn.Conv2d(dim, head_hidden, 1)
        self.out = nn.Conv2d(head_hidden, 3, 1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def _tokens(self, linear: nn.Linear, instruction: torch.Tensor) -> torch.Tensor:
        return linear(instruction).reshape(instruction.shape[0], self.text_tokens, self.dim)

    def tokens(self, source: torch.Tensor, instruction: torch.Tensor) -> torch.Tensor:
        """Final main-branch image tokens (B, (S / P)^2, D)."""
        src = 2.0 * source - 1.0
        text = self._tokens(self.text, instruction)  # (B, T, D)
        c = self.pooled(instruction)  # (B, D) pooled instruction vector for adaLN
        n_text = self.text_tokens
        if self.arch == "concat":
            x = torch.cat([text, self.embed(src)], dim=1)
            for block in self.main:
                x = block(x, c)
            return x[:, n_text:]
        image = (self.canvas + self.pos).expand(src.shape[0], -1, -1)  # (B, N, D)
        ctrl = self.control_embed(src)  # (B, N, D)
        ctrl_text = (
            self._tokens(self.control_text, instruction) if self.arch == "controlnet" else None
        )
        for block, control, zero in zip(self.main, self.control, self.zero, strict=True):
            if ctrl_text is not None:  # ControlNet: the control branch keeps its own text
                y = control(torch.cat([ctrl_text, ctrl], dim=1), c)
                ctrl_text, ctrl = y[:, :n_text], y[:, n_text:]
            else:  # EditNet: the control branch updates the main branch's text tokens
                y = control(torch.cat([text, ctrl], dim=1), c)
                text, ctrl = y[:, :n_text], y[:, n_text:]
            x = block(torch.cat([text, image + zero(ctrl)], dim=1), c)
            text, image = x[:, :n_text], x[:, n_text:]
        return image

    def colour_codes(self, source: torch.Tensor) -> torch.Tensor:
        """(B, K, S, S) soft one-hot of each pixel's nearest scene colour (RBF, width 0.1)."""
        diff = source[:, None] - self.palette[None, :, :, None, None]  # (B, K, 3, S, S)
        return torch.exp(-(diff * diff).sum(dim=2) / 0.02)

    def forward(self, source: torch.Tensor, instruction: torch.Tensor) -> torch.Tensor:
        h = self.out_norm(self.tokens(source, instruction))  # (B, N, D)
        b, g = h.shape[0], self.size // self.patch
        grid = h.transpose(1, 2).reshape(b, self.dim, g, g)
        ctx = grid.repeat_interleave(self.patch, 2).repeat_interleave(self.patch, 3)  # (B, D, S, S)
        codes = self.position.expand(b, -1, -1, -1)  # (B, 2 S, S, S)
        pixel = self.pixel(torch.cat([self.colour_codes(source), codes], dim=1))
        hidden = nn.functional.gelu(pixel) * (1.0 + self.gate1(ctx))  # (B, hidden, S, S)
        hidden = nn.functional.gelu(self.mix(hidden)) * (1.0 + self.gate2(ctx))
        return source + 0.5 * self.out(hidden)  # (B, 3, S, S)


def _position_codes(size: int) -> torch.Tensor:
    """(1, 2 S, S, S): one-hot of each pixel's row, then of its column."""
    eye = torch.eye(size)
    rows = eye[:, :, None].expand(size, size, size)  # channel r is 1 on row r
    cols = eye[:, None, :].expand(size, size, size)  # channel c is 1 on column c
    return torch.cat([rows, cols], dim=0)[None]


def parameter_count(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters())
