"""Fine-tuning the MMIE-Score judge on in-repo labelled items, cached under ``cache_dir("mmie")``.

The MiniLM text encoder stays frozen (its embeddings are computed once and cached); the image
encoder and the scoring head are trained together with cross-entropy on the 0..6 score plus
a small expected-score squared error (neighbouring scores are close, not unrelated classes).
The epoch with the best validation exact agreement is kept. Weights are cached keyed by the
config and ``RECIPE_VERSION``; a judge shipped in the package's ``weights/`` folder is found first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from edgekit.errors import InputError
from edgekit.models.mmie import rubrics
from edgekit.models.mmie.batch import Batch, encode_items, item_texts
from edgekit.models.mmie.data import Item, make_items
from edgekit.models.mmie.embed import EMBEDDERS, embed_texts
from edgekit.models.mmie.scorer import ImageEncoder, ScorerHead

Progress = Callable[[float, str], None]
SPLITS = ("train", "val", "test")
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class MMIEConfig:
    """Data sizes, embedder and training recipe (defaults: about 1 CPU-minute, one thread)."""

    train_items: int = 2400
    val_items: int = 450
    test_items: int = 900
    seed: int = 0
    embedder: str = "minilm"
    epochs: int = 16
    batch: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    mse_weight: float = 0.1

    def __post_init__(self) -> None:
        if self.embedder not in EMBEDDERS:
            raise InputError(f"embedder must be one of {EMBEDDERS}, got {self.embedder!r}")
        for name in ("train_items", "val_items", "test_items", "epochs", "batch"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise InputError(f"lr must be > 0, got {self.lr}")

    def items(self) -> dict[str, list[Item]]:
        """Train and validation items (training handwriting), test items (held-out handwriting)."""
        return {
            "train": make_items(self.train_items, self.seed),
            "val": make_items(self.val_items, self.seed + 1),
            "test": make_items(self.test_items, self.seed + 2, held_out=True),
        }

    def batches(self, progress: Progress | None = None) -> tuple[dict[str, Batch], dict]:
        """(padded Batch per split, the items per split), texts embedded with ``embedder``."""
        items = self.items()
        texts = [t for split in SPLITS for t in item_texts(items[split])]
        vectors = embed_texts(texts, self.embedder, progress)
        return {s: encode_items(items[s], vectors) for s in SPLITS}, items


@dataclass
class Trained:
    """The fine-tuned judge (eval mode), its validation curve and training seconds."""

    image_encoder: ImageEncoder
    head: ScorerHead
    val_exact: list[float]
    best_epoch: int
    seconds: float
    cached: bool
    path: Path | None = None


def _key(config: MMIEConfig) -> str:
    """``recipe_key`` over "mmie-judge", ``RECIPE_VERSION`` and the config."""
    from edgekit.cache import recipe_key

    return recipe_key("mmie-judge", RECIPE_VERSION, config)


def cache_path(config: MMIEConfig) -> Path:
    """Where the fine-tuned judge of ``config`` is cached."""
    from edgekit.cache import cache_dir

    return cache_dir("mmie") / f"judge-{_key(config)}.pt"


def _tensors(batch: Batch) -> dict[str, torch.Tensor]:
    t = {
        "query": batch.query,
        "ref_text": batch.reference.text,
        "ref_images": batch.reference.images,
        "ref_mask": batch.reference.mask,
        "ref_has_image": batch.reference.has_image,
        "ans_text": batch.answer.text,
        "ans_images": batch.answer.images,
        "ans_mask": batch.answer.mask,
        "ans_has_image": batch.answer.has_image,
        "category": batch.category,
        "label": batch.label,
    }
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in t.items()}


def forward(
    encoder: ImageEncoder, head: ScorerHead, t: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, 7), coverage (B, S)) from a dict of batch tensors (``_tensors`` names)."""
    b, s = t["ref_mask"].shape

    def embed(images: torch.Tensor) -> torch.Tensor:
        return encoder(images.reshape(b * s, 1, *images.shape[-2:])).reshape(b, s, -1)

    return head(
        t["query"],
        t["ref_text"],
        embed(t["ref_images"]),
        t["ref_mask"],
        t["ref_has_image"],
        t["ans_text"],
        embed(t["ans_images"]),
        t["ans_mask"],
        t["ans_has_image"],
        t["category"],
    )


def loss_fn(logits: torch.Tensor, label: torch.Tensor, mse_weight: float) -> torch.Tensor:
    """Cross-entropy over scores 0..6 + ``mse_weight`` * (expected score - label)^2."""
    scores = torch.arange(logits.shape[1], dtype=logits.dtype) + rubrics.SCORE_MIN
    expected = (torch.softmax(logits, -1) * scores).sum(-1)
    ce = F.cross_entropy(logits, label - rubrics.SCORE_MIN)
    return ce + mse_weight * torch.mean((expected - label.to(logits.dtype)) ** 2)


def exact_agreement(encoder: ImageEncoder, head: ScorerHead, batch: Batch) -> float:
    """Fraction of ``batch`` whose argmax score equals the label."""
    with torch.no_grad():
        t = _tensors(batch)
        logits, _ = forward(encoder, head, t)
    return float((logits.argmax(-1) + rubrics.SCORE_MIN == t["label"]).float().mean())


def fit(config: MMIEConfig, train: Batch, val: Batch, progress: Progress | None = None) -> Trained:
    """Train image encoder + head with AdamW; keep the best validation epoch."""
    torch.manual_seed(config.seed)
    encoder, head = ImageEncoder(), ScorerHead()
    params = [*encoder.parameters(), *head.parameters()]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    steps = config.epochs * max(1, -(-len(train) // config.batch))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, config.lr, total_steps=steps)
    gen = torch.Generator().manual_seed(config.seed)
    tensors = _tensors(train)
    started = time.perf_counter()
    curve, best, best_state = [], -1.0, None
    for epoch in range(config.epochs):
        encoder.train()
        head.train()
        for idx in torch.randperm(len(train), generator=gen).split(config.batch):
            logits, _ = forward(encoder, head, {k: v[idx] for k, v in tensors.items()})
            loss = loss_fn(logits, tensors["label"][idx], config.mse_weight)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        encoder.eval()
        head.eval()
        curve.append(exact_agreement(encoder, head, val))
        if curve[-1] > best:
            best = curve[-1]
            best_state = (
                {k: v.clone() for k, v in encoder.state_dict().items()},
                {k: v.clone() for k, v in head.state_dict().items()},
            )
        if progress:
            progress((epoch + 1) / config.epochs, f"epoch {epoch + 1} val exact {curve[-1]:.3f}")
    assert best_state is not None
    encoder.load_state_dict(best_state[0])
    head.load_state_dict(best_state[1])
    seconds = time.perf_counter() - started
    return Trained(encoder.eval(), head.eval(), curve, int(np.argmax(curve)), seconds, False)


def _blob(trained: Trained) -> dict[str, Any]:
    return {
        "image_encoder": trained.image_encoder.state_dict(),
        "head": trained.head.state_dict(),
        "val_exact": trained.val_exact,
        "best_epoch": trained.best_epoch,
        "seconds": trained.seconds,
    }


def _decode(blob: dict[str, Any], path: Path) -> Trained:
    encoder, head = ImageEncoder(), ScorerHead()
    encoder.load_state_dict(blob["image_encoder"])
    head.load_state_dict(blob["head"])
    curve = [float(v) for v in blob["val_exact"]]
    return Trained(
        encoder.eval(),
        head.eval(),
        curve,
        int(blob["best_epoch"]),
        float(blob["seconds"]),
        True,
        path,
    )


def train_judge(
    config: MMIEConfig | None = None,
    progress: Progress | None = None,
    batches: dict[str, Batch] | None = None,
) -> Trained:
    """The fine-tuned judge of ``config`` from the cache, or trained now and cached.

    ``batches`` (from ``config.batches()``) saves re-embedding when the caller has them."""
    from edgekit.weights_cache import load_or_train

    config = config or MMIEConfig()
    path = cache_path(config)

    def train() -> Trained:
        data = batches if batches is not None else config.batches(progress)[0]
        trained = fit(config, data["train"], data["val"], progress)
        trained.path = path
        return trained

    return load_or_train(path, Path(__file__).parent / "weights", train, load=_decode, save=_blob)
