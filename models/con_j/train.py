"""Training Con-J and its baselines, cached under ``cache_dir("con-j")``.

1. Base LM: tinylm's TinyCausalLM pre-trained on the SDLG fact corpus's QA pairs
   (``sdlg.lm.train_cached``; shared with the sdlg card when the sizes are its defaults).
2. SFT judge: the base LM fine-tuned on gold judgments of the seed pairs (``sft.py``).
3. Con-J judge: contrastive judgments sampled from the SFT judge on every training pair
   (``contrastive.py``), then DPO + SFT term against the frozen SFT judge (``dpo.py``).
4. Ablation: the SFT judge fine-tuned on the chosen (positive) judgments only, same steps.
5. Baseline: Bradley-Terry reward head on MiniLM embeddings of the same pairs.

Each stage is cached by ``recipe_key("con-j", RECIPE_VERSION, ...)`` over the config fields it
depends on, its kind and tinylm's recipe version (the SDLG LM's too); copies shipped in this
package's ``weights/`` folder are used first.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import find_weights, recipe_key
from edgekit.errors import InputError
from edgekit.models.con_j.contrastive import ContrastivePair, build_contrastive
from edgekit.models.con_j.dpo import fit_dpo
from edgekit.models.con_j.fast_decode import cached_decoder
from edgekit.models.con_j.judge_format import pair_prompt
from edgekit.models.con_j.modules import RewardHead
from edgekit.models.con_j.prefs import PrefData, build_prefs
from edgekit.models.con_j.reward_model import better_worse, fit_bradley_terry, pair_embeddings
from edgekit.models.con_j.sft import fit_sft, judgment_examples, qa_examples
from edgekit.models.sdlg.lm import LMConfig
from edgekit.models.tinylm.model import RECIPE_VERSION as TINYLM_VERSION
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.weights_cache import load_weights, save_weights

Progress = Callable[[float, str], None]

CORPUS_FIELDS = ("people", "seed", "pairs_per_fact", "heldout_per_fact", "long_better_share")
BASE_FIELDS = ("lm_dim", "lm_layers", "lm_heads", "lm_steps")
SFT_FIELDS = ("sft_steps", "sft_batch", "sft_lr", "replay_share")
CONJ_FIELDS = ("samples", "hint_samples", "temperature", "dpo_steps", "dpo_batch", "dpo_lr")
CONJ_FIELDS += ("beta", "sft_weight")
BT_FIELDS = ("bt_hidden", "bt_epochs", "bt_lr")
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it
SHIPPED = Path(__file__).parent / "weights"


@dataclass(frozen=True)
class ConJConfig:
    """Corpus, model and training sizes (defaults: about five minutes on one thread, cold)."""

    people: int = 56
    seed: int = 0
    pairs_per_fact: int = 4
    heldout_per_fact: int = 2
    long_better_share: float = 0.8
    lm_dim: int = 128
    lm_layers: int = 2
    lm_heads: int = 4
    lm_steps: int = 1200
    sft_steps: int = 300
    sft_batch: int = 32
    sft_lr: float = 1e-3
    replay_share: float = 0.25
    samples: int = 8
    hint_samples: int = 4
    temperature: float = 1.0
    dpo_steps: int = 150
    dpo_batch: int = 16
    dpo_lr: float = 5e-4
    beta: float = 0.1
    sft_weight: float = 0.1
    bt_hidden: int = 128
    bt_epochs: int = 400
    bt_lr: float = 3e-3
    threads: int = 1

    def __post_init__(self) -> None:
        if self.samples < 2:
            raise InputError(f"samples must be >= 2 (repeated sampling), got {self.samples}")
        for name in ("sft_steps", "dpo_steps", "bt_epochs", "lm_steps"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.beta <= 0 or self.sft_weight < 0 or self.temperature <= 0:
            raise InputError("beta and temperature must be > 0 and sft_weight >= 0")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ConJConfig:
        """The config of card options; unknown names are an InputError naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"con-j options {unknown} are not ConJConfig fields {sorted(known)}")
        return cls(**options)

    def lm_config(self) -> LMConfig:
        return LMConfig(
            people=self.people,
            dim=self.lm_dim,
            layers=self.lm_layers,
            heads=self.lm_heads,
            steps=self.lm_steps,
            seed=self.seed,
            threads=self.threads,
        )

    def prefs(self) -> PrefData:
        return build_prefs(
            self.people,
            self.seed,
            self.pairs_per_fact,
            self.heldout_per_fact,
            long_better_share=self.long_better_share,
        )

    def key(self, kind: str) -> str:
        """Cache key of stage ``kind`` ("sft" | "conj" | "bt"): ``recipe_key`` over "con-j",
        ``RECIPE_VERSION``, the stage's config fields, its kind and tinylm's recipe version, which
        the SDLG LM's key holds too (the base LM and the corpus come from sdlg)."""
        names = (
            CORPUS_FIELDS
            + {
                "sft": BASE_FIELDS + SFT_FIELDS,
                "conj": BASE_FIELDS + SFT_FIELDS + CONJ_FIELDS,
                "bt": BT_FIELDS,
            }[kind]
        )
        values = {n: getattr(self, n) for n in names} | {"kind": kind}
        return recipe_key("con-j", RECIPE_VERSION, values | {"sdlg_lm": TINYLM_VERSION})


@dataclass
class Trained:
    """The trained judges (eval mode), the reward head and what their training logged."""

    sft: TinyCausalLM
    conj: TinyCausalLM
    positives_only: TinyCausalLM
    reward_head: RewardHead
    contrastive: list[ContrastivePair]
    log: dict[str, Any] = field(default_factory=dict)
    contrastive_pairs: int = 0
    seconds: float = 0.0  # training seconds of the three stages, as logged when they ran
    cached: bool = False  # every stage came from the cache


def _path(config: ConJConfig, kind: str, suffix: str) -> Path:
    from edgekit.cache import cache_dir

    return cache_dir("con-j") / f"{kind}-{config.key(kind)}.{suffix}"


def _save(path: Path, states: dict[str, Any], meta: dict[str, Any]) -> None:
    from edgekit.cache import atomic_write_text

    save_weights(path, states)
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta, indent=1))


def _load(path: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(states, meta) of ``path``'s copy shipped in ``weights/``, else of ``path``; None if neither
    loads (the meta is the ``.json`` file next to the weights)."""
    return load_weights(
        path,
        SHIPPED,
        lambda states, found: (states, json.loads(found.with_suffix(".json").read_text())),
    )


def _lm(config: ConJConfig, state: dict[str, Any]) -> TinyCausalLM:
    model = config.lm_config().build()
    model.load_state_dict(state)
    return model.eval()


def train_sft(config: ConJConfig, progress: Progress | None = None) -> tuple[TinyCausalLM, dict]:
    """The SFT judge (cached): base LM + gold judgments of the seed pairs + QA replay."""
    from edgekit.models.sdlg.corpus import build_facts, training_pairs
    from edgekit.models.sdlg.lm import train_cached

    path = _path(config, "sft", "pt")
    hit = _load(path)
    if hit is not None:
        return _lm(config, hit[0]["lm"]), hit[1]
    started = time.perf_counter()
    base, base_log = train_cached(config.lm_config(), progress)
    data = config.prefs()
    seed_pairs = data.select("seed", held_out=False)
    replay = qa_examples(training_pairs(build_facts(config.people, config.seed), config.seed))
    model, losses = fit_sft(
        copy.deepcopy(base),
        judgment_examples(seed_pairs),
        replay,
        config.sft_steps,
        config.sft_batch,
        config.replay_share,
        config.sft_lr,
        config.seed,
        progress,
    )
    meta = {
        "seconds": time.perf_counter() - started,
        "base_lm_seconds": float(base_log.get("seconds", 0.0)),
        "seed_pairs": len(seed_pairs),
        "final_loss": float(np.mean(losses[-25:])),
    }
    _save(path, {"lm": model.state_dict()}, meta)
    return model, meta


def train_conj(
    config: ConJConfig, sft: TinyCausalLM, progress: Progress | None = None
) -> tuple[TinyCausalLM, TinyCausalLM, list[ContrastivePair], dict]:
    """(Con-J judge, positives-only ablation, contrastive pairs, log), cached."""
    path = _path(config, "conj", "pt")
    hit = _load(path)
    if hit is not None:
        states, meta = hit
        pairs = [ContrastivePair(**c) for c in meta["contrastive"]]
        return _lm(config, states["conj"]), _lm(config, states["positives"]), pairs, meta
    pairs = config.prefs().training()
    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    contrastive, stats = build_contrastive(
        cached_decoder(sft, config.temperature), pairs, rng, config.samples, config.hint_samples
    )
    sampling_seconds = time.perf_counter() - started
    if progress:
        progress(0.0, f"{len(contrastive)} contrastive pairs in {sampling_seconds:.0f} s")
    if not contrastive:  # a judge too weak to give one right (or wrong) verdict: no update
        conj, positives = copy.deepcopy(sft), copy.deepcopy(sft)
        dpo_log: dict[str, list[float]] = {"dpo": [], "pair_accuracy": []}
    else:
        conj, dpo_log = fit_dpo(
            sft,
            pairs,
            contrastive,
            config.dpo_steps,
            config.beta,
            config.sft_weight,
            config.dpo_batch,
            config.dpo_lr,
            config.seed,
            progress,
        )
        chosen = [(pair_prompt(pairs[c.index]), c.chosen) for c in contrastive]
        positives, _ = fit_sft(
            copy.deepcopy(sft),
            chosen,
            [],
            config.dpo_steps,
            2 * config.dpo_batch,
            0.0,
            config.dpo_lr,
            config.seed,
        )
    dpo_seconds = time.perf_counter() - started - sampling_seconds
    meta = {
        "sampling_seconds": sampling_seconds,
        "dpo_seconds": dpo_seconds,
        "seconds": time.perf_counter() - started,
        "stats": stats,
        "dpo_final_loss": float(np.mean(dpo_log["dpo"][-20:] or [np.nan])),
        "dpo_final_pair_accuracy": float(np.mean(dpo_log["pair_accuracy"][-20:] or [np.nan])),
        "dpo_loss_curve": dpo_log["dpo"],
        "contrastive": [c.to_json() for c in contrastive],
    }
    _save(path, {"conj": conj.state_dict(), "positives": positives.state_dict()}, meta)
    return conj, positives, contrastive, meta


def train_bt(config: ConJConfig) -> tuple[RewardHead, dict]:
    """The Bradley-Terry reward head on MiniLM embeddings of the training pairs (cached)."""
    path = _path(config, "bt", "pt")
    hit = _load(path)
    if hit is not None:
        head = RewardHead(384, config.bt_hidden)
        head.load_state_dict(hit[0]["head"])
        return head.eval(), hit[1]
    started = time.perf_counter()
    pairs = config.prefs().training()
    emb_a, emb_b = pair_embeddings(pairs)
    good, bad = better_worse(pairs, emb_a, emb_b)
    head, losses = fit_bradley_terry(
        good, bad, config.bt_hidden, config.bt_epochs, config.bt_lr, seed=config.seed
    )
    meta = {"seconds": time.perf_counter() - started, "final_loss": losses[-1]}
    _save(path, {"head": head.state_dict()}, meta)
    return head, meta


def train_all(config: ConJConfig | None = None, progress: Progress | None = None) -> Trained:
    """Every stage, each from its cache or trained now (one torch thread by default)."""
    config = config or ConJConfig()
    cached = all(
        any(p.exists() for p in find_weights(_path(config, kind, "pt"), SHIPPED))
        for kind in ("sft", "conj", "bt")
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        sft, sft_log = train_sft(config, progress)
        conj, positives, contrastive, conj_log = train_conj(config, sft, progress)
        head, bt_log = train_bt(config)
    finally:
        torch.set_num_threads(threads)
    log = {"sft": sft_log, "conj": {k: v for k, v in conj_log.items() if k != "contrastive"}}
    log["bt"] = bt_log
    seconds = sum(float(log[k].get("seconds", 0.0)) for k in ("sft", "conj", "bt"))
    return Trained(sft, conj, positives, head, contrastive, log, len(contrastive), seconds, cached)
