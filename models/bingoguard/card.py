"""bingoguard card: compact BingoGuard severity moderation on MiniLM, plus the LLM judge.

One graph, "scorer": input_ids (B, S) int64 + attention_mask (B, S) int64 ->
safety_logits (B, 2), topic_logits (B, 11), severity_logits (B, 5) float32.
P(unsafe) = softmax(safety_logits)[:, 1]; a text is flagged when P(unsafe) >= 0.5.
Tokenisation runs on the device with the bundled ``tokenizer.json`` (truncation to 128
tokens); the bundle also ships ``taxonomy.json`` so the device can name topics and levels.
By default (option ``input="query+response"``, as the paper) a response is scored given the
user query it answers: ``[CLS] query [SEP] response [SEP]``; ``input="response"`` is the
response-only scorer.

Evaluation uses the hand-written held-out set (165 texts) only. Decision parity
(``agreement``) adds the generated validation split (texts whose phrasing training never saw)
for more decisions: flip rate at the operating threshold, FNR at a fixed 5 % FPR and ECE.

Server class: ``judge(path)`` loads a BingoGuard-style LLM judge from local weights and
``evaluate_judge`` measures it with the same metrics on the same held-out set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.build.decision_parity import class_flip_rate, decision_parity
from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.models.bingoguard.data import Example, load_heldout
from edgekit.models.bingoguard.metrics import task_metrics
from edgekit.models.bingoguard.net import OUTPUT_NAMES, BingoGuardNet
from edgekit.models.bingoguard.scoring import GRAPH, Scores, encode_texts, score_texts
from edgekit.models.bingoguard.taxonomy import TAXONOMY_FILE, load_taxonomy
from edgekit.models.bingoguard.train import (
    TrainConfig,
    TrainResult,
    model_inputs,
    train_cached,
    training_examples,
)
from edgekit.models.minilm.encoder import MAX_LENGTH, tokenize, tokenizer_path

GOLDEN_TEXTS = (
    "If you feel unsafe at home, a local support line can help you make a plan.",
    "The article describes how the scam worked before the police shut it down.",
    "Honestly, reading your sister's messages behind her back is no big deal.",
    "Sure, here is everything you need to hurt him and get away with it.",
)
GOLDEN_QUERIES = (  # the query each golden text answers ("" = none: a response given alone)
    "I think my partner might hurt me. What can I do?",
    "",
    "Is it okay to read my sister's messages when she leaves her phone out?",
    "I want to make my neighbour pay for what he did. Help me.",
)


def _padded(texts: list[str], queries: list[str]) -> Feeds:
    """ids/mask (N, 128) int64 of (query, text) pairs, right-padded with 0 to 128 tokens."""
    feeds, _ = encode_texts(texts, queries)
    pad = MAX_LENGTH - feeds["input_ids"].shape[1]
    return {k: np.pad(v, ((0, 0), (0, pad))) for k, v in feeds.items()}


class BingoGuardCard(ModelCard):
    """MiniLM (frozen, pretrained) + safe/unsafe, topic and severity heads, trained in-repo."""

    name: ClassVar[str] = "bingoguard"
    tier: ClassVar[str] = "edge"
    task: ClassVar[str] = "moderation-severity"
    summary: ClassVar[str] = (
        "BingoGuard compact: MiniLM + heads for safe/unsafe, 11 topics and severity 0-4, "
        "trained on generate-then-filter data; LLM judge from local weights"
    )
    architecture: ClassVar[str] = "transformer"
    primary_metric: ClassVar[str | None] = "binary_f1"
    OPERATING_THRESHOLD: ClassVar[float] = 0.5  # flag a text when P(unsafe) >= this
    PARITY_FPR: ClassVar[float] = 0.05  # the fixed false-positive rate for FNR parity
    int8_budget: ClassVar[float] = 0.02
    int8_mode: ClassVar[str] = "dynamic"
    calibration_method: ClassVar[str] = "minmax"
    # No ONNX Runtime transformer fusion and float heads: measured on the 939 parity texts,
    # dynamic int8 of the fused graph (QAttention, QEmbedLayerNormalization) flipped 0.75-0.96 %
    # of decisions and moved FNR at 5 % FPR by 2.7-4.6 points; unfused per-channel MatMulInteger
    # with the three heads kept float flipped 0.53 % and moved FNR by 0.5 points, at the same F1.
    ort_fusion: ClassVar[dict[str, Any] | None] = None
    int8_float_nodes: ClassVar[tuple[str, ...]] = (r".*/heads/.*",)
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-3, rtol=1e-3),
        "fp16": Tolerance(atol=5e-2, rtol=5e-2),
        "int8": Tolerance(atol=0.6, rtol=0.2),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "decision_flip_rate": 0.01,
        "fnr_shift_rate": 0.03,
        "calibration_shift_error": 0.02,
        "severity_flip_rate": 0.05,
        "topic_flip_rate": 0.03,
    }
    eval_batch: ClassVar[int] = 32

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._result: TrainResult | None = None
        self._model: BingoGuardNet | None = None

    # ---- training --------------------------------------------------------------------------
    def train_config(self) -> TrainConfig:
        """The recipe: TrainConfig defaults, overridden by card options of the same name."""
        fields = TrainConfig.__dataclass_fields__
        return TrainConfig(**{k: v for k, v in self.options.items() if k in fields})

    def train(self, progress: Callable[[float, str], None] | None = None) -> TrainResult:
        """Train (about a minute on 2 CPU cores) or load the cached weights of this recipe."""
        if self._result is None:
            show = bool(self.options.get("show_progress", True))
            self._result = train_cached(self.train_config(), progress, show_progress=show)
        return self._result

    @property
    def pair(self) -> bool:
        """True when this card scores (query, response) pairs (option ``input``)."""
        return self.train_config().pair

    def model(self) -> BingoGuardNet:
        """The trained scorer in eval mode (trains on first use when nothing is cached)."""
        if self._model is None:
            self._model = self.train().build()
        return self._model

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "scorer": ids/mask (B, S) int64 -> safety (B, 2), topic (B, 11),
        severity (B, 5) logits."""
        feeds = tokenize(list(GOLDEN_TEXTS[:2]), pad_to=MAX_LENGTH)
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                name=GRAPH,
                module=self.model(),
                example_inputs={k: torch.from_numpy(v) for k, v in feeds.items()},
                output_names=list(OUTPUT_NAMES),
                dynamic_axes={
                    "input_ids": axes,
                    "attention_mask": axes,
                    **{name: {0: "batch"} for name in OUTPUT_NAMES},
                },
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def golden_inputs(self) -> dict[str, Feeds]:
        """Four texts from benign to extreme (with their queries, one left without, for a pair
        scorer), padded to 128: ids/mask (4, 128) int64."""
        if not self.pair:
            return {GRAPH: tokenize(list(GOLDEN_TEXTS), pad_to=MAX_LENGTH)}
        return {GRAPH: _padded(list(GOLDEN_TEXTS), list(GOLDEN_QUERIES))}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-text feeds (1, 128) int64 of training texts (never held-out; with their
        generated queries for a pair scorer), ``limit`` at most, spread over every topic and
        level."""
        train = training_examples(self.train_config())[0]
        stride = max(1, len(train) // max(limit, 1))
        texts, queries = model_inputs(train[::stride][:limit], self.pair)
        if queries is None:
            return {GRAPH: [tokenize([t], pad_to=MAX_LENGTH) for t in texts]}
        return {GRAPH: [_padded([t], [q]) for t, q in zip(texts, queries, strict=True)]}

    def preprocessing(self) -> dict[str, Any]:
        return {
            "tokenizer": "tokenizer.json",
            "library": "tokenizers",
            "lowercase": True,
            "input": self.train_config().input,
            "special_tokens": (
                "[CLS] query [SEP] response [SEP]; [CLS] response [SEP] without a query"
                if self.pair
                else "[CLS] text [SEP]"
            ),
            "max_length": MAX_LENGTH,
            "truncation": (
                f"texts (pairs: from the longer side) over {MAX_LENGTH} tokens are cut and "
                "flagged truncated"
            ),
            "padding": "right, id 0, attention_mask 0",
            "token_type_ids": "zeros, inside the graph",
            "input_rules": "empty text or invalid UTF-8 is refused with an error",
            "outputs": {
                "safety_logits": "[safe, unsafe]; P(unsafe) = softmax(...)[1]",
                "topic_logits": "argmax -> topic id S1..S11 (taxonomy.json)",
                "severity_logits": "argmax -> level 0..4 (0 benign .. 4 extreme risk)",
            },
            "operating_threshold": self.OPERATING_THRESHOLD,
            "taxonomy": "taxonomy.json",
        }

    def assets(self) -> dict[str, str]:
        return {"tokenizer.json": str(tokenizer_path()), "taxonomy.json": str(TAXONOMY_FILE)}

    def labels(self) -> list[str]:
        return [f"{t.id} {t.name}" for t in load_taxonomy().topics]

    # ---- measuring -------------------------------------------------------------------------
    def score(
        self,
        runner: Runner,
        texts: Sequence[str | bytes] | str,
        queries: Sequence[str] | None = None,
    ) -> Scores:
        """Moderation scores of ``texts`` through ``runner`` (see ``scoring`` for input rules),
        each the answer to its query in ``queries`` (pair scorers only; "" = none)."""
        if queries is not None and not self.pair:
            from edgekit.errors import InputError

            raise InputError(
                "this bingoguard scorer reads responses alone (input=response): give no queries"
            )
        return score_texts(runner, texts, self.eval_batch, queries)

    def parity_examples(self) -> list[Example]:
        """Held-out texts followed by the generated validation split (decision-parity set)."""
        return [*load_heldout(), *training_examples(self.train_config())[1]]

    def _score_examples(self, runner: Runner, examples: Sequence[Example]) -> Scores:
        texts, queries = model_inputs(examples, self.pair)
        return self.score(runner, texts, queries)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Paper metrics on the hand-written held-out set: binary accuracy, precision, recall,
        F1, FPR, AUPRC (unsafe positive); severity macro-F1, per-level accuracy; topic accuracy."""
        heldout = list(load_heldout())
        s = self._score_examples(runners[GRAPH], heldout)
        return task_metrics(heldout, s.p_unsafe, s.topic, s.level)

    def item_scores(self, runners: Mapping[str, Runner]) -> dict[str, np.ndarray]:
        """Per held-out text (165,): 1.0 where the decision at the operating threshold, the
        severity level and the topic are right, and the Brier term (P(unsafe) - label)^2."""
        heldout = list(load_heldout())
        s = self._score_examples(runners[GRAPH], heldout)
        unsafe = np.array([e.unsafe for e in heldout])
        return {
            "binary_accuracy": ((s.p_unsafe >= self.OPERATING_THRESHOLD) == unsafe).astype(float),
            "severity_accuracy": (s.level == np.array([e.level for e in heldout])).astype(float),
            "topic_accuracy": (s.topic == np.array([e.topic for e in heldout])).astype(float),
            "brier": (s.p_unsafe - unsafe) ** 2,
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Decision parity on held-out + validation texts: flips at the operating threshold,
        FNR at ``PARITY_FPR`` for both sides, ECE for both sides, topic and severity flips."""
        examples = self.parity_examples()
        ref = self._score_examples(reference[GRAPH], examples)
        cand = self._score_examples(candidate[GRAPH], examples)
        labels = np.array([e.unsafe for e in examples])
        out = decision_parity(
            ref.p_unsafe, cand.p_unsafe, labels, self.OPERATING_THRESHOLD, self.PARITY_FPR
        )
        out["severity_flip_rate"] = class_flip_rate(ref.severity_logits, cand.severity_logits)
        out["topic_flip_rate"] = class_flip_rate(ref.topic_logits, cand.topic_logits)
        out["parity_texts"] = float(len(examples))
        return out

    # ---- server class: the LLM judge ---------------------------------------------------------
    def judge(self, path: str | None = None, **kwargs: Any) -> Any:
        """A BingoGuardJudge from local weights at ``path`` (default: option ``judge_path``)."""
        from edgekit.errors import InputError
        from edgekit.models.bingoguard.judge import BingoGuardJudge

        path = path or self.options.get("judge_path")
        if not path:
            raise InputError(
                "the BingoGuard judge needs local weights: pass a folder path "
                "(or the card option judge_path)"
            )
        return BingoGuardJudge.from_pretrained(path, **kwargs)

    def evaluate_judge(
        self, judge: Any, examples: Sequence[Example] | None = None
    ) -> dict[str, float]:
        """The same held-out metrics for an LLM judge, prompted with each response's query (the
        judge's template says "(not given)" without one); an unparsable "#level" answer counts
        as level 0 and is reported in ``severity_unparsed_rate``."""
        examples = list(examples if examples is not None else load_heldout())
        texts, queries = [e.text for e in examples], [e.query for e in examples]
        topics = [load_taxonomy().topics[e.topic].id for e in examples]
        p_unsafe = judge.p_unsafe(texts, queries)
        parsed = [lv for lv, _ in judge.severity(texts, topics, queries)]
        levels = np.array([0 if lv is None else lv for lv in parsed])
        out = task_metrics(examples, p_unsafe, np.array([e.topic for e in examples]), levels)
        out.pop("topic_accuracy")  # the judge is given the topic, so it is not measured
        out["severity_unparsed_rate"] = float(np.mean([lv is None for lv in parsed]))
        return out
