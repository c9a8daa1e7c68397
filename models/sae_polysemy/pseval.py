"""PS-Eval: do an SAE's features tell the meanings of a polysemous word apart?

For each WiC pair (target word w, contexts c1, c2, label same/different meaning):

1. prompt_i = "{c_i} The {w} means" (the paper's template);
2. the hooked activation (MiniLM, or the causal LM of the card option ``lm``) at the target
   word of "The {w}" in prompt_i;
3. its SAE encoding, and the index of the maximally activated feature;
4. predicted "same meaning" when both contexts share that feature.

Target token: when w splits into several WordPieces, PS-Eval reads the **last** piece. In a
bidirectional encoder every piece attends to the whole word, and the last piece is the token
right before "means": in the tokenised prompt [CLS] ... the w_1 .. w_m means [SEP] it sits at
index (real length - 3). The device scorer finds it the same way, with no offsets
(``target_position`` checks that the word really is there). In a causal LM (lm.py) the target
is the same: the last of the tokens whose character span overlaps the word's in the prompt
(``word_tokens``; a piece carrying the leading space, GPT-2's "Ġbank", counts), the one token
that has read the whole word. A token where no feature fires gets feature -1, which never
counts as shared.

Confusion (the reference's definition), label 1 = same meaning is the positive class:
same & same feature = TP; same & different = FN; different & same = FP; different & different
= TN. Metrics: accuracy, precision, recall, specificity = TN / (TN + FP), F1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from edgekit.errors import InputError
from edgekit.models.sae_polysemy.activations import HookPoint, token_activations
from edgekit.models.sae_polysemy.lm import CausalLM, language_model, overlapping_tokens
from edgekit.models.sae_polysemy.sae import SparseAutoencoder, reconstruction_metrics
from edgekit.models.sae_polysemy.wic import WiCPair, load_wic

PROMPT = "{context} The {word} means"
NO_FEATURE = -1


def build_prompt(context: str, word: str) -> str:
    """The PS-Eval prompt for ``word`` in ``context``."""
    return PROMPT.format(context=context.strip(), word=word)


@lru_cache(maxsize=256)
def word_pieces(word: str) -> tuple[int, ...]:
    """MiniLM WordPiece ids of ``word`` alone (no [CLS]/[SEP])."""
    from edgekit.models.minilm.encoder import tokenize

    ids = tokenize([word])["input_ids"][0]  # [CLS] pieces [SEP]
    return tuple(int(i) for i in ids[1:-1])


def target_position(ids: np.ndarray, length: int, word: str) -> int:
    """Index of the target word's last WordPiece in one tokenised prompt (``ids`` (L,) int64,
    ``length`` real tokens). InputError when the prompt does not end in "{word} means [SEP]"
    (e.g. it was truncated at 128 tokens)."""
    pieces = list(word_pieces(word))
    pos = length - 3
    start = pos - len(pieces) + 1
    if (
        start < 1
        or int(ids[length - 2]) != word_pieces("means")[0]
        or ([int(i) for i in ids[start : pos + 1]] != pieces)
    ):
        raise InputError(
            f"prompt does not end in '{word} means' after tokenisation (too long for "
            "128 tokens, or the word is not the last thing before 'means')"
        )
    return pos


def word_span(prompt: str, word: str) -> tuple[int, int]:
    """Character span [start, end) of the target ``word`` in a PS-Eval ``prompt`` (the word
    right before " means"); InputError when the prompt does not end that way."""
    suffix = PROMPT.partition("{word}")[2]  # " means"
    end = len(prompt) - len(suffix)
    start = end - len(word)
    if not prompt.endswith(suffix) or start < 0 or prompt[start:end] != word:
        raise InputError(f"prompt does not end in '{word}{suffix}': {prompt!r}")
    return start, end


def word_tokens(prompts: Sequence[str], words: Sequence[str], lm: str) -> list[np.ndarray]:
    """Per PS-Eval prompt of the causal LM ``lm``, the positions of the tokens whose character
    span overlaps the target word's ((k,) int64, in order; its last is the target token).
    InputError when a prompt was cut at the token limit or no token overlaps the word."""
    model = language_model(lm)
    if not isinstance(model, CausalLM):
        raise InputError("word_tokens reads a causal LM's offsets; MiniLM uses target_position")
    _, offsets = model.encode(prompts)  # (N, L, 2)
    found = []
    for prompt, word, spans in zip(prompts, words, offsets, strict=True):
        tokens = overlapping_tokens(spans, *word_span(prompt, word))
        whole = int(spans[:, 1].max(initial=0)) == len(prompt)  # not cut at the token limit
        if not len(tokens) or not whole:
            raise InputError(
                f"prompt does not end in '{word} means' after tokenisation (too long for the "
                f"token limit, or the word is not the last thing before 'means'): {prompt!r}"
            )
        found.append(tokens)
    return found


def prompts_and_positions(
    pairs: Sequence[WiCPair] | None = None, lm: str = ""
) -> tuple[list[str], list[int]]:
    """Prompts of every pair's context1, then every pair's context2 (2P texts), and the target
    token position in each, for the model ``lm`` names ("" = MiniLM)."""
    from edgekit.models.minilm.encoder import tokenize

    pairs = list(pairs if pairs is not None else load_wic())
    prompts = [build_prompt(p.context1, p.word) for p in pairs]
    prompts += [build_prompt(p.context2, p.word) for p in pairs]
    words = [p.word for p in pairs] * 2
    if lm:
        return prompts, [int(tokens[-1]) for tokens in word_tokens(prompts, words, lm)]
    feeds = tokenize(prompts)
    lengths = feeds["attention_mask"].sum(axis=1)
    positions = [
        target_position(feeds["input_ids"][i], int(lengths[i]), words[i])
        for i in range(len(prompts))
    ]
    return prompts, positions


def prompt_activations(
    hooks: Sequence[HookPoint], pairs: Sequence[WiCPair] | None = None, lm: str = ""
) -> dict[HookPoint, tuple[np.ndarray, np.ndarray]]:
    """Per hook: (context1 activations (P, d), context2 activations (P, d)) at the target
    token of each PS-Eval prompt, of the model ``lm`` names (d: its width, 384 for MiniLM;
    cached)."""
    prompts, positions = prompts_and_positions(pairs, lm)
    acts = token_activations(prompts, positions, hooks, lm)
    half = len(prompts) // 2
    return {hook: (a[:half], a[half:]) for hook, a in acts.items()}


def max_features(latents: np.ndarray) -> np.ndarray:
    """Index of the maximally active feature per row of ``latents`` (N, n); -1 where none
    is active (all zero). Returns (N,) int64."""
    latents = np.asarray(latents)
    top = latents.argmax(axis=-1).astype(np.int64)
    return np.where(latents.max(axis=-1) > 0, top, NO_FEATURE)


def relative_margin(latents: np.ndarray) -> np.ndarray:
    """How clearly each row's max feature wins: (top-1 - top-2) / top-1 of ``latents``
    (N, n); 0 where no latent is active. Returns (N,) float64 in [0, 1]."""
    latents = np.asarray(latents, dtype=np.float64)
    if latents.shape[-1] < 2:
        return (latents.max(axis=-1) > 0).astype(np.float64)
    top2 = np.partition(latents, -2, axis=-1)[..., -2:]  # (N, 2): second, first
    first, second = top2[..., 1], top2[..., 0]
    return np.where(first > 0, (first - second) / np.maximum(first, 1e-12), 0.0)


def predict_same(feature1: np.ndarray, feature2: np.ndarray) -> np.ndarray:
    """(P,) bool: both contexts have the same max feature (and it is a real feature)."""
    feature1, feature2 = np.asarray(feature1), np.asarray(feature2)
    return (feature1 == feature2) & (feature1 != NO_FEATURE)


@dataclass(frozen=True)
class Confusion:
    """PS-Eval confusion counts (positive = same meaning)."""

    tp: int
    fn: int
    fp: int
    tn: int

    def metrics(self) -> dict[str, float]:
        """accuracy, precision, recall, specificity, f1 (an undefined ratio is 0.0)."""

        def ratio(a: int, b: int) -> float:
            return a / b if b else 0.0

        precision = ratio(self.tp, self.tp + self.fp)
        recall = ratio(self.tp, self.tp + self.fn)
        return {
            "accuracy": ratio(self.tp + self.tn, self.tp + self.fn + self.fp + self.tn),
            "precision": precision,
            "recall": recall,
            "specificity": ratio(self.tn, self.tn + self.fp),
            "f1": ratio(2 * precision * recall, precision + recall),
        }


def confusion(labels: Sequence[int], same: Sequence[bool]) -> Confusion:
    """Confusion of gold ``labels`` (1 same meaning / 0 different) vs predicted ``same``."""
    labels, same = np.asarray(labels).astype(int), np.asarray(same).astype(bool)
    if labels.shape != same.shape or labels.ndim != 1:
        raise InputError(f"labels {labels.shape} and predictions {same.shape} must be equal (P,)")
    if not np.isin(labels, (0, 1)).all():
        raise InputError("labels must be 0 (different meaning) or 1 (same meaning)")
    gold = labels == 1
    return Confusion(
        tp=int((gold & same).sum()),
        fn=int((gold & ~same).sum()),
        fp=int((~gold & same).sum()),
        tn=int((~gold & ~same).sum()),
    )


def pseval_features(
    feature1: np.ndarray, feature2: np.ndarray, labels: Sequence[int]
) -> dict[str, float]:
    """PS-Eval metrics and counts from max-feature ids of both contexts ((P,) int64 each)."""
    matrix = confusion(labels, predict_same(feature1, feature2))
    return {**matrix.metrics(), "tp": matrix.tp, "fn": matrix.fn, "fp": matrix.fp,
            "tn": matrix.tn}  # fmt: skip


@torch.no_grad()
def pseval_sae(
    model: SparseAutoencoder,
    context1: np.ndarray,
    context2: np.ndarray,
    labels: Sequence[int],
) -> dict[str, float]:
    """PS-Eval of ``model`` on target-token activations of both contexts ((P, d) each)."""
    model.eval()
    f1 = model.encode(torch.from_numpy(np.asarray(context1, dtype=np.float32))).numpy()
    f2 = model.encode(torch.from_numpy(np.asarray(context2, dtype=np.float32))).numpy()
    metrics = pseval_features(max_features(f1), max_features(f2), labels)
    metrics["no_feature_rate"] = float(
        np.mean(np.concatenate([max_features(f1), max_features(f2)]) == NO_FEATURE)
    )
    return metrics


def evaluate_sae(
    model: SparseAutoencoder,
    hook: HookPoint,
    heldout: np.ndarray,
    pairs: Sequence[WiCPair] | None = None,
    lm: str = "",
) -> dict[str, float]:
    """PS-Eval metrics plus ``mse``/``fvu``/``l0``/``dead_fraction`` on held-out corpus
    activations ``heldout`` (N, d) of the same hook of the model ``lm`` names."""
    pairs = list(pairs if pairs is not None else load_wic())
    context1, context2 = prompt_activations([hook], pairs, lm)[hook]
    metrics = pseval_sae(model, context1, context2, [p.label for p in pairs])
    metrics.update(reconstruction_metrics(model, torch.from_numpy(heldout.astype(np.float32))))
    return metrics


def pseval_summary(
    first: np.ndarray,
    second: np.ndarray,
    raw_first: np.ndarray,
    raw_second: np.ndarray,
    labels: np.ndarray,
) -> dict[str, float]:
    """PS-Eval of max features ``first`` / ``second`` ((P,) int64, the two contexts) against
    ``labels`` (P,): ``pseval_*`` (accuracy, precision, recall, specificity, f1), a 95 %
    bootstrap interval of the accuracy over pairs (``pseval_accuracy_ci_low`` / ``_high``),
    chance (``majority_accuracy``), PS-Eval of the raw activations' argmax ``raw_first`` /
    ``raw_second`` (``raw_pseval_accuracy`` / ``_specificity``) and the paired interval of the
    accuracy minus the raw one (``pseval_accuracy_minus_raw_ci_*``)."""
    from edgekit.numeric import bootstrap_interval

    metrics = pseval_features(first, second, labels)
    keys = ("accuracy", "precision", "recall", "specificity", "f1")
    out = {f"pseval_{k}": float(metrics[k]) for k in keys}
    right = predict_same(first, second) == (labels == 1)
    low, high = bootstrap_interval(lambda i: float(right[i].mean()), len(right))
    out["pseval_accuracy_ci_low"], out["pseval_accuracy_ci_high"] = low, high
    out["majority_accuracy"] = float(max(labels.mean(), 1 - labels.mean()))
    raw = pseval_features(raw_first, raw_second, labels)
    out.update({f"raw_pseval_{k}": float(raw[k]) for k in ("accuracy", "specificity")})
    gain = right.astype(float) - (predict_same(raw_first, raw_second) == (labels == 1))
    low, high = bootstrap_interval(lambda i: float(gain[i].mean()), len(gain))
    out["pseval_accuracy_minus_raw_ci_low"], out["pseval_accuracy_minus_raw_ci_high"] = low, high
    return out
