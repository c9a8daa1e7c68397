"""The fine-tuned judge end to end over any runners of its two graphs (torch, ONNX Runtime...).

``score_batch`` runs "image_encoder" on every step image and "scorer" on the padded batch;
``judge_texts`` writes each verdict in MMIE-Score's template ("### Feedback ... ### Score: N",
the feedback naming the reference steps the answer covers worst); scores are then read back
with the "### Score" parser, as the paper reads its judge.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edgekit.card import Feeds, Runner
from edgekit.models.mmie.batch import Batch, Side
from edgekit.models.mmie.parser import format_judgement
from edgekit.models.mmie.rubrics import SCORE_MIN

IMAGE_GRAPH = "image_encoder"
SCORER_GRAPH = "scorer"
IMAGE_CHUNK = 512  # images per image-encoder call


def embed_images(runner: Runner, images: np.ndarray) -> np.ndarray:
    """(B, S, 16, 16) float32 step images -> (B, S, 64) float32 embeddings."""
    b, s, h, w = images.shape
    flat = np.ascontiguousarray(images.reshape(b * s, 1, h, w), dtype=np.float32)
    parts = [
        np.asarray(runner.run({"images": flat[i : i + IMAGE_CHUNK]})["embedding"])
        for i in range(0, len(flat), IMAGE_CHUNK)
    ]
    return np.concatenate(parts).reshape(b, s, -1).astype(np.float32)


def scorer_feeds(batch: Batch, ref_image: np.ndarray, ans_image: np.ndarray) -> Feeds:
    """The "scorer" graph's feeds for ``batch`` given the (B, S, 64) image embeddings."""

    def side(prefix: str, s: Side, emb: np.ndarray) -> Feeds:
        return {
            f"{prefix}_text": s.text,
            f"{prefix}_image": emb,
            f"{prefix}_mask": s.mask,
            f"{prefix}_has_image": s.has_image,
        }

    feeds = {"query": batch.query}
    feeds |= side("ref", batch.reference, ref_image)
    feeds |= side("ans", batch.answer, ans_image)
    feeds["category"] = batch.category
    return {k: np.ascontiguousarray(v) for k, v in feeds.items()}


def score_batch(
    runners: Mapping[str, Runner], batch: Batch, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """(logits (B, 7) over scores 0..6, coverage (B, S)) of the judge on ``batch``."""
    logits, coverage = [], []
    for start in range(0, len(batch), chunk):
        part = batch.take(np.arange(start, min(len(batch), start + chunk)))
        ref = embed_images(runners[IMAGE_GRAPH], part.reference.images)
        ans = embed_images(runners[IMAGE_GRAPH], part.answer.images)
        out = runners[SCORER_GRAPH].run(scorer_feeds(part, ref, ans))
        logits.append(np.asarray(out["logits"]))
        coverage.append(np.asarray(out["coverage"]))
    return np.concatenate(logits), np.concatenate(coverage)


def decide(logits: np.ndarray) -> np.ndarray:
    """(B,) int64 scores: the most probable class of each row of (B, 7) logits."""
    return logits.argmax(axis=1).astype(np.int64) + SCORE_MIN


def feedback(coverage: np.ndarray, logits: np.ndarray, worst: int = 2) -> str:
    """The feedback for one answer from its (S,) coverage and (7,) logits."""
    valid = np.flatnonzero(coverage > -1)
    order = valid[np.argsort(coverage[valid])][:worst]
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    expected = float((probs * (np.arange(len(probs)) + SCORE_MIN)).sum())
    weak = ", ".join(f"step {i + 1} (match {coverage[i]:.2f})" for i in order)
    return (
        f"The answer was compared with the {len(valid)} reference steps. "
        f"Least covered: {weak}. Expected score {expected:.2f}, "
        f"confidence {probs.max():.2f}."
    )


def judge_texts(logits: np.ndarray, coverage: np.ndarray) -> list[str]:
    """One "### Feedback ... ### Score: N" verdict per row of (B, 7) logits, (B, S) coverage."""
    scores = decide(logits)
    return [
        format_judgement(feedback(c, g), int(s))
        for c, g, s in zip(coverage, logits, scores, strict=True)
    ]
