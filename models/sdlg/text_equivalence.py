"""Equivalence for an LM whose vocabulary is not the equivalence model's: through text.

``TextEquivalence`` is an ``EquivalenceModel`` (semantic.py) at the LM's token ids: the LM's
vocabulary (vocab.py) decodes question and answer ids to text, and a *reader* re-tokenises
that text with its own tokenizer:

- ``text(question ids, answer ids)``: the string "question answer" the reader compares;
- ``equivalent(a, b)``: the reader's verdict on two such strings;
- ``attribution(question ids, answer ids)``: the reader's gradients at its own answer tokens,
  mapped to the LM's answer tokens by character spans: an LM token's gradient is the mean of
  the reader tokens its span overlaps, a word's score is the L2 norm of the mean |g * e| over
  the reader tokens overlapping any of its LM tokens (RMS over directions), as
  ``semantic.word_attribution`` does for shared ids;
- ``embedding_matrix[v]``: the reader's embedding of the LM token v's text (the mean of its
  pieces' input embeddings, computed on first use; a token with no text, such as EOS, is the
  zero vector: replacing a word by it deletes the word). When the two tokenizers agree on a
  token (the paper's OPT LM and DeBERTa NLI model share GPT-2's BPE vocabulary) this is the
  reader's own row for it.

Readers: ``CosineReader`` (the calibrated all-MiniLM-L6-v2 cosine model of semantic.py, its
WordPiece tokenizer) and ``NLIReader`` (a local NLI classifier with its own tokenizer, any
vocabulary: equivalent unless "contradiction" either way; attribution from the gradient of the
loss toward "contradiction" on the pair (x, x) at the hypothesis' answer tokens, as SDLG does).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgekit.models.sdlg.semantic import Attribution, CosineEquivalence, text_ids
from edgekit.models.sdlg.vocab import AnswerVocabulary

MAX_NLI_TOKENS = 512


def join_text(question: str, answer: str) -> str:
    """The text an equivalence model reads: "question answer"."""
    return f"{question} {answer}" if answer else question


@dataclass
class ReaderAttribution:
    """A reader's attribution of its K answer tokens: ``gradients`` (R, K, d) per direction,
    ``embeddings`` (K, d) of those tokens, ``offsets`` (K, 2) their character spans in the
    answer text; ``signed`` as ``Attribution.signed``."""

    gradients: np.ndarray
    embeddings: np.ndarray
    offsets: np.ndarray
    signed: bool


class TextReader(Protocol):
    dim: int

    def equivalent(self, a: str, b: str) -> bool: ...

    def attribution(self, question: str, answer: str) -> ReaderAttribution: ...

    def token_embedding(self, text: str) -> np.ndarray: ...


def overlapping(offsets: np.ndarray, start: int, end: int) -> np.ndarray:
    """Indices (k,) of the non-empty spans in ``offsets`` (K, 2) that overlap [start, end)."""
    if offsets.size == 0 or end <= start:
        return np.zeros(0, dtype=np.int64)
    hit = (offsets[:, 0] < end) & (offsets[:, 1] > start) & (offsets[:, 1] > offsets[:, 0])
    return np.flatnonzero(hit).astype(np.int64)


class TokenRows:
    """``embedding_matrix`` of a ``TextEquivalence``: row v (d,) is the reader's embedding of
    LM token v's text; indexed by one id or an int array (K,) -> (K, d), cached per id."""

    def __init__(self, reader: TextReader, vocab: AnswerVocabulary) -> None:
        self.reader, self.vocab = reader, vocab
        self._rows: dict[int, np.ndarray] = {}

    def row(self, token: int) -> np.ndarray:
        token = int(token)
        if token not in self._rows:
            text = self.vocab.token_text(token)
            self._rows[token] = (
                self.reader.token_embedding(text) if text.strip() else np.zeros(self.reader.dim)
            )
        return self._rows[token]

    def __getitem__(self, ids: int | np.ndarray) -> np.ndarray:
        if np.ndim(ids) == 0:
            return self.row(int(ids))
        flat = [self.row(int(i)) for i in np.asarray(ids).ravel()]
        return np.stack(flat).reshape(*np.shape(ids), self.reader.dim)


class TextEquivalence:
    """``EquivalenceModel`` at an LM's ids through a text reader (module doc)."""

    def __init__(self, reader: TextReader, vocab: AnswerVocabulary) -> None:
        self.reader, self.vocab = reader, vocab
        self.embedding_matrix = TokenRows(reader, vocab)

    @property
    def calibration(self) -> dict[str, Any] | None:
        """The reader's threshold calibration (the cosine reader), else None."""
        return getattr(self.reader, "calibration", None)

    def text(self, question: Sequence[int], answer: Sequence[int]) -> str:
        """The text "question answer" decoded from the LM's ids."""
        return join_text(self.vocab.decode(question), self.vocab.decode(answer))

    def equivalent(self, a: str, b: str) -> bool:
        return a == b or self.reader.equivalent(a, b)

    def attribution(self, question: Sequence[int], answer: Sequence[int]) -> Attribution:
        """Scores (T,) and gradients (R, T, d) at the LM's T answer tokens (module doc)."""
        answer_text, spans = self.vocab.answer_spans(answer)
        found = self.reader.attribution(self.vocab.decode(question), answer_text)
        directions, dim = found.gradients.shape[0], found.gradients.shape[2]
        members = [overlapping(found.offsets, start, end) for start, end in spans]
        gradients = np.zeros((directions, len(answer), dim))
        for t, rows in enumerate(members):
            if rows.size:
                gradients[:, t] = found.gradients[:, rows].mean(axis=1)
        product = np.abs(found.gradients * found.embeddings[None])  # (R, K, d)
        groups = np.asarray(self.vocab.word_groups(answer))
        scores = np.zeros(len(answer))
        for word in set(groups.tolist()):
            tokens = np.flatnonzero(groups == word)
            rows = np.unique(np.concatenate([members[t] for t in tokens]))
            if rows.size:
                per_direction = np.linalg.norm(product[:, rows].mean(axis=1), axis=1)  # (R,)
                scores[tokens] = np.sqrt((per_direction**2).mean())
        return Attribution(scores, gradients, found.signed)


class CosineReader:
    """The MiniLM cosine model (``CosineEquivalence``) reading text with its WordPiece
    tokenizer: a text is ``[CLS] text [SEP]``, as ``text_ids`` builds it."""

    def __init__(self, cosine: CosineEquivalence) -> None:
        self.cosine = cosine
        self.dim = int(cosine.embedding_matrix.shape[1])
        self.calibration = getattr(cosine, "calibration", None)

    @staticmethod
    def _ids(text: str) -> list[int]:
        from edgekit.models.tinylm.tokens import encode

        return text_ids([], encode(text))

    def equivalent(self, a: str, b: str) -> bool:
        return self.cosine.equivalent(self._ids(a), self._ids(b))

    def attribution(self, question: str, answer: str) -> ReaderAttribution:
        from edgekit.models.tinylm.tokens import encode, encode_offsets

        ids, offsets = encode_offsets(answer)
        if not ids:
            empty = np.zeros((self.cosine.directions, 0, self.dim))
            return ReaderAttribution(empty, np.zeros((0, self.dim)), np.zeros((0, 2)), False)
        found = self.cosine.attribution(encode(question), ids)
        embeddings = self.cosine.embedding_matrix[ids]  # (K, 384)
        return ReaderAttribution(found.gradients, embeddings, np.asarray(offsets), False)

    def token_embedding(self, text: str) -> np.ndarray:
        from edgekit.models.tinylm.tokens import encode

        ids = encode(text)
        return self.cosine.embedding_matrix[ids].mean(axis=0) if ids else np.zeros(self.dim)


class NLIReader:
    """A local NLI classifier (``AutoModelForSequenceClassification``) with its own fast
    tokenizer, from ``folder`` (the card option ``nli``); ``fingerprint`` names the folder in
    cache keys."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        from edgekit.models.hf_local import (
            SEQUENCE_CLASSIFIER,
            folder_error,
            folder_fingerprint,
            load_fast_tokenizer,
            load_model,
            model_folder,
        )

        option = "sdlg option nli"
        kind = f"{SEQUENCE_CLASSIFIER} (an NLI model)"
        self.folder: Path = model_folder(folder, option, kind)
        self.fingerprint = folder_fingerprint(self.folder)
        self.tokenizer = load_fast_tokenizer(self.folder, option, kind)
        self.model = load_model(self.folder, option, SEQUENCE_CLASSIFIER)
        labels = {str(v).lower(): int(k) for k, v in self.model.config.id2label.items()}
        found = [i for name, i in labels.items() if name.startswith("contradict")]
        if not found:
            reason = f"its labels {sorted(labels)} name no 'contradiction'"
            raise folder_error(option, kind, str(folder), reason)
        self.contradiction = found[0]
        self.embeddings = self.model.get_input_embeddings()
        self.dim = int(self.embeddings.weight.shape[1])
        positions = getattr(self.model.config, "max_position_embeddings", None) or MAX_NLI_TOKENS
        self.max_tokens = int(min(positions, MAX_NLI_TOKENS, self.tokenizer.model_max_length))
        self.encoder_passes = 0
        self._cache: dict[tuple[str, str], bool] = {}

    def _encode(self, first: list[str], second: list[str], **kwargs: Any) -> Any:
        return self.tokenizer(
            first, second, truncation=True, max_length=self.max_tokens, padding=True,
            return_tensors="pt", **kwargs,
        )  # fmt: skip

    def equivalent(self, a: str, b: str) -> bool:
        """Equivalent unless the model says "contradiction" in either direction."""
        import torch

        if a == b:
            return True
        if (a, b) not in self._cache:
            with torch.inference_mode():
                logits = self.model(**self._encode([a, b], [b, a])).logits  # (2, labels)
            self.encoder_passes += 2
            verdict = not bool((logits.argmax(dim=-1) == self.contradiction).any())
            self._cache[(a, b)] = self._cache[(b, a)] = verdict
        return self._cache[(a, b)]

    def attribution(self, question: str, answer: str) -> ReaderAttribution:
        """Gradient (1, K, d) of CE(NLI(x, x), contradiction), x = "question answer", at the
        hypothesis' tokens overlapping the answer."""
        import torch

        x = join_text(question, answer)
        start = len(x) - len(answer)  # the answer's first character in x
        encoded = self._encode([x], [x], return_offsets_mapping=True)
        offsets = encoded.pop("offset_mapping")[0].numpy()  # (S, 2)
        second = np.array([s == 1 for s in encoded.sequence_ids(0)])  # the hypothesis
        keep = np.flatnonzero(second & (offsets[:, 1] > offsets[:, 0]) & (offsets[:, 1] > start))
        ids = encoded.pop("input_ids")
        embeds = self.embeddings(ids).detach().requires_grad_(True)  # (1, S, d)
        with torch.enable_grad():
            logits = self.model(inputs_embeds=embeds, **encoded).logits  # (1, labels)
            target = torch.tensor([self.contradiction])
            torch.nn.functional.cross_entropy(logits, target).backward()
        self.encoder_passes += 1
        grads = embeds.grad[:, keep].numpy().astype(np.float64)  # (1, K, d)
        e = embeds[0, keep].detach().numpy().astype(np.float64)  # (K, d)
        spans = np.clip(offsets[keep] - start, 0, len(answer))  # (K, 2) in the answer
        return ReaderAttribution(grads, e, spans, signed=True)

    def token_embedding(self, text: str) -> np.ndarray:
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not ids:
            return np.zeros(self.dim)
        weight = self.embeddings.weight.detach()
        return weight[ids].numpy().astype(np.float64).mean(axis=0)
