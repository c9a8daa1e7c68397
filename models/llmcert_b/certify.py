"""Counterfactual-bias certificates: Clopper-Pearson bounds on P(unbiased response set).

A certificate is about a ``CounterfactualPrompt`` (one template, several demographic groups
filled in) under a prefix distribution: draw ``n`` prefixes, put each in front of every
counterfactual prompt, generate one response per group, ask a bias detector whether that set of
responses is biased, and count the ``k`` unbiased draws. The certificate is the exact
(Clopper-Pearson) two-sided interval on P(unbiased) at ``confidence``:
``lower = BetaInv(alpha / 2; k, n - k + 1)``, ``upper = BetaInv(1 - alpha / 2; k + 1, n - k)``
(``lower = 0`` when k = 0, ``upper = 1`` when k = n).

The beta quantiles are found here from the identity ``I_p(k, n - k + 1) = P(Bin(n, p) >= k)``
(bisection on an exact binomial tail), so the certifier needs no scipy; the tests check it
against ``scipy.stats.beta``.

The generator is any callable ``prompt -> text`` (optionally with ``batch(prompts) -> texts``);
for embedding-space prefixes it is an object with ``batch_embedded([(prefix (P, d), prompt)])``
(see generators.py). The detector is any callable ``responses (one per group) -> bool`` that
is True when the set is biased (detectors.py builds them from per-text judges).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgekit.errors import InputError

Detector = Callable[[Sequence[str]], bool]


def _log_binom_pmf(i: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if i == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if i == n else -math.inf
    return (
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        + i * math.log(p) + (n - i) * math.log1p(-p)
    )  # fmt: skip


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) >= k), summed exactly in log space."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    terms = [_log_binom_pmf(i, n, p) for i in range(k, n + 1)]
    top = max(terms)
    if top == -math.inf:
        return 0.0
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _bisect(f: Callable[[float], float], target: float) -> float:
    """The p in [0, 1] with f(p) = target for f increasing in p (80 halvings: < 1e-16)."""
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval (lower, upper) on a binomial proportion from k successes in n.

    lower = BetaInv(alpha/2; k, n-k+1) (0 if k = 0), upper = BetaInv(1-alpha/2; k+1, n-k)
    (1 if k = n), alpha = 1 - confidence.
    """
    if n < 1 or not 0 <= k <= n:
        raise InputError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    # P(Bin(n, p) >= k) increases with p: lower bound where it reaches alpha/2
    lower = 0.0 if k == 0 else _bisect(lambda p: binomial_tail(k, n, p), alpha / 2)
    # P(Bin(n, p) <= k) decreases with p: upper bound where it falls to alpha/2
    upper = 1.0 if k == n else _bisect(lambda p: binomial_tail(k + 1, n, p), 1 - alpha / 2)
    return lower, upper


@dataclass(frozen=True)
class CounterfactualPrompt:
    """A prompt template with a ``{group}`` slot and the demographic groups to put there."""

    template: str
    groups: tuple[str, ...]

    def __post_init__(self) -> None:
        if "{group}" not in self.template:
            raise InputError(f"template needs a '{{group}}' slot: {self.template!r}")
        if len(self.groups) < 2:
            raise InputError(f"a counterfactual prompt needs >= 2 groups, got {self.groups}")

    def texts(self) -> list[str]:
        """One prompt per group, in ``groups`` order."""
        return [self.template.format(group=g) for g in self.groups]


@dataclass
class Certificate:
    """Bounds on P(unbiased) for one counterfactual prompt under one prefix distribution."""

    prompt: str
    distribution: str
    n: int
    unbiased: int
    confidence: float
    lower: float
    upper: float
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def estimate(self) -> float:
        return self.unbiased / self.n

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "distribution": self.distribution,
            "n": self.n,
            "unbiased": self.unbiased,
            "estimate": self.estimate,
            "confidence": self.confidence,
            "lower": self.lower,
            "upper": self.upper,
            "examples": self.examples,
        }


def _prefixed(prefix: str, prompt: str) -> str:
    return f"{prefix} {prompt}" if prefix else prompt


def generate_all(generator: Any, kind: str, queries: list[tuple[Any, str]]) -> list[str]:
    """Responses to (prefix, prompt) queries: text prefixes are prepended to the prompt and
    go through ``generator.batch`` (or one call each); embedding prefixes need
    ``generator.batch_embedded``."""
    if kind == "embedding":
        if not hasattr(generator, "batch_embedded"):
            raise InputError(
                "an embedding-space prefix distribution needs a generator with "
                "batch_embedded([(prefix_embeddings, prompt)]), e.g. EmbeddingGenerator"
            )
        return list(generator.batch_embedded(queries))
    if kind != "text":
        raise InputError(f"prefix kind must be 'text' or 'embedding', got {kind!r}")
    texts = [_prefixed(str(prefix), prompt) for prefix, prompt in queries]
    if hasattr(generator, "batch"):
        return list(generator.batch(texts))
    return [str(generator(t)) for t in texts]


def certify(
    prompt: CounterfactualPrompt,
    distribution: Any,
    generator: Any,
    detector: Detector,
    n: int = 50,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
    keep_examples: int = 3,
) -> Certificate:
    """Certificate for ``prompt`` under prefixes from ``distribution``.

    ``distribution`` has ``name``, ``kind`` ("text" | "embedding") and ``sample(rng)`` (a
    prefix string, or embeddings (P, d) float32); each of the ``n`` draws is put in front of
    every group's prompt; ``detector(responses)`` is True when a draw's responses are biased.
    """
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    rng = rng if rng is not None else np.random.default_rng(0)
    texts = prompt.texts()
    prefixes = [distribution.sample(rng) for _ in range(n)]
    queries = [(p, t) for p in prefixes for t in texts]
    responses = generate_all(generator, distribution.kind, queries)
    groups = len(texts)
    unbiased, examples = 0, []
    for i, prefix in enumerate(prefixes):
        answers = responses[i * groups : (i + 1) * groups]
        biased = bool(detector(answers))
        unbiased += not biased
        if len(examples) < keep_examples:
            shown = prefix if isinstance(prefix, str) else f"<embeddings {tuple(prefix.shape)}>"
            examples.append({"prefix": shown, "responses": answers, "biased": biased})
    lower, upper = clopper_pearson(unbiased, n, confidence)
    return Certificate(
        prompt.template, distribution.name, n, unbiased, confidence, lower, upper, examples
    )
