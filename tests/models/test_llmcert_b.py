"""LLMCert-B: Clopper-Pearson maths, the certifier, prefix distributions, detectors, the LM
bridges (embedding input, batched greedy) and the planted bias of the trained LMs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgekit.errors import InputError
from edgekit.models.llmcert_b import corpus
from edgekit.models.llmcert_b.certify import (
    CounterfactualPrompt,
    binomial_tail,
    certify,
    clopper_pearson,
    generate_all,
)
from edgekit.models.llmcert_b.detectors import label_mismatch, phrase_label, score_gap
from edgekit.models.llmcert_b.generators import (
    EmbeddingGenerator,
    TextGenerator,
    hidden_from_embeddings,
    last_position_backend,
)
from edgekit.models.llmcert_b.prefixes import EmbeddingNoise, JailbreakMixture, RandomTokens
from edgekit.models.tinylm.causal import CausalLM, torch_backend
from edgekit.models.tinylm.model import TinyCausalLM

torch.set_num_threads(1)


@pytest.mark.parametrize("n", [1, 7, 50, 200])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_clopper_pearson_matches_scipy_beta(n: int, confidence: float) -> None:
    from scipy.stats import beta

    alpha = 1 - confidence
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        lower, upper = clopper_pearson(k, n, confidence)
        want_lo = 0.0 if k == 0 else beta.ppf(alpha / 2, k, n - k + 1)
        want_hi = 1.0 if k == n else beta.ppf(1 - alpha / 2, k + 1, n - k)
        assert lower == pytest.approx(want_lo, abs=1e-9)
        assert upper == pytest.approx(want_hi, abs=1e-9)
        assert lower <= k / n <= upper


def test_binomial_tail_matches_scipy() -> None:
    from scipy.stats import binom

    for n, k, p in [(50, 10, 0.3), (50, 45, 0.95), (7, 0, 0.5), (20, 21, 0.5), (30, 30, 0.99)]:
        assert binomial_tail(k, n, p) == pytest.approx(binom.sf(k - 1, n, p), abs=1e-12)


def test_clopper_pearson_rejects_bad_counts() -> None:
    with pytest.raises(InputError, match="0 <= k <= n"):
        clopper_pearson(5, 4)
    with pytest.raises(InputError, match="confidence"):
        clopper_pearson(1, 4, 1.0)


class _Alternating:
    """Prefix "odd" or "even" in turn: a text distribution with a known biased share."""

    name, kind = "alternating", "text"

    def __init__(self) -> None:
        self.count = 0

    def sample(self, rng: np.random.Generator) -> str:
        self.count += 1
        return "odd" if self.count % 2 else "even"


def test_certify_counts_unbiased_draws_and_bounds_them() -> None:
    # the generator answers by group unless the prefix is "even": half the draws are biased
    def generator(prompt: str) -> str:
        if prompt.startswith("even"):
            return "doctor"
        return "nurse" if "woman" in prompt else "doctor"

    prompt = CounterfactualPrompt("the {group} who cares works as a", ("man", "woman"))
    cert = certify(prompt, _Alternating(), generator, label_mismatch(str), n=40, confidence=0.9)
    assert (cert.n, cert.unbiased) == (40, 20)
    assert (cert.lower, cert.upper) == pytest.approx(clopper_pearson(20, 40, 0.9))
    assert cert.examples[0]["responses"] == ["doctor", "nurse"] and cert.examples[0]["biased"]
    assert cert.examples[1]["responses"] == ["doctor", "doctor"]


def test_counterfactual_prompt_and_generate_all_errors() -> None:
    with pytest.raises(InputError, match="group"):
        CounterfactualPrompt("no slot", ("a", "b"))
    with pytest.raises(InputError, match=">= 2 groups"):
        CounterfactualPrompt("{group}", ("a",))
    with pytest.raises(InputError, match="batch_embedded"):
        generate_all(lambda p: p, "embedding", [(np.zeros((2, 4)), "x")])
    assert generate_all(str.upper, "text", [("pre", "fix"), ("", "b")]) == ["PRE FIX", "B"]


def test_random_tokens_and_jailbreak_mixture() -> None:
    rng = np.random.default_rng(0)
    vocab = ("alpha", "beta", "gamma")
    words = RandomTokens(vocab, length=12).sample(rng).split()
    assert len(words) == 12 and set(words) <= set(vocab)
    jailbreaks = ("one two .", "three four .", "five six .")
    plain = JailbreakMixture(jailbreaks, vocab, insert_p=0.0, mutate_p=0.0)
    assert {plain.sample(rng) for _ in range(30)} <= set(jailbreaks)
    full = JailbreakMixture(jailbreaks, vocab, insert_p=1.0, mutate_p=0.0).sample(rng)
    assert sorted(full.split()) == sorted(" ".join(jailbreaks).split())
    mutated = JailbreakMixture(jailbreaks, vocab, insert_p=0.0, mutate_p=1.0).sample(rng)
    assert len(mutated.split()) == 3 and set(mutated.split()) <= set(vocab)
    draws = [JailbreakMixture(jailbreaks, vocab).sample(rng) for _ in range(400)]
    inserted = np.mean([len(d.split()) > 3 for d in draws])
    assert 0.25 < inserted < 0.5  # P(at least one of two inserted at p 0.2) = 0.36


def test_embedding_noise_is_bounded_uniform_noise_around_the_rows() -> None:
    matrix = np.random.default_rng(1).normal(size=(20, 8)).astype(np.float32)
    dist = EmbeddingNoise.around([3, 5, 7], matrix, mag=0.04)
    sample = dist.sample(np.random.default_rng(2))
    assert sample.shape == (3, 8) and sample.dtype == np.float32
    delta = sample - matrix[[3, 5, 7]]
    half_width = 0.04 * np.abs(matrix).max() / 2
    assert np.all(np.abs(delta) <= half_width + 1e-6)
    assert np.abs(delta).max() > 0.5 * half_width
    with pytest.raises(InputError):
        EmbeddingNoise(np.zeros(4), 1.0)


def test_detectors() -> None:
    assert label_mismatch(corpus.occupation_of)(["a doctor", "doctor"]) is False
    assert label_mismatch(corpus.occupation_of)(["doctor", "nurse"]) is True
    assert score_gap(len, 2)(["ab", "abcd"]) is False
    assert score_gap(len, 2)(["ab", "abcde"]) is True
    agree = phrase_label({"agree": ["i agree", "yes"], "disagree": ["i disagree", "no"]})
    assert [agree(t) for t in ("Yes, sure.", "I disagree", "maybe")] == [
        "agree",
        "disagree",
        "none",
    ]
    with pytest.raises(InputError):
        label_mismatch(str)(["only one"])


def test_corpus_plants_the_bias_only_in_the_biased_variant() -> None:
    for activity in corpus.ACTIVITIES:
        a, b = (corpus.answer(activity, g, biased=True) for g in ("man", "woman"))
        assert a != b
        a, b = (corpus.answer(activity, g, biased=False) for g in ("man", "woman"))
        assert a == b
    prompts = corpus.base_prompts(4)
    assert len(prompts) == 4 and prompts[1].groups == corpus.PAIRS[1]


def _tiny_lm() -> TinyCausalLM:
    torch.manual_seed(0)
    return TinyCausalLM(dim=16, layers=1, heads=2, max_len=32).eval()


def test_embedding_forward_matches_the_token_forward() -> None:
    model = _tiny_lm()
    ids = torch.tensor([[101, 1996, 2158, 102, 0], [101, 2023, 2003, 1037, 102]])
    mask = (ids != 0).long()
    with torch.inference_mode():
        want = model.hidden(ids, mask)
        got = hidden_from_embeddings(model, model.tokens(ids), mask)
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()])


def test_greedy_generators_agree_across_backends_and_inputs() -> None:
    model = _tiny_lm()
    prompts = ["the man who cares works as a", "it was late . the girl works as a"]
    fast = TextGenerator(CausalLM(last_position_backend(model), 32), max_new_tokens=3)
    full = TextGenerator(CausalLM(torch_backend(model), 32), max_new_tokens=3, chunk=1)
    embedded = EmbeddingGenerator(model, max_new_tokens=3)
    answers = fast.batch(prompts)
    assert answers == full.batch(prompts) == [fast(p) for p in prompts]
    empty = np.zeros((0, 16), dtype=np.float32)
    assert embedded.batch_embedded([(empty, p) for p in prompts]) == answers
    # a text prefix and the same prefix given as its embedding rows answer alike
    from edgekit.models.tinylm.tokens import encode

    rows = model.tokens.weight.detach().numpy()[encode("it was late .")]
    assert embedded.batch_embedded([(rows, "the girl works as a")]) == [answers[1]]


@pytest.mark.slow
def test_trained_lms_carry_and_drop_the_planted_bias() -> None:
    from edgekit.models.llmcert_b.corpus import plain_answers, plain_unbiased
    from edgekit.models.llmcert_b.lm import BiasLMConfig, train_cached

    for biased, want in ((True, 0.0), (False, 1.0)):
        config = BiasLMConfig(biased=biased)
        model, _ = train_cached(config)
        generator = TextGenerator(CausalLM(last_position_backend(model), config.max_len))
        assert plain_unbiased(plain_answers(generator)) == want
