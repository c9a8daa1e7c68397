"""sdlg card: the small causal LM whose answers SDLG scores, as one exportable graph.

Graph "lm": input_ids (B, S) int64 + attention_mask (B, S) int64 -> logits (B, S, 30522)
float32 (full-sequence re-run, right padding; batch and sequence dynamic, S <= 48). The host
side (``SDLG`` in sdlg.py over ``CausalLM`` with ``runner_backend``) runs decoding, MiniLM
equivalence and the entropies around the graph, on torch or on any edgekit runtime.

Option ``lm=FOLDER`` (local_lm.py) puts a Hugging Face causal LM with its own tokenizer in the
in-repo LM's place: the graph is its logits (B, S, V) with its own vocabulary size V, answers
are decoded to text at the equivalence model's boundary (text_equivalence.py), and ``nli=FOLDER``
makes a local NLI model the equivalence model. Without these options nothing changes.

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
from edgekit.models.sdlg.local_lm import LocalCausalLM, ModelOptions, source_key, split_options
from edgekit.models.sdlg.vocab import WORDPIECE, AnswerVocabulary
from edgekit.models.tinylm.causal import CausalLM, pad, runner_backend
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.models.tinylm.tokens import EOS_ID, VOCAB_SIZE

GRAPH = "lm"
GOLDEN = (
    ("where does anna live?", "anna lives in"),
    ("what is the job of ben?", "a"),
    ("what pet does carl have?", ""),
    ("which colour does dora like?", "dora likes"),
)


def _feeds(pairs: list[tuple[str, str]], vocab: AnswerVocabulary = WORDPIECE) -> Feeds:
    """Prompts with partial answers, right-padded: ids/mask (B, S) int64."""
    ids, mask = pad([vocab.feed_ids(q, a) for q, a in pairs])
    return {"input_ids": ids, "attention_mask": mask}


class SDLGCard(ModelCard):
    """Tiny causal LM (MiniLM WordPiece vocabulary), or a local Hugging Face causal LM
    (option ``lm``), + SDLG uncertainty on its answers."""

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
        self._local: LocalCausalLM | None = None
        self._nli: Any = None
        self._semantic: Any = None
        self._results: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ---- training --------------------------------------------------------------------------
    def model_options(self) -> ModelOptions:
        """Options ``lm``, ``nli``, ``prompt``, ``stop`` (local_lm.py); InputError for an
        unknown option or one that does nothing in this combination."""
        return split_options(self.options)[0]

    def lm_config(self) -> LMConfig:
        return config_from_options("sdlg", LMConfig, split_options(self.options)[1])

    def local_lm(self) -> LocalCausalLM | None:
        """The causal LM of option ``lm`` (checked and its tokenizer loaded once), None for
        the in-repo LM; InputError for a folder that does not hold one."""
        model = self.model_options()
        if not model.lm:
            return None
        if self._local is None:
            cap = self.lm_config().max_len if "max_len" in self.options else 0
            self._local = LocalCausalLM(model.lm, model.prompt, model.stop, cap)
        return self._local

    def vocabulary(self) -> AnswerVocabulary:
        """The LM's vocabulary: MiniLM WordPiece, or the tokenizer of option ``lm``."""
        local = self.local_lm()
        return WORDPIECE if local is None else local.vocab

    def max_len(self) -> int:
        """The longest sequence the LM takes: ``LMConfig.max_len``, or option lm's position
        table (capped by the option ``max_len`` when given)."""
        local = self.local_lm()
        return self.lm_config().max_len if local is None else local.max_len

    def lm_key(self) -> str:
        """The LM's part of the tuning cache key: ``LMConfig.key()`` for the default, else
        ``local_lm.source_key`` (the LM folder's and the NLI folder's fingerprints)."""
        model, local = self.model_options(), self.local_lm()
        if local is None and not model.nli:
            return self.lm_config().key()
        nli = self._nli_reader().fingerprint if model.nli else ""
        return source_key(model, self.lm_config().key(), local, nli)

    def train(self, progress: Callable[[float, str], None] | None = None) -> TinyCausalLM | None:
        """Train (a few minutes on one thread) or load the cached LM; None with option
        ``lm`` (a pretrained model: nothing to train)."""
        if self.local_lm() is not None:
            return None
        if self._lm is None:
            from edgekit.models.sdlg.lm import train_cached

            self._lm = train_cached(self.lm_config(), progress)[0]
        return self._lm

    def lm_module(self) -> torch.nn.Module:
        """The LM as an (ids, mask) -> logits module: the trained tiny LM or option lm's."""
        local = self.local_lm()
        return self.train() if local is None else local.module

    def _nli_reader(self) -> Any:
        """The NLI model of option ``nli``, loaded once, with its folder's fingerprint."""
        if self._nli is None:
            from edgekit.models.sdlg.text_equivalence import NLIReader

            self._nli = NLIReader(self.model_options().nli)
        return self._nli

    def semantic(self) -> Any:
        """The equivalence model (cached): the MiniLM cosine at the threshold calibrated on
        the tuning facts, or the NLI model of option ``nli``; through text
        (text_equivalence.py) for option ``lm`` or ``nli``."""
        if self._semantic is None:
            from edgekit.models.sdlg.semantic import cosine_equivalence

            model = self.model_options()
            if not model.lm and not model.nli:
                self._semantic = cosine_equivalence(self.tuning_facts())
            else:
                from edgekit.models.sdlg.text_equivalence import CosineReader, TextEquivalence

                reader = (
                    self._nli_reader()
                    if model.nli
                    else CosineReader(cosine_equivalence(self.tuning_facts()))
                )
                self._semantic = TextEquivalence(reader, self.vocabulary())
        return self._semantic

    def _split(self) -> tuple[list[Fact], list[Fact]]:
        return split_facts(build_facts(self.lm_config().people, self.lm_config().seed))

    def tuning_facts(self) -> list[Fact]:
        """The facts everything is tuned on (threshold, knobs, int8 calibration), never
        evaluated."""
        return self._split()[0]

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "lm": ids/mask (B, S) int64 -> logits (B, S, V) float32, V = 30522 (the
        in-repo LM) or option lm's vocabulary size."""
        feeds = _feeds(list(GOLDEN[:2]), self.vocabulary())
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                name=GRAPH,
                module=self.lm_module(),
                example_inputs={k: torch.from_numpy(v) for k, v in feeds.items()},
                output_names=["logits"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes},
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Four corpus questions with partial answers, right-padded: ids/mask (4, S) int64."""
        return {GRAPH: _feeds(list(GOLDEN), self.vocabulary())}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-question prompts (1, S) of the tuning facts (never an evaluated one),
        ``limit`` at most."""
        vocab = self.vocabulary()
        return {GRAPH: [_feeds([(f.question(1), "")], vocab) for f in self.tuning_facts()[:limit]]}

    def preprocessing(self) -> dict[str, Any]:
        local = self.local_lm()
        if local is not None:
            vocab = local.vocab
            return {
                "tokenizer": "tokenizer.json",
                "library": "tokenizers",
                "format": f"prompt {vocab.prompt!r} with the question in it, special tokens as "
                "the tokenizer adds them; generation continues after it and stops at a stop id",
                "eos_id": local.tokenizer.eos_token_id,
                "stop_ids": sorted(vocab.stop_ids),
                "vocab_size": local.vocab_size,
                "max_length": local.max_len,
                "padding": "right, id 0, attention_mask 0; read the logits at each row's last "
                "real token",
            }
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
        local = self.local_lm()
        if local is not None:
            from edgekit.cache import cache_dir

            spare = cache_dir("sdlg") / f"tokenizer-{local.fingerprint}.json"
            return {"tokenizer.json": str(local.tokenizer_file(spare))}
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

        lm = CausalLM(runner_backend(runner), self.max_len())
        semantic, vocab = self.semantic(), self.vocabulary()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # MiniLM and torch runners: 2-3x faster than 2 on shared CPUs
        try:
            study = run_study(lm, semantic, self.eval_facts(), vocab=vocab)
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
