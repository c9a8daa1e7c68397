"""The judge's two graphs as GraphSpecs, and torch-runtime runners over them.

"image_encoder": images (N, 1, 16, 16) float32 -> embedding (N, 64) float32.
"scorer": query (B, 384), ref_text (B, 6, 384), ref_image (B, 6, 64), ref_mask (B, 6),
ref_has_image (B, 6), ans_text (B, 6, 384), ans_image (B, 6, 64), ans_mask (B, 6),
ans_has_image (B, 6) float32, category (B,) int64 -> logits (B, 7), coverage (B, 6) float32.
Only the batch axis is dynamic; the step axis is fixed at MAX_STEPS.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec, Runner
from edgekit.models.mmie.batch import Batch
from edgekit.models.mmie.judge import IMAGE_GRAPH, SCORER_GRAPH, embed_images, scorer_feeds
from edgekit.models.mmie.scorer import SCORER_INPUTS, ImageEncoder, ScorerHead

BATCH = {0: "batch"}


class _ModuleRunner:
    """A minimal in-process runner over an eval-mode module (used to build example feeds)."""

    def __init__(self, module: torch.nn.Module, outputs: list[str]) -> None:
        self.module, self.outputs = module, outputs

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = self.module(*(torch.from_numpy(v) for v in feeds.values()))
        out = out if isinstance(out, tuple) else (out,)
        return {n: o.numpy() for n, o in zip(self.outputs, out, strict=True)}


def judge_graphs(encoder: ImageEncoder, head: ScorerHead, example: Batch) -> list[GraphSpec]:
    """GraphSpecs of the fine-tuned judge with ``example`` (a few items) as example inputs."""
    encoder, head = encoder.eval(), head.eval()
    images = example.answer.images[:, :2].reshape(-1, 1, *example.answer.images.shape[-2:])
    runner = _ModuleRunner(encoder, ["embedding"])
    feeds = scorer_feeds(
        example,
        embed_images(runner, example.reference.images),
        embed_images(runner, example.answer.images),
    )
    return [
        GraphSpec(
            IMAGE_GRAPH,
            encoder,
            {"images": torch.from_numpy(np.ascontiguousarray(images))},
            ["embedding"],
            {"images": BATCH, "embedding": BATCH},
        ),
        GraphSpec(
            SCORER_GRAPH,
            head,
            {name: torch.from_numpy(feeds[name]) for name in SCORER_INPUTS},
            ["logits", "coverage"],
            {name: BATCH for name in (*SCORER_INPUTS, "logits", "coverage")},
        ),
    ]


def module_runners(encoder: ImageEncoder, head: ScorerHead) -> dict[str, Runner]:
    """In-process runners of the two graphs (no export), keyed by graph name."""
    return {
        IMAGE_GRAPH: _ModuleRunner(encoder.eval(), ["embedding"]),
        SCORER_GRAPH: _ModuleRunner(head.eval(), ["logits", "coverage"]),
    }
