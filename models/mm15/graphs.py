"""The two exported graphs of the VLM and torch-runtime runners over them.

"image_encoder": tiles (B, T, 1, S, S) float32 in [0, 1] -> image_tokens (B, N, D) float32.
"decoder_step": image_tokens (B, N, D) float32, tokens (B, L) int64 -> logits (B, L, V)
float32; a greedy step takes the argmax of the last position (``evaluate.greedy_decode``).
Batch and text length are dynamic axes.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.models.mm15 import vocab
from edgekit.models.mm15.model import DecoderStepGraph, ImageEncoderGraph, VisionLanguageModel


def mm15_graphs(net: VisionLanguageModel, tiles: np.ndarray, prompt: str) -> list[GraphSpec]:
    """GraphSpecs with ``tiles`` (B, T, 1, S, S) and ``prompt`` as the example inputs."""
    net = net.eval()
    example_tiles = torch.from_numpy(np.ascontiguousarray(tiles, np.float32))
    with torch.no_grad():
        image_tokens = net.encode_image(example_tiles)
    tokens = torch.tensor([vocab.prompt_ids(prompt)] * len(tiles), dtype=torch.int64)
    batch = {0: "batch"}
    return [
        GraphSpec(
            "image_encoder",
            ImageEncoderGraph(net).eval(),
            {"tiles": example_tiles},
            ["image_tokens"],
            {"tiles": batch, "image_tokens": batch},
        ),
        GraphSpec(
            "decoder_step",
            DecoderStepGraph(net).eval(),
            {"image_tokens": image_tokens, "tokens": tokens},
            ["logits"],
            {
                "image_tokens": batch,
                "tokens": {0: "batch", 1: "text"},
                "logits": {0: "batch", 1: "text"},
            },
        ),
    ]
