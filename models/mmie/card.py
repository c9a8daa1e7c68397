"""mmie-score card: the MMIE-Score judge fine-tuned on in-repo labelled interleaved answers.

Two graphs (``graphs.py``): "image_encoder" images (N, 1, 16, 16) float32 -> embedding (N, 64),
and "scorer" (query, reference and answer step embeddings, masks, category) -> logits (B, 7)
over the scores 0..6 and coverage (B, 6). Text steps are embedded by the frozen pretrained
all-MiniLM-L6-v2 before the graphs (the ``minilm`` card's graph on a device). The judge writes
"### Feedback ... ### Score: N"; ``parser.parse_score`` reads it back and
``aggregate.aggregate`` gives MMIE-Score per category and overall.

Options are ``MMIEConfig`` fields; the judge is cached under ``cache_dir("mmie")`` (about one
CPU-minute, three minutes of wall time on a busy 2-core machine, the first time).
``edgekit eval mmie-score`` runs experiment.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.mmie.batch import MAX_STEPS, Batch
from edgekit.models.mmie.judge import (
    IMAGE_GRAPH,
    SCORER_GRAPH,
    decide,
    embed_images,
    judge_texts,
    score_batch,
    scorer_feeds,
)
from edgekit.models.mmie.metrics import agreement_metrics
from edgekit.models.mmie.parser import parse_many
from edgekit.models.mmie.train import MMIEConfig, Trained, train_judge

EVAL_ITEMS = 300  # held-out items scored by evaluate / agreement


class MMIEScoreCard(ModelCard):
    """MMIE-Score judge: small image encoder + step-aligned scoring head over MiniLM vectors."""

    name: ClassVar[str] = "mmie-score"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "interleaved-answer-scoring"
    architecture: ClassVar[str] = "mlp"
    summary: ClassVar[str] = (
        "MMIE-Score judge of interleaved image-text answers: CNN image encoder + step-aligned "
        "scoring head over frozen MiniLM embeddings, fine-tuned on rubric-labelled answers; "
        "writes '### Score: N' (0-6), aggregated per category"
    )
    primary_metric: ClassVar[str | None] = "exact"
    int8_budget: ClassVar[float] = 0.05
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.5, rtol=0.2),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "score_flip_rate": 0.02,
        "max_logit_abs_error": 0.05,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.config = config_from_options("mmie-score", MMIEConfig, options)
        self._trained: Trained | None = None
        self._batches: dict[str, Batch] | None = None

    # ---- training --------------------------------------------------------------------------
    def batches(self) -> dict[str, Batch]:
        """Padded train / val / test batches (texts embedded once, cached on disk)."""
        if self._batches is None:
            self._batches, _ = self.config.batches()
        return self._batches

    def train(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """The fine-tuned judge, from the cache or trained now."""
        if self._trained is None:
            self._trained = train_judge(self.config, progress, self.batches())
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """ "image_encoder" and "scorer" (see the module docstring), batch axis dynamic."""
        from edgekit.models.mmie.graphs import judge_graphs

        trained = self.train()
        return judge_graphs(trained.image_encoder, trained.head, self.test().take(np.arange(2)))

    # ---- real data ---------------------------------------------------------------------------
    def test(self) -> Batch:
        """The first EVAL_ITEMS held-out items."""
        test = self.batches()["test"]
        return test.take(np.arange(min(EVAL_ITEMS, len(test))))

    def _feeds(self, batch: Batch) -> dict[str, Feeds]:
        from edgekit.models.mmie.graphs import module_runners

        trained = self.train()
        runner = module_runners(trained.image_encoder, trained.head)[IMAGE_GRAPH]
        images = batch.answer.images.reshape(-1, 1, *batch.answer.images.shape[-2:])
        images = images[batch.answer.has_image.reshape(-1) > 0]
        ref = embed_images(runner, batch.reference.images)
        ans = embed_images(runner, batch.answer.images)
        return {"images": {"images": images}, "scorer": scorer_feeds(batch, ref, ans)}

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four held-out items: their answer images and their scorer feeds."""
        feeds = self._feeds(self.test().take(np.arange(4)))
        return {IMAGE_GRAPH: feeds["images"], SCORER_GRAPH: feeds["scorer"]}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-item feeds from the training items."""
        train = self.batches()["train"]
        feeds = self._feeds(train.take(np.arange(min(limit, len(train)))))
        images, scorer = feeds["images"]["images"], feeds["scorer"]
        return {
            IMAGE_GRAPH: [{"images": images[i : i + 1]} for i in range(min(limit, len(images)))],
            SCORER_GRAPH: [
                {k: v[i : i + 1] for k, v in scorer.items()} for i in range(len(scorer["query"]))
            ],
        }

    def preprocessing(self) -> dict[str, Any]:
        return {
            "text": "each query and step text -> all-MiniLM-L6-v2 embedding (384, unit norm)",
            "images": "step images 16x16 grayscale in [0, 1]; missing images are zeros, "
            "has_image = 0",
            "padding": f"reference and answer padded to {MAX_STEPS} steps, mask = 0 on padding",
            "category": {"situational": 0, "project": 1, "reasoning": 2},
            "output": "score = argmax(logits) in 0..6, written as '### Score: N'",
        }

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Agreement of the judge's parsed "### Score" with the labels of EVAL_ITEMS items."""
        test = self.test()
        logits, coverage = score_batch(runners, test)
        scores = parse_many(judge_texts(logits, coverage))
        m = agreement_metrics(scores, test.label.tolist())
        return {k: m[k] for k in ("exact", "within1", "mae", "spearman")}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Rate of items whose score changes, and max |logit difference|, on EVAL_ITEMS items."""
        test = self.test()
        ref, _ = score_batch(reference, test)
        cand, _ = score_batch(candidate, test)
        return {
            "score_flip_rate": float((decide(ref) != decide(cand)).mean()),
            "max_logit_abs_error": float(np.abs(ref - cand).max()),
        }
