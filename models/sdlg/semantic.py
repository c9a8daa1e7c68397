"""Equivalence models for SDLG: which answers mean the same, and which token changes matter.

Both read token ids in MiniLM's WordPiece vocabulary (shared with the in-repo LM), a text
being ``[CLS] question answer [SEP]`` built from ids, so nothing is re-tokenised (an LM with
another vocabulary reaches them, or an NLI model with its own tokenizer, through text:
text_equivalence.py). Each offers

- ``equivalent(a, b)``: do texts ``a`` and ``b`` (id lists) mean the same;
- ``attribution(question_ids, answer_ids)``: an ``Attribution`` of the answer tokens;
- ``embedding_matrix``: (V, d) input token embeddings, the space substitution scores use.

``NLIEquivalence`` (an NLI classifier the user has locally, transformers
AutoModelForSequenceClassification): equivalent unless either direction is "contradiction";
attribution from the gradient of the loss toward "contradiction" on the pair (x, x) at the
second copy's word embeddings, as SDLG does.

``CosineEquivalence`` (pretrained all-MiniLM-L6-v2, the default): equivalent when the cosine
of the two sentence embeddings reaches a calibrated threshold. The cosine of x with itself is
at its maximum, so its gradient is zero and gives no direction; instead the attribution takes
the gradients of ``R`` random unit directions r (orthogonal to the embedding f(x)) of the
normalised embedding, r . f(x), at the word embeddings. A substitution delta moves f by
about J delta, and sqrt(mean_r cos(delta, g_r)^2) estimates how strongly delta's direction
moves the meaning (a Gauss-Newton view of 1 - cos); it replaces the signed cos(delta, g) of the
NLI case.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgekit.cache import atomic_write_text, cache_dir, recipe_key
from edgekit.errors import InputError
from edgekit.models.sdlg.corpus import Fact, build_facts, split_facts
from edgekit.models.tinylm.tokens import CLS_ID, SEP_ID, VOCAB_SIZE, token_strings

MAX_TOKENS = 128


@dataclass
class Attribution:
    """Gradient attribution of an answer's T tokens.

    ``token_scores`` (T,): the attribution of the word each token belongs to (L2 norm of the
    mean |g * e| over the word's tokens, root-mean-square over directions); ``gradients``
    (R, T, d): per direction, the gradient at each answer token's embedding; ``signed``: the
    substitution score is the signed cosine (R = 1, NLI) rather than its RMS over directions.
    """

    token_scores: np.ndarray
    gradients: np.ndarray
    signed: bool

    def substitution_scores(
        self, position: int, original: int, candidates: np.ndarray, embeddings: np.ndarray
    ) -> np.ndarray:
        """Score (K,) of replacing token ``original`` at ``position`` by each candidate id:
        cos(E[original] - E[v], g) (signed), or sqrt(mean_r cos(...)^2) over directions."""
        delta = embeddings[original][None] - embeddings[candidates]  # (K, d)
        g = self.gradients[:, position]  # (R, d)
        norms = np.linalg.norm(delta, axis=1)[None] * np.linalg.norm(g, axis=1)[:, None]
        cos = (g @ delta.T) / np.maximum(norms, 1e-12)  # (R, K)
        return cos[0] if self.signed else np.sqrt((cos**2).mean(axis=0))


class EquivalenceModel(Protocol):
    embedding_matrix: np.ndarray

    def equivalent(self, a: Sequence[int], b: Sequence[int]) -> bool: ...

    def attribution(self, question: Sequence[int], answer: Sequence[int]) -> Attribution: ...


def text_ids(question: Sequence[int], answer: Sequence[int]) -> list[int]:
    """``[CLS] question answer [SEP]`` ids (question/answer without special tokens)."""
    ids = [CLS_ID, *question, *answer, SEP_ID]
    if len(ids) > MAX_TOKENS:
        raise InputError(f"text of {len(ids)} tokens is over the equivalence model's {MAX_TOKENS}")
    return ids


def word_groups(answer: Sequence[int]) -> list[int]:
    """Word index (T,) of each WordPiece token: a "##" piece joins the word before it."""
    groups, word = [], -1
    for i, piece in enumerate(token_strings(answer)):
        if not (piece.startswith("##") and i > 0):
            word += 1
        groups.append(word)
    return groups


def word_attribution(
    gradients: np.ndarray, embeddings: np.ndarray, groups: list[int]
) -> np.ndarray:
    """Per-token score (T,) of its word: ||mean_{tokens of word} |g * e|||_2, RMS over the R
    directions of ``gradients`` (R, T, d); ``embeddings`` (T, d)."""
    product = np.abs(gradients * embeddings[None])  # (R, T, d)
    groups_arr = np.asarray(groups)
    scores = np.zeros(len(groups))
    for word in set(groups):
        members = groups_arr == word
        per_direction = np.linalg.norm(product[:, members].mean(axis=1), axis=1)  # (R,)
        scores[members] = np.sqrt((per_direction**2).mean())
    return scores


def greedy_clusters(n: int, equivalent: Callable[[int, int], bool]) -> list[int]:
    """Cluster label (n,) per item: each item joins the first cluster whose first member it is
    ``equivalent`` to (the relation is expected symmetric: bidirectional), else opens one."""
    labels: list[int] = []
    representatives: list[int] = []
    for i in range(n):
        for label, rep in enumerate(representatives):
            if equivalent(rep, i):
                labels.append(label)
                break
        else:
            representatives.append(i)
            labels.append(len(representatives) - 1)
    return labels


class CosineEquivalence:
    """all-MiniLM-L6-v2 cosine >= ``threshold``; random-direction gradient attribution."""

    def __init__(
        self, threshold: float, directions: int = 8, seed: int = 0, bert: Any = None
    ) -> None:
        from edgekit.models.minilm.encoder import load_bert

        self.threshold = float(threshold)
        self.directions, self.seed = int(directions), int(seed)
        self.bert = bert if bert is not None else load_bert()
        self.bert.requires_grad_(False)
        weight = self.bert.get_input_embeddings().weight
        self.embedding_matrix = weight.detach().numpy().astype(np.float64)  # (V, 384)
        self._cache: dict[tuple[int, ...], np.ndarray] = {}
        self.encoder_passes = 0

    def _pooled(self, embeds: Any, mask: Any) -> Any:  # (B, S, d), (B, S) -> (B, 384) unit
        import torch

        hidden = self.bert(
            inputs_embeds=embeds, attention_mask=mask, token_type_ids=torch.zeros_like(mask)
        ).last_hidden_state  # (B, S, 384)
        m = mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return mean / mean.norm(dim=-1, keepdim=True).clamp(min=1e-12)

    def embed(self, texts: Sequence[Sequence[int]]) -> np.ndarray:
        """Unit sentence embeddings (N, 384) of id texts, cached per text."""
        import torch

        from edgekit.models.tinylm.causal import pad

        missing = list(dict.fromkeys(tuple(t) for t in texts if tuple(t) not in self._cache))
        if missing:
            ids, mask = pad(missing)
            with torch.inference_mode():
                embeds = self.bert.get_input_embeddings()(torch.from_numpy(ids))
                pooled = self._pooled(embeds, torch.from_numpy(mask)).numpy()
            self.encoder_passes += len(missing)
            for key, row in zip(missing, pooled, strict=True):
                self._cache[key] = row.astype(np.float64)
        return np.stack([self._cache[tuple(t)] for t in texts])

    def similarity(self, a: Sequence[int], b: Sequence[int]) -> float:
        ea, eb = self.embed([a, b])
        return float(ea @ eb)

    def equivalent(self, a: Sequence[int], b: Sequence[int]) -> bool:
        return tuple(a) == tuple(b) or self.similarity(a, b) >= self.threshold

    def attribution(self, question: Sequence[int], answer: Sequence[int]) -> Attribution:
        """Gradients (R, T, 384) of R random directions of f(question + answer)."""
        import torch

        ids = torch.tensor([text_ids(question, answer)] * self.directions)  # (R, S)
        mask = torch.ones_like(ids)
        embeds = self.bert.get_input_embeddings()(ids).detach().requires_grad_(True)
        with torch.enable_grad():
            f = self._pooled(embeds, mask)  # (R, 384)
            gen = torch.Generator().manual_seed(self.seed)
            r = torch.randn(f.shape, generator=gen, dtype=f.dtype)
            anchor = f.detach()
            r = r - (r * anchor).sum(-1, keepdim=True) * anchor  # orthogonal to f
            r = r / r.norm(dim=-1, keepdim=True)
            (r * f).sum().backward()
        self.encoder_passes += self.directions
        span = slice(1 + len(question), 1 + len(question) + len(answer))
        grads = embeds.grad[:, span].numpy().astype(np.float64)  # (R, T, 384)
        e = embeds[0, span].detach().numpy().astype(np.float64)  # (T, 384)
        scores = word_attribution(grads, e, word_groups(answer))
        return Attribution(scores, grads, signed=False)


class NLIEquivalence:
    """A local NLI classifier over the shared WordPiece vocabulary (premise, hypothesis)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModelForSequenceClassification

        folder = Path(folder)
        if not (folder / "config.json").exists():
            raise InputError(f"{folder} is not a transformers model folder (no config.json)")
        self.model = AutoModelForSequenceClassification.from_pretrained(
            str(folder), local_files_only=True
        ).eval()
        self.model.requires_grad_(False)
        labels = {str(v).lower(): int(k) for k, v in self.model.config.id2label.items()}
        found = [i for name, i in labels.items() if name.startswith("contradict")]
        if not found:
            raise InputError(
                f"NLI model in {folder} names no 'contradiction' label; its labels are "
                f"{sorted(labels)}"
            )
        self.contradiction = found[0]
        vocab = int(self.model.config.vocab_size)
        if vocab != VOCAB_SIZE:
            raise InputError(
                f"NLI model in {folder} has a {vocab}-token vocabulary; SDLG needs the LM's "
                f"{VOCAB_SIZE}-token WordPiece vocabulary (MiniLM / BERT uncased)"
            )
        weight = self.model.get_input_embeddings().weight
        self.embedding_matrix = weight.detach().numpy().astype(np.float64)
        self.encoder_passes = 0
        self._cache: dict[tuple[tuple[int, ...], tuple[int, ...]], bool] = {}

    @staticmethod
    def _pair(a: Sequence[int], b: Sequence[int]) -> tuple[list[int], list[int]]:
        """(ids, token_type_ids) of ``[CLS] a [SEP] b [SEP]`` from two id texts."""
        body_a = [t for t in a if t not in (CLS_ID, SEP_ID)]
        body_b = [t for t in b if t not in (CLS_ID, SEP_ID)]
        ids = [CLS_ID, *body_a, SEP_ID, *body_b, SEP_ID]
        if len(ids) > MAX_TOKENS * 2:
            raise InputError(f"NLI pair of {len(ids)} tokens is over {MAX_TOKENS * 2}")
        return ids, [0] * (len(body_a) + 2) + [1] * (len(body_b) + 1)

    def _contradicts(self, pairs: list[tuple[Sequence[int], Sequence[int]]]) -> list[bool]:
        import torch

        from edgekit.models.tinylm.causal import pad

        built = [self._pair(a, b) for a, b in pairs]
        ids, mask = pad([p[0] for p in built])
        types, _ = pad([p[1] for p in built])
        with torch.inference_mode():
            logits = self.model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types),
            ).logits
        self.encoder_passes += len(pairs)
        return (logits.argmax(dim=-1) == self.contradiction).tolist()

    def equivalent(self, a: Sequence[int], b: Sequence[int]) -> bool:
        """Equivalent unless the model says "contradiction" in either direction."""
        if tuple(a) == tuple(b):
            return True
        key = (tuple(a), tuple(b))
        if key not in self._cache:
            forward, backward = self._contradicts([(a, b), (b, a)])
            self._cache[key] = self._cache[key[::-1]] = not (forward or backward)
        return self._cache[key]

    def attribution(self, question: Sequence[int], answer: Sequence[int]) -> Attribution:
        """Gradient (1, T, d) of CE(NLI(x, x), contradiction) at the hypothesis' answer."""
        import torch

        x = text_ids(question, answer)
        ids, types = self._pair(x, x)
        ids_t = torch.tensor([ids])
        embeds = self.model.get_input_embeddings()(ids_t).detach().requires_grad_(True)
        with torch.enable_grad():
            logits = self.model(
                inputs_embeds=embeds,
                attention_mask=torch.ones_like(ids_t),
                token_type_ids=torch.tensor([types]),
            ).logits  # (1, labels)
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor([self.contradiction]))
            loss.backward()
        self.encoder_passes += 1
        start = len(x) + len(question)  # [CLS] premise [SEP] | question answer [SEP]
        span = slice(start, start + len(answer))
        grads = embeds.grad[:, span].numpy().astype(np.float64)  # (1, T, d)
        e = embeds[0, span].detach().numpy().astype(np.float64)
        return Attribution(word_attribution(grads, e, word_groups(answer)), grads, signed=True)


THRESHOLD_VERSION = 2  # 2: pairs from the tuning facts only, disjoint from the evaluated ones
# bump when the threshold calibration changes (pairs, similarity, choice); edits that do not change it keep it


def threshold_key(facts: Sequence[Fact]) -> str:
    """Cache key (16 hex) of the threshold calibrated on ``facts``: ``recipe_key`` over
    "sdlg-threshold", ``THRESHOLD_VERSION`` and each fact's (name, attribute), the pairs'
    only input from them."""
    return recipe_key("sdlg-threshold", THRESHOLD_VERSION, [[f.name, f.attribute] for f in facts])


def cosine_equivalence(facts: Sequence[Fact] | None = None) -> CosineEquivalence:
    """MiniLM cosine equivalence at the threshold ``study.calibrate_threshold`` picks on the
    tuning facts ``facts`` (default: the tuning split of the default corpus,
    ``corpus.split_facts``), cached under ``cache_dir("sdlg")`` by ``threshold_key``."""
    from edgekit.models.sdlg.study import calibrate_threshold

    facts = list(facts) if facts is not None else split_facts(build_facts())[0]
    path = cache_dir("sdlg") / f"threshold-{threshold_key(facts)}.json"
    if path.exists():
        calibration = json.loads(path.read_text())
        semantic = CosineEquivalence(calibration["threshold"])
    else:
        semantic = CosineEquivalence(1.0)
        calibration = calibrate_threshold(semantic, facts)
        semantic.threshold = calibration["threshold"]
        atomic_write_text(path, json.dumps(calibration, indent=1))
    semantic.calibration = calibration  # type: ignore[attr-defined]
    return semantic
