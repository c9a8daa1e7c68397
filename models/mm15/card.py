"""mm15 card: a tiny MM1.5-style vision-language model trained by the staged data-mixture recipe.

Two graphs (see graphs.py):
"image_encoder": tiles (B, T, 1, S, S) float32 in [0, 1] (overview + sub-image grid from
``MM15Config.encode``) -> image_tokens (B, N, D) float32.
"decoder_step": image_tokens (B, N, D), tokens (B, L) int64 (``[BOS] prompt [SEP] answer so
far``) -> logits (B, L, V) float32; greedy decoding loops over it (``evaluate.greedy_decode``).

Options are ``MM15Config`` fields and ``recipe`` (stages in ``Recipe.from_dict`` form); the
default recipe (mixture.DEFAULT_RECIPE: 150 + 150 + 900 steps) trains in about six minutes on
one loaded thread the first time and is cached per stage under ``cache_dir("mm15")``.
``edgekit eval mm15`` runs the data-mixture ablation and the image-splitting study.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.mm15 import vocab
from edgekit.models.mm15.evaluate import MAX_NEW, greedy_decode, skill_scores
from edgekit.models.mm15.graphs import mm15_graphs
from edgekit.models.mm15.mixture import Recipe
from edgekit.models.mm15.tasks import CATEGORIES, Example
from edgekit.models.mm15.train import MM15Config, Trained, train_recipe


@dataclass
class MM15Summary:
    """What ``edgekit train mm15`` reports: the stages run, their seconds, the last loss."""

    stages: str
    seconds: float
    cached: bool
    final_loss: float
    path: Path
    trained: Trained


EVAL_EXAMPLES = 24  # per category, for evaluate / agreement


#: options of ``edgekit eval mm15`` that are not recipe fields (experiment.study_arguments)
STUDY_OPTIONS = ("seeds", "variants")


class MM15Card(ModelCard):
    """The full-recipe model (pre-train -> continual pre-train -> SFT, image splitting on)."""

    name: ClassVar[str] = "mm15"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "visual-question-answering"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "tiny MM1.5 recipe: convolutional image encoder (3x3 convs; transformer blocks only "
        "with enc_depth > 0, none by default) + "
        "C-Abstractor + causal char decoder, image splitting (overview + sub-image grid), "
        "boxes as text for referring / grounding, staged data-mixture training (pre-train -> "
        "OCR continual pre-train -> SFT)"
    )
    primary_metric: ClassVar[str | None] = "mean_skill"
    int8_budget: ClassVar[float] = 0.1
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=5e-2, rtol=5e-2),
        "int8": Tolerance(atol=0.5, rtol=0.2),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "answer_agreement": 0.98,
        "first_logit_max_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # ``seeds`` / ``variants`` (all or headline) shape ``edgekit eval mm15``'s study only
        fields = {k: v for k, v in options.items() if k not in ("recipe", *STUDY_OPTIONS)}
        self.config = config_from_options("mm15", MM15Config, fields)
        # ``recipe``: the staged data mixture in Recipe.from_dict form (default DEFAULT_RECIPE)
        self.recipe = Recipe.from_dict(options["recipe"]) if "recipe" in options else None
        self._trained: Trained | None = None
        self._test: dict[str, list[Example]] | None = None

    # ---- training --------------------------------------------------------------------------
    def fit(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """The full-recipe model, from the per-stage cache or trained now (kept on the card)."""
        if self._trained is None:
            self._trained = train_recipe(self.config, self.recipe, progress)
        return self._trained

    def train(self, progress: Callable[[float, str], None] | None = None) -> MM15Summary:
        """Run (or load) the staged recipe and summarise it for ``edgekit train mm15``."""
        trained = self.fit(progress)
        return MM15Summary(
            stages=" -> ".join(trained.stage_seconds),
            seconds=float(sum(trained.stage_seconds.values())),
            cached=all(trained.stage_cached.values()),
            final_loss=list(trained.stage_loss.values())[-1],
            path=trained.paths[-1],
            trained=trained,
        )

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """ "image_encoder" and "decoder_step" (see the module docstring), batch dynamic."""
        ex = self.test()["ocr"][:2]
        return mm15_graphs(self.fit().model, self.config.encode([e.image for e in ex]), "read")

    # ---- real data ---------------------------------------------------------------------------
    def test(self) -> dict[str, list[Example]]:
        """EVAL_EXAMPLES held-out examples of every category."""
        if self._test is None:
            self._test = {c: self.config.examples(c, EVAL_EXAMPLES, 1) for c in CATEGORIES}
        return self._test

    def _feeds(self, examples: list[Example]) -> dict[str, Feeds]:
        tiles = self.config.encode([e.image for e in examples])
        image_tokens = self._image_tokens(tiles)
        ids = [vocab.prompt_ids(e.prompt) for e in examples]
        width = min(len(i) for i in ids)
        tokens = np.array([i[:width] for i in ids], np.int64)
        return {
            "image_encoder": {"tiles": tiles},
            "decoder_step": {"image_tokens": image_tokens, "tokens": tokens},
        }

    def _image_tokens(self, tiles: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.fit().model.encode_image(torch.from_numpy(tiles)).numpy()

    def golden_inputs(self) -> dict[str, Feeds]:
        """One held-out example of four categories (prompts cut to a common length)."""
        test = self.test()
        return self._feeds([test[c][0] for c in ("ocr", "count", "refer", "ground")])

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-example feeds drawn from the training stream's categories."""
        per = max(1, limit // len(CATEGORIES))
        examples = [e for c in CATEGORIES for e in self.config.examples(c, per, 2)][:limit]
        feeds = [self._feeds([e]) for e in examples]
        return {g: [f[g] for f in feeds] for g in ("image_encoder", "decoder_step")}

    def preprocessing(self) -> dict[str, Any]:
        c = self.config
        return {
            "image": f"({c.size}, {c.size}) grayscale float32 in [0, 1]",
            "splitting": {
                "enabled": c.split,
                "tile": c.tile,
                "max_tiles": c.max_tiles,
                "order": "overview (area-resized whole image), then grid tiles row by row",
            },
            "text": {
                "vocabulary": vocab.CHARS,
                "special": {"PAD": vocab.PAD, "BOS": vocab.BOS, "SEP": vocab.SEP, "EOS": vocab.EOS},
                "sequence": "[BOS] prompt [SEP] answer [EOS]",
            },
            "boxes": f"<box>x1,y1,x2,y2</box>, coordinates normalised to 0..{c.bins - 1}",
            "decoding": "greedy, whole sequence per step",
        }

    # ---- measuring -------------------------------------------------------------------------
    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Per-skill accuracy on EVAL_EXAMPLES held-out examples each, and their mean."""
        c = self.config
        metrics, _ = skill_scores(runners, self.test(), c.encode, c.size, c.bins)
        skills = ("ocr", "count", "refer", "ground")
        return metrics | {"mean_skill": float(np.mean([metrics[s] for s in skills]))}

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Fraction of identical greedy answers and max |first-step logit difference|."""
        same, total, err = 0, 0, 0.0
        for category, examples in self.test().items():
            steps = MAX_NEW[category]
            tiles = self.config.encode([e.image for e in examples])
            prompts = [e.prompt for e in examples]
            ref, ref_first = greedy_decode(reference, tiles, prompts, steps)
            cand, cand_first = greedy_decode(candidate, tiles, prompts, steps)
            same += sum(a == b for a, b in zip(ref, cand, strict=True))
            total += len(ref)
            err = max(err, float(np.abs(ref_first - cand_first).max()))
        return {"answer_agreement": same / total, "first_logit_max_abs_error": err}
