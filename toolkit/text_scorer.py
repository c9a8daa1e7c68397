"""Text scorers on the device: a bundle's own tokenizer (``assets/``) + its graph + the task's
post-processing, with no model code and no torch.

The bundle's ``preprocessing`` names the tokenizer file (``tokenizers`` JSON) and the maximum
length; ``task`` picks the post-processing:

- ``sentence-embedding`` (MiniLM): embeddings, and the cosine similarity of text pairs;
- ``moderation-severity`` (BingoGuard): P(unsafe) from ``safety_logits``, the decision at the
  bundle's operating threshold, the topic (argmax of ``topic_logits``, named by ``labels``) and
  the severity level 0-4 (argmax of ``severity_logits``) with its probabilities; a bundle whose
  preprocessing says ``"input": "query+response"`` also scores ``pairs`` [query, response]
  (each response given the user query it answers; "" for none);
- any other task: every ``*logits`` output becomes softmax probabilities and an argmax (named
  by the manifest's ``labels`` for ``logits``); other outputs are passed through as lists.

Texts longer than the bundle's maximum length are cut to it and reported in ``truncated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from edgekit.bundle.format import Bundle
from edgekit.errors import InputError

MAX_TEXTS = 256
MAX_CHARS = 20_000


class TextScorer:
    """Score texts with a text bundle. ``runtime``/``threads``/``device`` as for
    ``Bundle.session``."""

    def __init__(
        self,
        bundle: Bundle,
        runtime: str | None = None,
        threads: int | None = None,
        device: str | None = None,
    ) -> None:
        from tokenizers import Tokenizer

        pre = bundle.manifest.get("preprocessing") or {}
        if "tokenizer" not in pre:
            raise InputError(
                f"bundle {bundle.path} ({bundle.model}) is not a text model: its preprocessing "
                "names no tokenizer"
            )
        self.bundle = bundle
        self.task = str(bundle.manifest.get("task") or "")
        self.max_length = int(pre.get("max_length", 128))
        self.tokenizer = Tokenizer.from_file(str(bundle.file(f"assets/{pre['tokenizer']}")))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.session = bundle.session(runtime=runtime, device=device, threads=threads)
        self.input_names = [s.name for s in self.session.io()[0]]

    def tokenize(self, texts: Sequence[str | tuple[str, str]]) -> dict[str, np.ndarray]:
        """{"input_ids", "attention_mask"} (B, L) int64, right-padded with 0 to the longest;
        a (first, second) tuple is encoded as a pair; ``self.truncated`` records which inputs
        were cut to the maximum length."""
        encodings = self.tokenizer.encode_batch(list(texts))
        self.truncated = [bool(e.overflowing) for e in encodings]
        length = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        return {k: v for k, v in feeds.items() if k in self.input_names}

    def run(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Raw graph outputs for ``texts`` (one batch)."""
        return self.session.run(self.tokenize(check_texts(texts)))

    def score(
        self, texts: Sequence[str] | None = None, pairs: Sequence[Sequence[str]] | None = None
    ) -> dict[str, Any]:
        """JSON-able scores. ``texts``: one result per text; ``pairs`` ([a, b], ...): the cosine
        similarity of each pair (embedding models only)."""
        if pairs is not None and self.task == "moderation-severity":
            return self._moderate_pairs(pairs)
        if pairs is not None:
            if self.task != "sentence-embedding":
                raise InputError(f"pairs need a sentence-embedding bundle, not task '{self.task}'")
            flat = [str(t) for p in check_pairs(pairs) for t in p]
            emb = self._embeddings(flat)
            a, b = emb[0::2], emb[1::2]
            cos = (a * b).sum(axis=1)
            threshold = (self.bundle.manifest.get("preprocessing") or {}).get(
                "paraphrase_threshold"
            )
            out: dict[str, Any] = {"model": self.bundle.model, "cosine": cos.round(6).tolist()}
            if threshold is not None:
                out["paraphrase"] = (cos >= float(threshold)).tolist()
                out["threshold"] = threshold
            return out
        if texts is None:
            raise InputError("give 'texts' (a list of strings) or 'pairs' ([[a, b], ...])")
        if self.task == "sentence-embedding":
            emb = self._embeddings(check_texts(texts))
            return {"model": self.bundle.model, "embeddings": emb.round(6).tolist()}
        return self._scored(check_texts(texts))

    def _moderate_pairs(self, pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
        """Moderation of [query, response] pairs: each response given its query ("" = none)."""
        pre = self.bundle.manifest.get("preprocessing") or {}
        if pre.get("input") != "query+response":
            raise InputError(
                f"bundle {self.bundle.model} scores responses alone (its preprocessing input is "
                f"{pre.get('input', 'response')!r}): send 'texts', or export the query+response "
                "scorer"
            )
        checked = check_pairs(pairs, allow_empty_first=True)
        inputs = [(q, r) if q else r for q, r in checked]
        return self._scored(inputs)

    def _scored(self, inputs: Sequence[str | tuple[str, str]]) -> dict[str, Any]:
        """The task's post-processed outputs for checked ``inputs`` (texts or pairs), with the
        truncation flags."""
        outputs = self.session.run(self.tokenize(inputs))
        out = {"model": self.bundle.model, **postprocess(outputs, self.bundle.manifest)}
        return {**out, "truncated": self.truncated}

    def _embeddings(self, texts: Sequence[str]) -> np.ndarray:
        emb = np.asarray(self.run(texts)["embedding"], dtype=np.float32)  # (B, D)
        return emb / np.clip(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12, None)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (B, K) logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def postprocess(outputs: dict[str, np.ndarray], manifest: dict[str, Any]) -> dict[str, Any]:
    """JSON-able scores from a text bundle's raw outputs (see the module doc)."""
    labels = list(manifest.get("labels") or [])
    if manifest.get("task") == "moderation-severity":
        pre = manifest.get("preprocessing") or {}
        threshold = float(pre.get("operating_threshold", 0.5))
        p_unsafe = softmax(np.asarray(outputs["safety_logits"], np.float64))[:, 1]
        topic = softmax(np.asarray(outputs["topic_logits"], np.float64)).argmax(axis=1)
        severity = softmax(np.asarray(outputs["severity_logits"], np.float64))
        return {
            "p_unsafe": p_unsafe.round(6).tolist(),
            "unsafe": (p_unsafe >= threshold).tolist(),
            "threshold": threshold,
            "topic": [labels[i] if i < len(labels) else int(i) for i in topic],
            "severity": severity.argmax(axis=1).tolist(),
            "severity_probs": severity.round(6).tolist(),
        }
    out: dict[str, Any] = {}
    for name, value in outputs.items():
        arr = np.asarray(value)
        if name.endswith("logits") and arr.ndim == 2:
            probs = softmax(arr.astype(np.float64))
            top = probs.argmax(axis=1)
            prefix = name[: -len("logits")]
            out[f"{prefix}probs"] = probs.round(6).tolist()
            names = labels if name == "logits" else []
            out[f"{prefix}label"] = [names[i] if i < len(names) else int(i) for i in top]
        else:
            out[name] = arr.round(6).tolist() if arr.dtype.kind == "f" else arr.tolist()
    return out


def check_texts(texts: Any) -> list[str]:
    """``texts`` as a non-empty list of strings within the size limits, else InputError."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise InputError(f"texts must be a list of strings, got {type(texts).__name__}")
    if not texts or len(texts) > MAX_TEXTS:
        raise InputError(f"texts must hold 1 to {MAX_TEXTS} strings, got {len(texts)}")
    for i, t in enumerate(texts):
        _check_text(t, f"texts[{i}]")
    return list(texts)


def _check_text(t: Any, where: str) -> None:
    """InputError naming ``where`` unless ``t`` is a non-empty, valid-Unicode string of at most
    MAX_CHARS characters."""
    if not isinstance(t, str) or not t.strip():
        raise InputError(f"{where} must be a non-empty string")
    if len(t) > MAX_CHARS:
        raise InputError(f"{where} is {len(t)} characters, over {MAX_CHARS}")
    try:
        t.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate, e.g. JSON "\ud800": no tokenizer
        raise InputError(f"{where} is not valid Unicode at character {exc.start}") from None


def check_pairs(pairs: Any, allow_empty_first: bool = False) -> list[list[str]]:
    """``pairs`` as a non-empty list of [text, text] within the size limits, else InputError.
    With ``allow_empty_first`` a pair's first text may be "" (a moderation query not given)."""
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise InputError("pairs must be a non-empty list of [text, text]")
    if len(pairs) > MAX_TEXTS // 2:
        raise InputError(f"pairs must hold at most {MAX_TEXTS // 2} pairs, got {len(pairs)}")
    for i, p in enumerate(pairs):
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise InputError(f"pairs[{i}] must be [text, text]")
    for i, p in enumerate(pairs):
        for j, t in enumerate(p):
            if not (j == 0 and allow_empty_first and t == ""):
                _check_text(t, f"pairs[{i}][{j}]")
    return [list(p) for p in pairs]
