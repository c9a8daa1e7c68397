"""con-j card: the Con-J judge (a tiny causal LM trained by DPO on its own contrastive judgments)
and the Bradley-Terry reward model baseline, both deployable.

"judge": input_ids (B, S) int64 + attention_mask (B, S) int64, a judge prompt ``[CLS] question
[SEP] a : answer [SEP] b : answer [SEP]`` (fields filled to fixed slots) plus the judgment so
far (MiniLM WordPiece ids, right padding, S <= 48) -> next_logits (B, 30522) float32. The judge
is trained to write ``rationale . better : value``, the better answer's value, not its label a /
b: the host loop decodes greedily until [SEP] and reads the verdict from the value quoted after
the last ``better :``: "a" or "b" is the answer whose value (last word) equals the quote, none
when it matches neither or both (``generate.py``, ``judge_format.py``).
"reward": MiniLM tokens of "question answer" (B, S) int64 + mask -> reward (B,) float32; the
answer with the higher reward wins.

Options are ``ConJConfig`` fields; training is cached under ``cache_dir("con-j")`` (about five
minutes on one thread the first time). ``edgekit eval con-j`` runs the study in experiment.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.con_j.evaluate import judge_records, summarise
from edgekit.models.con_j.generate import logits_decoder, runner_next_logits
from edgekit.models.con_j.graphs import (
    conj_graphs,
    judge_feeds,
    pair_reward_feeds,
    reward_feeds,
    rewards,
)
from edgekit.models.con_j.judge_format import pair_prompt
from edgekit.models.con_j.prefs import PrefPair
from edgekit.models.con_j.reward_model import answer_text, bt_verdicts
from edgekit.models.con_j.train import ConJConfig, Trained, train_all

EVAL_PAIRS = 64  # held-out pairs scored by evaluate / agreement


class ConJCard(ModelCard):
    """Con-J judge + Bradley-Terry reward model on fact-corpus preference pairs."""

    name: ClassVar[str] = "con-j"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "llm-as-a-judge"
    architecture: ClassVar[str] = "transformer"
    summary: ClassVar[str] = (
        "LLM-as-a-judge trained by DPO on self-generated contrastive judgments (repeated + "
        "hint-driven sampling, rationale + verdict) vs a Bradley-Terry reward model on MiniLM"
    )
    primary_metric: ClassVar[str | None] = "verdict_accuracy"
    int8_mode: ClassVar[str] = "dynamic"
    int8_budget: ClassVar[float] = 0.05
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-3, rtol=1e-3),  # logits of magnitude ~10
        "fp16": Tolerance(atol=5e-2, rtol=1e-2),
        "int8": Tolerance(atol=1.0, rtol=0.2),
    }
    # fp32 must give the same greedy judgments and rewards up to float noise
    agreement_floors: ClassVar[dict[str, float]] = {
        "next_token_top1_agreement": 0.99,
        "verdict_flip_rate": 0.02,
        "reward_max_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.config = ConJConfig.from_options(options)
        self._trained: Trained | None = None
        self._eval: list[PrefPair] | None = None

    # ---- training --------------------------------------------------------------------------
    def train(self, progress: Callable[[float, str], None] | None = None) -> Trained:
        """SFT judge, Con-J judge, ablation and reward model, from the cache or trained now."""
        if self._trained is None:
            self._trained = train_all(self.config, progress)
        return self._trained

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """ "judge" (the Con-J judge) and "reward" (MiniLM + Bradley-Terry head)."""
        trained = self.train()
        return conj_graphs(trained.conj, trained.reward_head, self.eval_pairs()[:2])

    # ---- real data ---------------------------------------------------------------------------
    def eval_pairs(self) -> list[PrefPair]:
        """EVAL_PAIRS held-out pairs: half on seen facts (new wrong values), half on unseen;
        within each half, answer a is the better one in half of the pairs (so a judge that
        always says "a" scores 0.5)."""
        if self._eval is None:
            from edgekit.models.con_j.hf_judge import balanced_pairs

            data = self.config.prefs()
            self._eval = []
            for pairs in (data.heldout_seen(), data.heldout_unseen()):
                per_side = min(
                    [EVAL_PAIRS // 4] + [sum(p.better == s for p in pairs) for s in "ab"]
                )
                self._eval += balanced_pairs(pairs, 2 * per_side) if per_side else []
            if not self._eval:
                raise InputError("con-j: the held-out split has no pair with each answer better")
        return self._eval

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four held-out judge prompts (4, S) and four reward texts (4, S)."""
        pairs = self.eval_pairs()[:: max(1, EVAL_PAIRS // 4)][:4]
        return {
            "judge": judge_feeds([pair_prompt(p) for p in pairs]),
            "reward": reward_feeds([answer_text(p.question, p.answer_a) for p in pairs]),
        }

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single training prompts (1, S) for each graph, ``limit`` at most."""
        pairs = self.config.prefs().training()[:limit]
        return {
            "judge": [judge_feeds([pair_prompt(p)]) for p in pairs],
            "reward": [reward_feeds([answer_text(p.question, p.answer_b)]) for p in pairs],
        }

    def preprocessing(self) -> dict[str, Any]:
        return {
            "tokenizer": "tokenizer.json",
            "library": "tokenizers",
            "lowercase": True,
            "judge": {
                "prompt": "[CLS] question [SEP] a : answer a [SEP] b : answer b [SEP]",
                "slots": (
                    "question filled on the right to 10 tokens, each answer on the left to 6 "
                    "(its value last), with id 1 ([unused0]), attended"
                ),
                "judgment": "rationale . better : value [SEP]; greedy, at most 12 new tokens",
                "padding": "right, id 0, attention_mask 0",
                "max_length": 48,
                "verdict": (
                    "the answer (a|b) whose value (last word) equals the text after the last "
                    "'better :'; none if it matches neither or both"
                ),
            },
            "reward": {
                "text": "question + ' ' + answer, MiniLM tokenisation with [CLS]/[SEP]",
                "verdict": "answer with the higher reward (ties: b)",
            },
        }

    def assets(self) -> dict[str, str]:
        from edgekit.models.minilm.encoder import tokenizer_path

        return {"tokenizer.json": str(tokenizer_path())}

    def labels(self) -> list[str]:
        return ["a", "b"]

    # ---- a transformers causal LM as the judge (``edgekit eval con-j --judge DIR``) ---------
    def judge(self, path: str | Path, **kwargs: Any) -> Any:
        """An ``hf_judge.HFJudge`` from the local model folder ``path`` (no downloads)."""
        from edgekit.models.con_j.hf_judge import HFJudge

        return HFJudge.from_pretrained(path, **kwargs)

    def evaluate_judge(self, judge: Any, pairs: list[PrefPair] | None = None) -> dict[str, float]:
        """Greedy verdict accuracy, invalid rate and "a" share of an LM judge on ``pairs``
        (default: EVAL_PAIRS held-out pairs, half seen / half unseen facts, each half with
        answer a better in half of its pairs)."""
        from edgekit.models.con_j.hf_judge import verdict_accuracy

        return verdict_accuracy(judge, self.eval_pairs() if pairs is None else pairs)

    # ---- measuring -------------------------------------------------------------------------
    def _judge(self, runner: Runner) -> list[dict[str, Any]]:
        return judge_records(logits_decoder(runner_next_logits(runner)), self.eval_pairs())

    def _rewards(self, runner: Runner) -> tuple[np.ndarray, np.ndarray]:
        fa, fb = pair_reward_feeds(self.eval_pairs())
        return rewards(runner, fa), rewards(runner, fb)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Verdict accuracy of the judge (greedy) and of the reward model on EVAL_PAIRS
        held-out pairs, and the judge's invalid-judgment rate; the judge's accuracy with its
        95 % bootstrap interval over pairs (``verdict_accuracy_ci_low`` / ``_high``; chance is
        0.5, the pairs are position balanced)."""
        s = summarise(self._judge(runners["judge"]))
        ra, rb = self._rewards(runners["reward"])
        pairs = self.eval_pairs()
        bt = bt_verdicts(ra, rb)
        return {
            "verdict_accuracy": s["accuracy"],
            "verdict_accuracy_ci_low": s["accuracy_ci_low"],
            "verdict_accuracy_ci_high": s["accuracy_ci_high"],
            "invalid_rate": s["invalid_rate"],
            "reward_accuracy": float(
                np.mean([v == p.better for v, p in zip(bt, pairs, strict=True)])
            ),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 next token on the golden prompts, share of changed verdicts (judge and reward
        model) on EVAL_PAIRS, largest reward difference."""
        feeds = self.golden_inputs()["judge"]
        ref_top = np.asarray(reference["judge"].run(feeds)["next_logits"]).argmax(-1)
        cand_top = np.asarray(candidate["judge"].run(feeds)["next_logits"]).argmax(-1)
        ref, cand = self._judge(reference["judge"]), self._judge(candidate["judge"])
        ref_r, cand_r = self._rewards(reference["reward"]), self._rewards(candidate["reward"])
        flips = [a["verdict"] != b["verdict"] for a, b in zip(ref, cand, strict=True)]
        flips += [a != b for a, b in zip(bt_verdicts(*ref_r), bt_verdicts(*cand_r), strict=True)]
        return {
            "next_token_top1_agreement": float((ref_top == cand_top).mean()),
            "verdict_flip_rate": float(np.mean(flips)),
            "reward_max_abs_error": float(
                max(np.abs(ref_r[0] - cand_r[0]).max(), np.abs(ref_r[1] - cand_r[1]).max())
            ),
        }
