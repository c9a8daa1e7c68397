"""sdlg card: the small causal LM whose answers SDLG scores, as one exportable graph.

Graph "lm": input_ids (B, S) int64 + attention_mask (B, S) int64 -> logits (B, S, 30522)
float32 (full-sequence re-run, right padding; batch and sequence dynamic, S <= 48). The host
side (``SDLG`` in sdlg.py over ``CausalLM`` with ``runner_backend``) runs decoding, MiniLM
equivalence and the entropies around the graph, on torch or on any edgekit runtime.

The corpus is split by fact (``corpus.split_facts``): the equivalence threshold, SDLG's knobs
and int8 calibration inputs come from the tuning facts; ``evaluate`` scores
``eval_questions`` of the other, evaluated facts (a tier-balanced stride) with SDLG,
10-sample semantic entropy and predictive entropy and returns each one's AUROC for predicting
an incorrect answer; ``experiment`` runs the full study (``edgekit eval sdlg``).
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.models.sdlg.corpus import Fact, build_facts, split_facts
from edgekit.models.sdlg.lm import LMConfig
from edgekit.models.tinylm.causal import CausalLM, pad, runner_backend
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.models.tinylm.tokens import EOS_ID, VOCAB_SIZE, encode, prompt_ids

GRAPH = "lm"
GOLDEN = (
    ("where does anna live?", "anna lives in"),
    ("what is the job of ben?", "a"),
    ("what pet does carl have?", ""),
    ("which colour does dora like?", "dora likes"),
)


def _feeds(pairs: list[tuple[str, str]]) -> Feeds:
    ids, mask = pad([prompt_ids(q) + encode(a) for q, a in pairs])
    return {"input_ids": ids, "attention_mask": mask}


class SDLGCard(ModelCard):
    """Tiny causal LM (MiniLM WordPiece vocabulary) + SDLG uncertainty on its answers."""

    name: ClassVar[str] = "sdlg"
    tier: ClassVar[str] = "edge"
    task: ClassVar[str] = "answer-uncertainty"
    summary: ClassVar[str] = (
        "SDLG uncertainty of a small QA causal LM: ranked token substitutions, MiniLM/NLI "
        "equivalence, weighted semantic entropy vs sampling SE and predictive entropy"
    )
    architecture: ClassVar[str] = "transformer"
    primary_metric: ClassVar[str | None] = "sdlg_auroc"
    int8_mode: ClassVar[str] = "dynamic"
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-3, rtol=1e-3),  # logits of magnitude ~10
        "fp16": Tolerance(atol=5e-2, rtol=1e-2),
        "int8": Tolerance(atol=1.0, rtol=0.2),
    }
    # Sized for fp32 (the covered target): decoding is discrete, so an fp32 graph must give
    # the same answers and the same scores up to float noise.
    agreement_floors: ClassVar[dict[str, float]] = {
        "next_token_top1_agreement": 0.99,
        "answer_flip_rate": 0.02,
        "sdlg_entropy_max_error": 1e-2,
    }
    eval_questions: ClassVar[int] = 16

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._lm: TinyCausalLM | None = None
        self._semantic: Any = None
        self._results: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ---- training --------------------------------------------------------------------------
    def lm_config(self) -> LMConfig:
        return config_from_options("sdlg", LMConfig, self.options)

    def train(self, progress: Callable[[float, str], None] | None = None) -> TinyCausalLM:
        """Train (a few minutes on one thread) or load the cached LM."""
        if self._lm is None:
            from edgekit.models.sdlg.lm import train_cached

            self._lm = train_cached(self.lm_config(), progress)[0]
        return self._lm

    def semantic(self) -> Any:
        """The MiniLM cosine equivalence model at the threshold calibrated on the tuning
        facts (cached)."""
        if self._semantic is None:
            from edgekit.models.sdlg.semantic import cosine_equivalence

            self._semantic = cosine_equivalence(self.tuning_facts())
        return self._semantic

    def _split(self) -> tuple[list[Fact], list[Fact]]:
        return split_facts(build_facts(self.lm_config().people, self.lm_config().seed))

    def tuning_facts(self) -> list[Fact]:
        """The facts everything is tuned on (threshold, knobs, int8 calibration), never
        evaluated."""
        return self._split()[0]

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "lm": ids/mask (B, S) int64 -> logits (B, S, 30522) float32."""
        feeds = _feeds(list(GOLDEN[:2]))
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                name=GRAPH,
                module=self.train(),
                example_inputs={k: torch.from_numpy(v) for k, v in feeds.items()},
                output_names=["logits"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Four corpus questions with partial answers, right-padded: ids/mask (4, S) int64."""
        return {GRAPH: _feeds(list(GOLDEN))}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-question prompts (1, S) of the tuning facts (never an evaluated one),
        ``limit`` at most."""
        return {GRAPH: [_feeds([(f.question(1), "")]) for f in self.tuning_facts()[:limit]]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "tokenizer": "tokenizer.json",
            "library": "tokenizers",
            "lowercase": True,
            "format": "[CLS] question [SEP] answer [SEP]; generation continues after the first "
            "[SEP] and stops at the next",
            "eos_id": EOS_ID,
            "vocab_size": VOCAB_SIZE,
            "max_length": self.lm_config().max_len,
            "padding": "right, id 0, attention_mask 0; read the logits at each row's last real "
            "token",
        }

    def assets(self) -> dict[str, str]:
        from edgekit.models.minilm.encoder import tokenizer_path

        return {"tokenizer.json": str(tokenizer_path())}

    # ---- measuring -------------------------------------------------------------------------
    def eval_facts(self) -> list[Fact]:
        """``eval_questions`` of the evaluated facts (disjoint from ``tuning_facts``) taken at
        an even stride (every tier represented)."""
        facts = self._split()[1]
        stride = max(1, len(facts) // self.eval_questions)
        return facts[::stride][: self.eval_questions]

    def _study(self, runner: Runner) -> dict[str, Any]:
        """The study on ``eval_facts`` through ``runner``, remembered per runner object."""
        with contextlib.suppress(TypeError):
            if runner in self._results:
                return self._results[runner]
        from edgekit.models.sdlg.study import run_study

        lm = CausalLM(runner_backend(runner), self.lm_config().max_len)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # MiniLM and torch runners: 2-3x faster than 2 on shared CPUs
        try:
            study = run_study(lm, self.semantic(), self.eval_facts())
        finally:
            torch.set_num_threads(threads)
        with contextlib.suppress(TypeError):
            self._results[runner] = study
        return study

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """AUROC (incorrect answer = positive) of SDLG, sampling SE and predictive entropy;
        answer accuracy; mean LM forward passes per question of SDLG and of sampling; 95 %
        bootstrap intervals over the questions of each AUROC and of SDLG minus each baseline
        (``*_ci_low`` / ``*_ci_high``, ``study.auroc_intervals``)."""
        s = self._study(runners[GRAPH])["summary"]
        keys = (
            "sdlg_auroc",
            "sampling_se_auroc",
            "predictive_entropy_auroc",
            "accuracy",
            "sdlg_rows_mean",
            "sampling_rows_mean",
        )
        return {k: float(s[k]) for k in keys} | {
            k: float(v) for k, v in s.items() if k.endswith(("_ci_low", "_ci_high"))
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Candidate vs reference: top-1 next token on the golden prompts, share of evaluation
        questions whose answer changed, largest SDLG entropy difference."""
        feeds = self.golden_inputs()[GRAPH]
        last = feeds["attention_mask"].sum(axis=1) - 1
        rows = np.arange(len(last))
        ref_top = np.asarray(reference[GRAPH].run(feeds)["logits"])[rows, last].argmax(-1)
        cand_top = np.asarray(candidate[GRAPH].run(feeds)["logits"])[rows, last].argmax(-1)
        ref, cand = self._study(reference[GRAPH]), self._study(candidate[GRAPH])
        pairs = list(zip(ref["records"], cand["records"], strict=True))
        return {
            "next_token_top1_agreement": float((ref_top == cand_top).mean()),
            "answer_flip_rate": float(np.mean([a["answer"] != b["answer"] for a, b in pairs])),
            "sdlg_entropy_max_error": float(max(abs(a["sdlg"] - b["sdlg"]) for a, b in pairs)),
        }


def report_json(report: dict[str, Any]) -> str:
    """``report`` as indented JSON (NaN written as null)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not np.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(report), indent=1)
