"""A photographic print on a dark backdrop: the scene layout of ImageNet-ES Diverse.

ImageNet-ES Diverse photographed *printed* images in a dark room. A print does not reflect like the
digital image: its paper white reflects ~85 % and its densest ink ~3 % (print density ~1.5), so the
print's reflectance is ``ink_black + (paper_white - ink_black) * linear(image)``. It hangs in the
middle of the frame on a dark, matte backdrop (``backdrop`` reflectance ~4 %, black card or a dark
wall); ``print_fraction`` of the frame's short side is the print's side. A camera metering the
whole frame therefore sees mostly dark backdrop and over-exposes the print; the classifier is given
the print region of the capture (``PrintMount.box``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import InputError


@dataclass(frozen=True)
class PrintMount:
    """Print-on-backdrop layout. Reflectances are linear in [0, 1]; ``print_fraction`` in (0, 1]."""

    print_fraction: float = 0.5  # print side / frame short side (the print covers 25 % of a square)
    paper_white: float = 0.85  # reflectance of unprinted paper
    ink_black: float = 0.03  # reflectance of the densest ink (print density ~1.5)
    backdrop: float = 0.04  # matte dark backdrop / wall around the print

    def __post_init__(self) -> None:
        if not 0.0 < self.print_fraction <= 1.0:
            raise InputError(f"print_fraction must be in (0, 1], got {self.print_fraction}")
        if not 0.0 <= self.ink_black < self.paper_white <= 1.0:
            raise InputError(
                "reflectances must satisfy 0 <= ink_black < paper_white <= 1, got "
                f"ink_black={self.ink_black}, paper_white={self.paper_white}"
            )
        if not 0.0 <= self.backdrop <= 1.0:
            raise InputError(f"backdrop reflectance must be in [0, 1], got {self.backdrop}")

    def box(self, frame: tuple[int, int]) -> tuple[int, int, int, int]:
        """(y0, y1, x0, x1) of the square print, centred in a ``frame`` of (H, W) pixels."""
        side = max(1, round(self.print_fraction * min(frame)))
        y0, x0 = (frame[0] - side) // 2, (frame[1] - side) // 2
        return y0, y0 + side, x0, x0 + side

    def compose(self, image_linear: np.ndarray, frame: tuple[int, int]) -> np.ndarray:
        """The scene's reflectance (H, W, 3) float32: the print of ``image_linear`` (side, side, 3)
        linear RGB in [0, 1] (side = the box side) on the backdrop."""
        y0, y1, x0, x1 = self.box(frame)
        image = np.asarray(image_linear, dtype=np.float32)
        if image.shape != (y1 - y0, x1 - x0, 3):
            raise InputError(
                f"the print must be ({y1 - y0}, {x1 - x0}, 3) for a {frame} frame, got "
                f"{image.shape}"
            )
        out = np.full((*frame, 3), self.backdrop, dtype=np.float32)
        out[y0:y1, x0:x1] = self.ink_black + (self.paper_white - self.ink_black) * np.clip(
            image, 0.0, 1.0
        )
        return out
