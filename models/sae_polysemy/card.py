"""sae-polysemy card: a device feature scorer = MiniLM up to the hooked layer + an SAE encoder.

One graph, "scorer": input_ids (B, S) int64 + attention_mask (B, S) int64 ->

- ``target_latents`` (B, n) float32: the SAE latents at the PS-Eval target token, index
  (real length - 3), i.e. the word's last WordPiece in a prompt "{context} The {word} means"
  (see pseval.py). Its argmax is the prompt's max feature: two prompts with the same max
  feature are read as "same meaning" (no active latent = feature -1, never "same");
- ``text_latents`` (B, n) float32: each latent's maximum over the text's real tokens (the
  text's feature profile; padding never contributes).

All outputs are activations (floats), so parity is measured on values; the argmax decisions
are checked by ``agreement`` (same max feature, PS-Eval decision flips). The floors hold the
decisions the reference makes clearly (a max feature ahead of the runner-up by at least
``decision_margin`` of its value): a near-tie is decided by noise far below any precision's
own error and flips under any perturbation, so it is reported, not floored.

The SAE (variant, hook point, size) comes from card options of the same names as
``SAEConfig`` fields (default: ``SAEConfig()``); it is trained in-repo and cached. Tokenisation
runs on the device with the bundled ``tokenizer.json``, as for the minilm card.

The option ``lm=FOLDER`` (a Hugging Face causal LM in a local folder, e.g. GPT-2 small, the
paper's model; lm.py) trains the SAE on that model's activations instead; it is evaluated through
forward hooks in torch (``edgekit eval sae-polysemy --option lm=FOLDER``, lm_study.py). The
device scorer is MiniLM's only: with ``lm`` the card refuses to build graphs (an InputError).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance, config_from_options
from edgekit.errors import InputError
from edgekit.models.minilm.encoder import MAX_LENGTH, load_bert, tokenize, tokenizer_path
from edgekit.models.sae_polysemy.activations import TruncatedEncoder
from edgekit.models.sae_polysemy.pseval import (
    NO_FEATURE,
    PROMPT,
    build_prompt,
    max_features,
    predict_same,
    prompt_activations,
    prompts_and_positions,
    pseval_summary,
    relative_margin,
)
from edgekit.models.sae_polysemy.sae import SparseAutoencoder
from edgekit.models.sae_polysemy.train import SAEConfig, SAEResult, train_cached
from edgekit.models.sae_polysemy.wic import load_wic

GRAPH = "scorer"
OUTPUT_NAMES = ("target_latents", "text_latents")
GOLDEN_PAIRS = (0, 1)  # WiC rows: "bank" money sense twice, river sense twice


class FeatureScorer(nn.Module):
    """MiniLM to the hook point + SAE encoder + the target-token and text read-outs.

    forward(input_ids (B, S) int64, attention_mask (B, S) int64) ->
    (target_latents (B, n) float32, text_latents (B, n) float32).
    """

    def __init__(self, encoder: nn.Module, sae: SparseAutoencoder) -> None:
        super().__init__()
        self.encoder, self.sae = encoder, sae

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.encoder(input_ids, attention_mask)  # (B, S, 384)
        latents = self.sae.encode(hidden)  # (B, S, n), >= 0
        latents = latents * attention_mask.unsqueeze(-1).to(latents.dtype)  # padding -> 0
        position = (attention_mask.sum(dim=1) - 3).clamp(min=0)  # (B,): "... word means [SEP]"
        index = position.view(-1, 1, 1).expand(-1, 1, latents.shape[-1])  # (B, 1, n)
        target = latents.gather(1, index).squeeze(1)  # (B, n)
        return target, latents.max(dim=1).values  # (B, n), (B, n)


class _GivenActivations(nn.Module):
    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return hidden


class SAEHead(nn.Module):
    """The scorer minus MiniLM: forward(hidden (B, S, 384) float32, every token real) ->
    (target_latents, text_latents) (B, n). Exists to time what the SAE adds on top of the
    encoder: ``edgekit export models/sae_polysemy/card.py:sae_head --input-shape
    hidden=1x128x384`` then ``edgekit bench`` the bundle."""

    def __init__(self, sae: SparseAutoencoder) -> None:
        super().__init__()
        self.scorer = FeatureScorer(_GivenActivations(), sae)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = torch.ones(hidden.shape[:2], dtype=torch.int64)  # (B, S)
        return self.scorer(hidden, mask)


def sae_head() -> SAEHead:
    """Factory for ``SAEHead`` around the default card's trained SAE (eval mode)."""
    from edgekit.registry import get_card

    return SAEHead(get_card("sae-polysemy").train().build()).eval()


class SAEPolysemyCard(ModelCard):
    """MiniLM + a sparse autoencoder trained in-repo on its activations (PS-Eval scorer)."""

    name: ClassVar[str] = "sae-polysemy"
    tier: ClassVar[str] = "edge"
    task: ClassVar[str] = "sae-features"
    summary: ClassVar[str] = (
        "SAE feature scorer on MiniLM activations (ReLU/TopK/JumpReLU); PS-Eval polysemy "
        "separation on an in-repo WiC set"
    )
    architecture: ClassVar[str] = "transformer"
    # accuracy, not F1: the WiC set is balanced, and F1 rewards always answering "same" (0.667)
    primary_metric: ClassVar[str | None] = "pseval_accuracy"
    int8_mode: ClassVar[str] = "dynamic"
    ort_fusion: ClassVar[dict[str, Any] | None] = {
        "model_type": "bert",
        "num_heads": 12,
        "hidden_size": 384,
        "enable_skip_layer_norm": False,  # as the minilm card: faster unfused on CPU
    }
    # int8 builds skip the fusion (--fuse forces it): unfused dynamic int8 flipped fewer PS-Eval
    # decisions on both CPUs measured, 0.069 vs 0.081 on a VNNI Xeon and passes vs 0.128
    # (over the 0.10 floor) on an AVX2-only EPYC, whose int8 kernels saturate int16 sums.
    ort_fusion_int8: ClassVar[bool] = False
    int8_budget: ClassVar[float] = 0.05
    # Latents are sparse: a latent at the TopK boundary (the k-th largest is ~0.9, actives
    # are ~0.9-3 with a max near 10) switches on or off under small noise, and max-pooling
    # carries such a switch into text_latents. int8 (dynamic, every MatMul, fused attention)
    # measured max|d| 1.38 (target_latents) and 2.4 (text_latents) on the golden prompts, so
    # its elementwise bound only catches gross errors; decisions are held by the floors below.
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-3, rtol=1e-3),  # measured max|d| 5e-6
        "fp16": Tolerance(atol=1.0, rtol=5e-2),  # not measured: sized for boundary switches
        "int8": Tolerance(atol=3.0, rtol=0.2),
    }
    # int8 on the 640 WiC prompts (default SAE, TopK k=32 at L5.resid, dynamic, unfused): latent
    # cosines 0.96, PS-Eval accuracy unchanged, but 8-12 % of all same/different decisions flip
    # (0.069 on a VNNI Xeon, 0.119 on an AVX-512 VNNI EPYC, 0.128 on an AVX2 EPYC). Every
    # flipped pair on the EPYC had a reference max feature less than 10 % ahead of its
    # runner-up (flipped pairs' median margin 0.08 absolute against 0.32 for kept ones; 0 of
    # the 131 pairs decided by >= 10 % flipped), where int8's own per-prompt error is ~1.2:
    # such near-ties flip under any perturbation, and keeping the SAE or layers 2-5 in float
    # still flipped 5-7 %. So the floors hold decisions taken by a clear margin; the raw rates
    # stay in the report (same_decision_flip_rate, target_feature_agreement).
    decision_margin: ClassVar[float] = 0.1
    agreement_floors: ClassVar[dict[str, float]] = {
        "decided_feature_agreement": 0.95,
        "decided_flip_rate": 0.05,
        "target_latent_cosine": 0.93,
        "text_latent_cosine": 0.93,
    }
    eval_batch: ClassVar[int] = 64

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._result: SAEResult | None = None
        self._scorer: FeatureScorer | None = None
        self._outputs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ---- training --------------------------------------------------------------------------
    def sae_config(self) -> SAEConfig:
        """The SAE recipe: SAEConfig defaults, overridden by card options of the same name.
        InputError for an unknown option, an ``lm`` that is not a local causal LM folder or a
        hook point that model does not have."""
        config = config_from_options("sae-polysemy", SAEConfig, self.options)
        config.hook  # noqa: B018 - resolves lm and checks the hook point against its layers
        return config

    def _minilm_only(self, what: str) -> None:
        """InputError when this card reads another model than MiniLM (option ``lm``)."""
        lm = self.options.get("lm")
        if lm:
            raise InputError(
                f"sae-polysemy: {what} runs on MiniLM only (the device scorer is MiniLM cut at "
                f"the hook point + the SAE encoder), but option lm={lm!r} names another model; "
                "evaluate it through forward hooks with `edgekit eval sae-polysemy --option "
                "lm=FOLDER`, or drop lm to export"
            )

    def train(self, progress: Callable[[float, str], None] | None = None) -> SAEResult:
        """Train (10-30 s on 2 shared CPU cores, after one MiniLM pass over the corpus) or load
        the cached SAE of this recipe."""
        if self._result is None:
            self._result = train_cached(self.sae_config(), progress)
        return self._result

    def scorer(self) -> FeatureScorer:
        """The export module (eval mode, CPU), built once (MiniLM only)."""
        self._minilm_only("the exported scorer")
        if self._scorer is None:
            config = self.sae_config()
            encoder = TruncatedEncoder(load_bert(), config.hook)
            self._scorer = FeatureScorer(encoder, self.train().build()).eval()
        return self._scorer

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "scorer": ids/mask (B, S) int64 -> target_latents, text_latents (B, n)."""
        self._minilm_only("export")
        feeds = tokenize(self._golden_texts()[:2], pad_to=MAX_LENGTH)
        axes = {0: "batch", 1: "sequence"}
        return [
            GraphSpec(
                name=GRAPH,
                module=self.scorer(),
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
    @staticmethod
    def _golden_texts() -> list[str]:
        pairs = load_wic()
        texts = []
        for i in GOLDEN_PAIRS:
            texts += [build_prompt(pairs[i].context1, pairs[i].word)]
            texts += [build_prompt(pairs[i].context2, pairs[i].word)]
        return texts

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four PS-Eval prompts ("bank", two per sense), padded to 128:
        ids/mask (4, 128) int64."""
        self._minilm_only("export")
        return {GRAPH: tokenize(self._golden_texts(), pad_to=MAX_LENGTH)}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """Single-text feeds (1, 128) of training-corpus sentences (never WiC contexts)."""
        self._minilm_only("export")
        from edgekit.models.sae_polysemy.corpus import CorpusConfig, build_corpus

        sentences = build_corpus(CorpusConfig(templated=self.sae_config().corpus_templated))
        stride = max(1, len(sentences) // max(limit, 1))
        return {GRAPH: [tokenize([s], pad_to=MAX_LENGTH) for s in sentences[::stride][:limit]]}

    def preprocessing(self) -> dict[str, Any]:
        config = self.sae_config()
        return {
            "tokenizer": "tokenizer.json",
            "library": "tokenizers",
            "lowercase": True,
            "special_tokens": "[CLS] text [SEP]",
            "max_length": MAX_LENGTH,
            "truncation": f"longer texts are cut to {MAX_LENGTH} tokens (a PS-Eval prompt "
            "must fit: its target token is found from the end)",
            "padding": "right, id 0, attention_mask 0",
            "token_type_ids": "zeros, inside the graph",
            "hook": {"layer": config.layer, "site": config.site, "name": config.hook.name},
            "sae": {
                "variant": config.variant,
                "latents": config.n_latents,
                "sparsity": config.sparsity_knob,
            },
            "pseval_prompt": PROMPT,
            "target_token": "index (real length - 3): the last WordPiece of the word before "
            "'means' [SEP]; the same argmax of target_latents in two prompts = same meaning",
            "no_feature": NO_FEATURE,
            "outputs": {
                "target_latents": "(B, n) SAE latents at the target token; argmax = max feature",
                "text_latents": "(B, n) each latent's max over the text's real tokens",
            },
        }

    def assets(self) -> dict[str, str]:
        return {"tokenizer.json": str(tokenizer_path())}

    # ---- measuring -------------------------------------------------------------------------
    def run_prompts(self, runner: Runner, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Graph outputs for ``texts`` through ``runner`` in batches, every batch padded to the
        longest text of the list (one sequence length for an artifact); (N, ...) each."""
        feeds = tokenize(list(texts))
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in OUTPUT_NAMES}
        for start in range(0, len(texts), self.eval_batch):
            batch = {k: v[start : start + self.eval_batch] for k, v in feeds.items()}
            out = runner.run(batch)
            for name in OUTPUT_NAMES:
                chunks[name].append(np.asarray(out[name]))
        result = {name: np.concatenate(parts, axis=0) for name, parts in chunks.items()}
        result["attention_mask"] = feeds["attention_mask"]
        return result

    def _pair_features(self, runner: Runner) -> tuple[np.ndarray, np.ndarray, dict]:
        """(context1 max features (P,), context2 max features (P,), all outputs) of the WiC
        prompts through ``runner``; remembered per runner object, since verify asks for them
        in ``evaluate`` and again in ``agreement``."""
        try:
            out = self._outputs.get(runner)
        except TypeError:  # a runner that cannot be weakly referenced
            out = None
        prompts, _ = prompts_and_positions()
        if out is None:
            out = self.run_prompts(runner, prompts)
            with contextlib.suppress(TypeError):
                self._outputs[runner] = out
        features = max_features(out["target_latents"])  # (2P,)
        half = len(prompts) // 2
        return features[:half], features[half:], out

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """PS-Eval through the graph on the 320 WiC pairs: accuracy, precision, recall,
        specificity and F1 of "same max feature at the target token" vs "same meaning".

        Beside them: a 95 % bootstrap interval of the accuracy over pairs
        (``pseval_accuracy_ci_low`` / ``_high``), chance (``majority_accuracy``: the most
        common label's share) and PS-Eval without an SAE (``raw_pseval_*``: the largest of
        the 384 raw activations at the same hook point as the "feature"; the paired interval
        of the SAE's accuracy minus it: ``pseval_accuracy_minus_raw_ci_*``).

        And the positive control (``control.planted_control``, seconds of training): PS-Eval
        accuracy on 160 synthetic pairs with planted senses of an SAE of this card's recipe
        (``ps_eval_planted``, must be well above 0.5), of the broken variants
        (``ps_eval_planted_broken``: both senses on one direction; ``_untrained``) and of raw
        activations (``ps_eval_planted_raw``), so a chance-level WiC score can be read."""
        self._minilm_only("evaluating the exported scorer")
        first, second, _ = self._pair_features(runners[GRAPH])
        labels = np.array([p.label for p in load_wic()])
        hook = self.sae_config().hook
        context1, context2 = prompt_activations([hook])[hook]
        raw_first, raw_second = context1.argmax(axis=-1), context2.argmax(axis=-1)
        out = pseval_summary(first, second, raw_first, raw_second, labels)
        from edgekit.models.sae_polysemy.control import planted_control

        out.update(planted_control(self.sae_config()))
        return out

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Over the 640 WiC prompts, candidate vs reference: same max feature at the target
        token and share of pairs whose same/different decision flips, over all prompts and
        over the ones the reference decides clearly (``decision_margin``; ``decided_share`` is
        their share of pairs); cosine of the target and of the text latents (mean over
        prompts)."""
        ref1, ref2, ref = self._pair_features(reference[GRAPH])
        cand1, cand2, cand = self._pair_features(candidate[GRAPH])
        flips = predict_same(ref1, ref2) != predict_same(cand1, cand2)  # (P,)
        same_feature = np.concatenate([ref1 == cand1, ref2 == cand2])  # (2P,)
        clear = relative_margin(ref["target_latents"]) >= self.decision_margin  # (2P,)
        half = len(clear) // 2
        clear_pair = clear[:half] & clear[half:]  # (P,)
        return {
            "target_feature_agreement": float(same_feature.mean()),
            "same_decision_flip_rate": float(flips.mean()),
            "decided_share": float(clear_pair.mean()),
            "decided_feature_agreement": _share(same_feature, clear, default=1.0),
            "decided_flip_rate": _share(flips, clear_pair, default=0.0),
            "target_latent_cosine": _mean_cosine(ref["target_latents"], cand["target_latents"]),
            "text_latent_cosine": _mean_cosine(ref["text_latents"], cand["text_latents"]),
        }


def _share(hits: np.ndarray, where: np.ndarray, default: float) -> float:
    """Mean of ``hits`` over the rows ``where`` is true; ``default`` when none is."""
    return float(hits[where].mean()) if where.any() else default


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Mean row cosine of (N, n) arrays (rows that are all zero in both count as 1)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = (np.abs(a).sum(axis=1) == 0) & (np.abs(b).sum(axis=1) == 0)
    cos = np.where(norms > 0, (a * b).sum(axis=1) / np.maximum(norms, 1e-12), 0.0)
    return float(np.where(both_zero, 1.0, cos).mean())
