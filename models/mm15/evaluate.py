"""Greedy decoding over the two graphs and per-skill scores.

Decoding runs on any runners of "image_encoder" (tiles -> image_tokens) and "decoder_step"
(image_tokens, tokens -> logits): the torch reference or an exported ONNX session. Each step
feeds the whole text so far (no KV cache) and appends the argmax of the last position.

Scores: "caption", "ocr", "count", "refer" are exact-match accuracy of the answer text;
"ground" is the fraction of answers whose parsed box has IoU >= 0.5 with the true box
(an unparseable answer scores 0).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edgekit.card import Runner
from edgekit.models.mm15 import vocab
from edgekit.models.mm15.coords import box_iou, parse_box
from edgekit.models.mm15.tasks import Example

# answer budgets: prompt + answer stay within the default max_text of 48 characters
MAX_NEW = {"caption": 36, "ocr": 6, "count": 3, "refer": 10, "ground": 24}


def greedy_decode(
    runners: Mapping[str, Runner], tiles: np.ndarray, prompts: list[str], max_new: int
) -> tuple[list[str], np.ndarray]:
    """Answers of the model for tiles (B, T, 1, S, S) float32 and B prompts.

    Returns (answers, first-step logits (B, V) float32). Prompts of different lengths are
    decoded in groups of equal length.
    """
    image = runners["image_encoder"].run({"tiles": np.ascontiguousarray(tiles, np.float32)})
    image_tokens = np.asarray(image["image_tokens"], np.float32)
    answers: list[str] = [""] * len(prompts)
    first = np.zeros((len(prompts), vocab.VOCAB_SIZE), np.float32)
    ids = [vocab.prompt_ids(p) for p in prompts]
    for length in sorted({len(i) for i in ids}):
        rows = np.array([b for b, i in enumerate(ids) if len(i) == length])
        tokens = np.array([ids[b] for b in rows], np.int64)  # (b, length)
        done = np.zeros(len(rows), bool)
        for step in range(max_new):
            logits = runners["decoder_step"].run(
                {"image_tokens": image_tokens[rows], "tokens": tokens}
            )["logits"]
            last = np.asarray(logits)[:, -1]  # (b, V)
            if step == 0:
                first[rows] = last
            nxt = np.where(done, vocab.PAD, last.argmax(-1))
            done |= nxt == vocab.EOS
            tokens = np.concatenate([tokens, nxt[:, None].astype(np.int64)], axis=1)
            if done.all():
                break
        for r, seq in zip(rows, tokens, strict=True):
            answers[r] = vocab.decode(seq[length:])
    return answers, first


def score(examples: list[Example], answers: list[str], size: int, bins: int) -> np.ndarray:
    """Per-example score (N,) float64 in [0, 1] (see the module docstring)."""
    out = np.zeros(len(examples))
    for i, (ex, answer) in enumerate(zip(examples, answers, strict=True)):
        if ex.category == "ground":
            pred = parse_box(answer, (size, size), bins)
            out[i] = float(box_iou(pred, np.asarray(ex.target["box"], np.float64)) >= 0.5)
        else:
            out[i] = float(answer == ex.answer)
    return out


def char_accuracy(truths: list[str], answers: list[str]) -> float:
    """Fraction of characters read right, position by position (missing characters are wrong)."""
    total = sum(len(t) for t in truths)
    hits = sum(
        a == b for t, ans in zip(truths, answers, strict=True) for a, b in zip(t, ans, strict=False)
    )
    return hits / max(1, total)


def skill_scores(
    runners: Mapping[str, Runner],
    test: Mapping[str, list[Example]],
    encode,  # noqa: ANN001 - images -> (B, T, 1, S, S) tiles, e.g. MM15Config.encode
    size: int,
    bins: int,
    batch: int = 128,
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Mean score per category of ``test`` (category -> examples) and the decoded answers;
    with "ocr" in ``test`` also "ocr_char", the per-character reading accuracy."""
    metrics, decoded = {}, {}
    for category, examples in test.items():
        answers: list[str] = []
        for start in range(0, len(examples), batch):
            chunk = examples[start : start + batch]
            got, _ = greedy_decode(
                runners,
                encode([e.image for e in chunk]),
                [e.prompt for e in chunk],
                MAX_NEW[category],
            )
            answers += got
        metrics[category] = float(score(examples, answers, size, bins).mean())
        decoded[category] = answers
        if category == "ocr":
            metrics["ocr_char"] = char_accuracy([e.answer for e in examples], answers)
    return metrics, decoded
