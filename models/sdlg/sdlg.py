"""SDLG over the causal-LM interface: the initial answer, ranked substitutions, alternatives,
clusters and the weighted semantic entropy; and the multinomial-sampling baselines.

For a question q (the LM vocabulary's prompt, vocab.py: ``[CLS] q [SEP]`` for the in-repo LM),
following the paper's public code (ml-jku/SDLG):

1. y0 = beam search answer; P[t, :] the LM's next-token distribution at each answer position.
2. Attribution of y0's words by the equivalence model (semantic.py).
3. Candidates (t, v): t the first token of each word of y0 (a "##" piece, or a BPE piece with
   no space before it, is never replaced), v any token of the LM's vocabulary with
   P[t, v] > ``token_prob`` other than the original token o and the special tokens; EOS (any
   stop token) is a candidate after the first word (it truncates y0). Three scores per
   candidate: the word's attribution, the substitution score (e.g. cos(E[o] - E[v], g_t), E
   the equivalence model's embeddings at the LM's ids, mapped through text by
   text_equivalence.py when the two vocabularies differ) and the importance P[t, v]. Each is
   dense-ranked (0 = best, ties share a rank, the next value gets the next rank) and
   candidates are ordered by the alpha-weighted mean rank. A one-word answer is ranked by
   importance alone (no attribution is computed).
4. In that order, prefix y0[:t] + v is completed by beam search (an EOS candidate needs no
   LM call) until ``alternatives`` distinct answers (different from y0 and each other) exist
   or candidates run out. An alternative's log-probability is log P(y0[:t]) + log P[t, v] +
   the completion's, all read from distributions already computed; its weight is P[t, v].
5. Bidirectional-equivalence clusters over [y0, alternatives]; the score is
   ``sdlg_semantic_entropy`` (entropy.py) of the sequence log-probabilities (``length="sum"``)
   or of the per-token log-probabilities (``length="mean"``, the paper's "normalised"
   variant); the other one is kept in ``extras``.

Every LM call goes through a ``CausalLM`` whose counter gives the cost in forward passes: one
per sequence per generated token (what a KV-cached decoder runs), the same count for beam
search and sampling: ``initial_rows`` (y0, shared by every method: correctness is judged on
it) and ``rows`` (SDLG's own).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.sdlg.decoding import Generation, beam_search, sample
from edgekit.models.sdlg.entropy import (
    predictive_entropy,
    sampling_semantic_entropy,
    sdlg_semantic_entropy,
)
from edgekit.models.sdlg.semantic import EquivalenceModel, greedy_clusters, text_ids
from edgekit.models.sdlg.vocab import WORDPIECE, AnswerVocabulary
from edgekit.models.tinylm.causal import CausalLM

LENGTHS = ("sum", "mean")


@dataclass(frozen=True)
class SDLGConfig:
    """SDLG's knobs. ``beams``, ``token_prob`` and ``alphas`` are the paper's;
    ``alternatives``, ``completion_beams`` and ``length`` are chosen on the tuning facts
    (tuning.tune_sdlg, facts disjoint from the evaluated ones), under the LM cost of 10-sample
    sampling."""

    beams: int = 5  # beam width of the initial answer
    completion_beams: int = 1  # beam width completing an alternative (the paper: 5)
    alternatives: int = 10  # distinct alternatives to generate at most (the paper: 10)
    token_prob: float = 1e-3  # candidates need P[t, v] above this
    alphas: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # attribution, substitution, imp.
    max_new_tokens: int = 8
    samples: int = 10  # multinomial samples of the baselines
    length: str = "mean"  # "mean": per-token log-probabilities; "sum": sequence ones

    def __post_init__(self) -> None:
        for name in ("beams", "completion_beams", "max_new_tokens", "samples"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise InputError(
                    f"SDLGConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}"
                )
        if not isinstance(self.alternatives, int) or self.alternatives < 0:
            raise InputError(
                f"SDLGConfig.alternatives must be an integer >= 0, got {self.alternatives!r}"
            )
        if not 0.0 <= self.token_prob < 1.0:
            raise InputError(f"SDLGConfig.token_prob must be in [0, 1), got {self.token_prob}")
        if len(self.alphas) != 3 or min(self.alphas) < 0 or sum(self.alphas) <= 0:
            raise InputError(
                f"SDLGConfig.alphas must be 3 non-negative weights (attribution, substitution, "
                f"importance) with a positive sum, got {self.alphas}"
            )
        if self.length not in LENGTHS:
            raise InputError(f"SDLGConfig.length must be one of {LENGTHS}, got {self.length!r}")


@dataclass
class Candidate:
    """A substitution: token ``token`` at answer position ``position``, its three scores and
    their weighted mean rank (lower first)."""

    position: int
    token: int
    attribution: float
    substitution: float
    importance: float
    rank: float = 0.0


@dataclass
class SDLGResult:
    """What SDLG found for one question."""

    question: str
    answer: str
    answer_ids: list[int]
    entropy: float
    alternatives: list[str]
    log_probs: list[float]
    weights: list[float]
    clusters: list[int]
    initial_rows: int
    rows: int
    calls: int
    candidates: int
    truncated: bool
    extras: dict[str, Any] = field(default_factory=dict)


def rank_candidates(candidates: list[Candidate], alphas: tuple[float, ...]) -> list[Candidate]:
    """Candidates ordered by the alpha-weighted mean of their three score ranks; ``rank`` is
    set on each. Ranks are dense, as in the paper's ``rank_tensor``: 0 = the highest score,
    equal scores share a rank and the next lower score gets the next rank (an attribution,
    shared by every candidate of a word, moves a candidate by one rank per word, not by the
    number of candidates of the better words)."""
    if not candidates:
        return []
    columns = ("attribution", "substitution", "importance")
    total = np.zeros(len(candidates))
    for alpha, column in zip(alphas, columns, strict=True):
        values = np.array([getattr(c, column) for c in candidates])
        distinct = np.unique(values)[::-1]  # descending
        ranks = np.searchsorted(-distinct, -values)  # index of each value among distinct ones
        total += alpha * ranks
    for c, r in zip(candidates, total / sum(alphas), strict=True):
        c.rank = float(r)
    return sorted(candidates, key=lambda c: (c.rank, -c.importance, c.position, c.token))


class SDLG:
    """SDLG and the sampling baselines for one LM, its vocabulary and one equivalence model.

    ``vocab`` (vocab.py) is the LM's: the in-repo tiny LM's WordPiece ids by default, or a
    ``TokenizerVocabulary`` for a causal LM with its own tokenizer. ``semantic`` reads the
    texts its ``text(question ids, answer ids)`` builds (MiniLM ids ``[CLS] q a [SEP]`` for a
    model without that method) and gives attributions and embeddings at the LM's ids."""

    def __init__(
        self,
        lm: CausalLM,
        semantic: EquivalenceModel,
        config: SDLGConfig | None = None,
        vocab: AnswerVocabulary | None = None,
    ) -> None:
        self.lm, self.semantic = lm, semantic
        self.config = config or SDLGConfig()
        self.vocab = vocab or WORDPIECE
        self._text: Callable[[Sequence[int], Sequence[int]], Hashable] = getattr(
            semantic, "text", text_ids
        )
        self.max_question = lm.max_len - self.vocab.prompt_tokens - self.config.max_new_tokens
        if self.max_question < 1:
            raise InputError(f"LM context {lm.max_len} leaves no room for a question")

    def candidates(self, question_ids: list[int], initial: Generation) -> list[Candidate]:
        """Scored candidate substitutions of the initial answer, unranked (module doc, step 3).

        Attribution and substitution scores are 0 for a one-word answer (ranked by importance
        alone, as the paper does)."""
        answer = initial.tokens
        if not answer:
            return []
        groups = self.vocab.word_groups(answer)  # (T,) word index of each token
        single_word = groups[-1] == 0
        attribution = None if single_word else self.semantic.attribution(question_ids, answer)
        embeddings = self.semantic.embedding_matrix
        stop, special, size = self.vocab.stop_ids, self.vocab.special_ids, self.vocab.size
        out = []
        for t, original in enumerate(answer):
            if t > 0 and groups[t] == groups[t - 1]:
                continue  # a "##" piece: only a word's first token is replaced
            probs = np.exp(initial.distributions[t])  # (V,)
            allowed = (v for v in np.nonzero(probs > self.config.token_prob)[0] if v != original)
            tokens = np.array(  # a stop token (EOS) only after the first word: a truncation
                [
                    v
                    for v in allowed
                    if v < size
                    and ((v not in special and v not in stop) or (v in stop and groups[t] > 0))
                ],
                dtype=np.int64,
            )
            if tokens.size == 0:
                continue
            if attribution is None:
                word_score, subs = 0.0, np.zeros(tokens.size)
            else:
                word_score = float(attribution.token_scores[t])
                subs = attribution.substitution_scores(t, original, tokens, embeddings)
            for v, sub in zip(tokens, subs, strict=True):
                out.append(Candidate(t, int(v), word_score, float(sub), float(probs[v])))
        return out

    def score(self, question: str) -> SDLGResult:
        """SDLG on ``question``: y0, up to ``alternatives`` alternatives, clusters, entropy.

        ``extras`` holds ``lengths`` (tokens scored per answer, EOS included), both entropies
        (``entropy_sum``, ``entropy_mean``), ``rows_after`` (SDLG's LM rows once each
        alternative was found, for cost-vs-alternatives curves) and ``substitutions`` (the
        (position, token) each alternative came from)."""
        cfg = self.config
        prefix, q_ids, truncated = self.vocab.prefix(question, self.max_question)
        stop = self.vocab.stop_ids
        rows0, calls0 = self.lm.rows, self.lm.calls
        initial = beam_search(self.lm, prefix, cfg.beams, cfg.max_new_tokens, True, stop)
        initial_rows = self.lm.rows - rows0
        ranked = rank_candidates(self.candidates(q_ids, initial), cfg.alphas)
        prefix_lp = np.r_[0.0, np.cumsum(initial.token_log_probs)]  # log P(y0[:t])
        answers = [tuple(initial.tokens)]
        log_probs, weights = [initial.log_prob], [1.0]
        lengths = [len(initial.token_log_probs)]  # tokens scored, EOS included when reached
        rows_after: list[int] = []
        substitutions: list[tuple[int, int]] = []  # (position t, token v) per alternative
        for cand in ranked:
            if len(answers) - 1 >= cfg.alternatives:
                break
            head = initial.tokens[: cand.position]
            if cand.token in stop:  # y0 truncated before word t: no LM call
                tokens, tail_lp, tail_len = tuple(head), 0.0, 0
            else:
                head = head + [cand.token]
                budget = cfg.max_new_tokens - len(head)
                if budget <= 0:
                    continue
                completion = beam_search(
                    self.lm, prefix + head, cfg.completion_beams, budget, stop=stop
                )
                tokens = tuple(head + completion.tokens)
                tail_lp, tail_len = completion.log_prob, len(completion.token_log_probs)
            if tokens in answers or not tokens:
                continue
            answers.append(tokens)
            log_probs.append(float(prefix_lp[cand.position]) + np.log(cand.importance) + tail_lp)
            weights.append(cand.importance)
            lengths.append(cand.position + 1 + tail_len)
            substitutions.append((cand.position, cand.token))
            rows_after.append(self.lm.rows - rows0 - initial_rows)
        texts = [self._text(q_ids, list(a)) for a in answers]
        clusters = greedy_clusters(
            len(texts), lambda i, j: self.semantic.equivalent(texts[i], texts[j])
        )
        entropies = {
            "sum": sdlg_semantic_entropy(log_probs, weights, clusters),
            "mean": sdlg_semantic_entropy(
                np.array(log_probs) / np.maximum(lengths, 1), weights, clusters
            ),
        }
        return SDLGResult(
            question=question,
            answer=self.vocab.decode(initial.tokens),
            answer_ids=list(initial.tokens),
            entropy=entropies[cfg.length],
            alternatives=[self.vocab.decode(a) for a in answers[1:]],
            log_probs=log_probs,
            weights=weights,
            clusters=clusters,
            initial_rows=initial_rows,
            rows=self.lm.rows - rows0 - initial_rows,
            calls=self.lm.calls - calls0,
            candidates=len(ranked),
            truncated=truncated,
            extras={
                "lengths": lengths,
                "entropy_sum": entropies["sum"],
                "entropy_mean": entropies["mean"],
                "rows_after": rows_after,
                "substitutions": substitutions,
            },
        )

    def sampling_baselines(self, question: str, seed: int = 0) -> dict[str, Any]:
        """``samples`` multinomial answers: their semantic entropy and predictive entropy, the
        LM rows they cost and the sampled texts."""
        cfg = self.config
        prefix, q_ids, truncated = self.vocab.prefix(question, self.max_question)
        rows0 = self.lm.rows
        rng = np.random.default_rng(seed)
        gens = sample(
            self.lm, prefix, cfg.samples, rng, cfg.max_new_tokens, stop=self.vocab.stop_ids
        )
        rows = self.lm.rows - rows0
        texts = [self._text(q_ids, g.tokens) for g in gens]
        clusters = greedy_clusters(
            len(texts), lambda i, j: self.semantic.equivalent(texts[i], texts[j])
        )
        log_probs = [g.log_prob for g in gens]
        per_token = [g.log_prob / max(len(g.token_log_probs), 1) for g in gens]
        keys = [tuple(g.tokens) for g in gens]
        return {
            "semantic_entropy": sampling_semantic_entropy(log_probs, clusters, keys),
            "predictive_entropy": predictive_entropy(log_probs),
            "semantic_entropy_length_normalised": sampling_semantic_entropy(
                per_token, clusters, keys
            ),
            "predictive_entropy_length_normalised": predictive_entropy(per_token),
            "rows": rows,
            "samples": [self.vocab.decode(g.tokens) for g in gens],
            "clusters": clusters,
            "truncated": truncated,
        }
