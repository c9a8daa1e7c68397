"""Training recipe for the SAEs, cached under ``cache_dir("sae-polysemy", "sae")``.

One ``SAEConfig`` names everything that determines an SAE's weights: the language model
(``lm``: "" = MiniLM, else a local causal LM folder, lm.py), the hook point, the variant and
its sparsity knob, the size and the optimisation. The SAE's width is the model's (384 for
MiniLM). The cache key is ``recipe_key("sae-polysemy-sae", RECIPE_VERSION, ...)`` over the
config (another LM by its fingerprint; MiniLM's keys name no model) and the activations'
version; weights shipped in this package's ``weights/`` folder are loaded first.

Recipe (the same for every variant): inputs scaled so that E||x||^2 = d; b_dec initialised at
the mean of the scaled training activations; tied encoder/decoder at init with unit decoder
rows; Adam with a 5 % linear warm-up and a linear decay over the last 20 % of steps; the
sparsity penalty ramped up over the first 5 %; unit-norm decoder rows kept throughout. Dead
latents (no activation for ``dead_steps`` steps): AuxK for TopK; for ReLU and JumpReLU they are
resampled at 25 % and 50 % of training towards inputs the SAE reconstructs worst (their Adam
state reset). Seeded and single-process: the same config on the same machine gives the same
weights.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import cache_dir, recipe_key
from edgekit.errors import InputError
from edgekit.models.sae_polysemy import activations, corpus
from edgekit.models.sae_polysemy.activations import ACTIVATION_VERSION, HookPoint
from edgekit.models.sae_polysemy.lm import LanguageModel, language_model
from edgekit.models.sae_polysemy.sae import SparseAutoencoder, make_sae, reconstruction_metrics
from edgekit.weights_cache import load_or_train, load_weights, save_weights

Progress = Callable[[float, str], None]
RESAMPLE_AT = (0.25, 0.5)
RESAMPLE_POOL = 4096
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule); edits that do not change the weights keep it
SHIPPED_WEIGHTS = Path(__file__).parent / "weights"  # SAEs a package ships, cache file names


@dataclass(frozen=True)
class SAEConfig:
    """Everything that determines one trained SAE."""

    variant: str = "topk"  # the card's default: fixed L0, fewest int8 decision flips
    layer: int = 5
    site: str = "resid"
    expansion: int = 4  # latents = expansion * the model's width (384 for MiniLM)
    k: int = 32  # topk
    l1_coeff: float = 6e-3  # relu
    l0_coeff: float = 3e-3  # jumprelu
    bandwidth: float = 0.05  # jumprelu
    threshold_init: float = 0.2  # jumprelu
    threshold_lr_scale: float = 10.0  # jumprelu
    steps: int = 300
    batch_size: int = 256
    lr: float = 2e-3
    dead_steps: int = 60
    corpus_templated: int = 2400
    seed: int = 0
    threads: int = 1  # measured faster than 2 on a shared 2-core machine
    lm: str = ""  # "" = all-MiniLM-L6-v2; else a local folder with a Hugging Face causal LM

    @property
    def language_model(self) -> LanguageModel:
        """The model ``lm`` names (InputError for a folder that holds none)."""
        return language_model(self.lm)

    @property
    def hook(self) -> HookPoint:
        return self.language_model.hook(self.layer, self.site)

    @property
    def d_model(self) -> int:
        """Width of the activations (and of the SAE's input): the model's hidden size."""
        return self.language_model.d_model

    @property
    def n_latents(self) -> int:
        return self.expansion * self.d_model

    @property
    def sparsity_knob(self) -> str:
        """The variant's sparsity setting as text, e.g. "k=32" or "l1=0.004"."""
        return {
            "topk": f"k={self.k}",
            "relu": f"l1={self.l1_coeff:g}",
            "jumprelu": f"l0={self.l0_coeff:g}",
        }[self.variant]

    def hyperparameters(self) -> dict[str, Any]:
        """The SAE constructor's variant-specific arguments."""
        if self.variant == "topk":
            return {"k": self.k}
        if self.variant == "relu":
            return {"l1_coeff": self.l1_coeff}
        return {"l0_coeff": self.l0_coeff, "bandwidth": self.bandwidth,
                "threshold_init": self.threshold_init}  # fmt: skip

    def corpus_config(self) -> corpus.CorpusConfig:
        return corpus.CorpusConfig(templated=self.corpus_templated)

    def key(self) -> str:
        """Cache key (16 hex): ``recipe_key`` over "sae-polysemy-sae", ``RECIPE_VERSION``, this
        config and ``ACTIVATION_VERSION`` (the activations it is trained on). ``lm`` enters as
        the model's fingerprint, and not at all for MiniLM (its keys name no model)."""
        config = asdict(self) | {"activations": ACTIVATION_VERSION}
        if config.pop("lm"):
            config["lm"] = self.language_model.fingerprint
        return recipe_key("sae-polysemy-sae", RECIPE_VERSION, config)


@dataclass
class SAEResult:
    """Trained weights with what it took: seconds, held-out reconstruction metrics."""

    state_dict: dict[str, torch.Tensor]
    config: SAEConfig
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)  # mse, fvu, l0, dead_fraction
    cached: bool = False
    path: Path | None = None

    def build(self) -> SparseAutoencoder:
        """The SAE with these weights, in eval mode."""
        config = self.config
        model = make_sae(
            config.variant, config.d_model, config.n_latents, **config.hyperparameters()
        )
        model.load_state_dict(self.state_dict)
        return model.eval()


def weights_path(config: SAEConfig) -> Path:
    """Where the weights for ``config`` are (or will be) cached."""
    name = f"{config.variant}-{config.hook.name}-{config.key()}.pt"
    return cache_dir("sae-polysemy", "sae") / name


def load_activations(
    hooks: list[HookPoint], corpus_templated: int = 2400, lm: str = ""
) -> tuple[dict[HookPoint, np.ndarray], dict[HookPoint, np.ndarray]]:
    """(train, held-out) corpus activations for ``hooks`` of the model ``lm`` names (cached;
    one pass of the model if not)."""
    sentences = corpus.build_corpus(corpus.CorpusConfig(templated=corpus_templated))
    train, heldout = corpus.split_corpus(sentences)
    return activations.corpus_activations(hooks, train, heldout, lm)


def _param_groups(model: SparseAutoencoder, config: SAEConfig) -> list[dict[str, Any]]:
    """Adam groups: JumpReLU thresholds learn ``threshold_lr_scale`` times faster (in a few
    hundred steps the straight-through signal is too sparse to move them otherwise)."""
    thresholds = [p for n, p in model.named_parameters() if n == "log_threshold"]
    rest = [p for n, p in model.named_parameters() if n != "log_threshold"]
    groups: list[dict[str, Any]] = [{"params": rest}]
    if thresholds:
        groups.append({"params": thresholds, "lr": config.lr * config.threshold_lr_scale})
    return groups


def _schedule(config: SAEConfig) -> Callable[[int], float]:
    warm = max(1, int(0.05 * config.steps))
    decay_from = int(0.8 * config.steps)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if step >= decay_from:
            return max(0.0, (config.steps - step) / max(1, config.steps - decay_from))
        return 1.0

    return factor


@torch.no_grad()
def _resample_dead(
    model: SparseAutoencoder,
    optimizer: torch.optim.Optimizer,
    pool: torch.Tensor,
    dead: torch.Tensor,
    generator: torch.Generator,
) -> int:
    """Point dead latents at poorly reconstructed inputs of ``pool`` (M, d raw); returns how
    many were resampled."""
    count = int(dead.sum())
    if count == 0:
        return 0
    x_hat, _ = model(pool)
    error = (x_hat - model.scale(pool)).pow(2).sum(dim=1)  # (M,)
    chosen = torch.multinomial(error.pow(2) + 1e-12, count, replacement=True, generator=generator)
    direction = model.scale(pool[chosen]) - model.b_dec  # (count, d)
    direction = direction / direction.norm(dim=1, keepdim=True).clamp(min=1e-8)
    alive = ~dead
    enc_norm = float(model.W_enc[:, alive].norm(dim=0).mean()) if bool(alive.any()) else 1.0
    model.W_dec[dead] = direction
    model.W_enc[:, dead] = (direction * 0.2 * enc_norm).t()
    model.b_enc[dead] = 0.0
    log_threshold = getattr(model, "log_threshold", None)
    if log_threshold is not None:
        log_threshold[dead] = math.log(model.threshold_init)
    slices = {id(model.W_dec): (0,), id(model.W_enc): (1,), id(model.b_enc): (0,)}
    if log_threshold is not None:
        slices[id(log_threshold)] = (0,)
    for param in model.parameters():
        if id(param) not in slices or param not in optimizer.state:
            continue
        for name in ("exp_avg", "exp_avg_sq"):
            state = optimizer.state[param][name]
            if slices[id(param)] == (0,):
                state[dead] = 0.0
            else:
                state[:, dead] = 0.0
    return count


def train_sae(
    config: SAEConfig,
    train_x: np.ndarray,
    heldout_x: np.ndarray,
    progress: Progress | None = None,
) -> SAEResult:
    """Train one SAE from scratch on raw activations ``train_x`` (N, d) float32 (no cache
    involved; d is ``config.d_model``, 384 for MiniLM); reconstruction metrics on ``heldout_x``
    (M, d)."""
    d_model = config.d_model
    for name, data in (("training", train_x), ("held-out", heldout_x)):
        if np.ndim(data) != 2 or np.shape(data)[1] != d_model:
            raise InputError(
                f"{name} activations must be (N, {d_model}) for this config's model, "
                f"got {np.shape(data)}"
            )
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        torch.manual_seed(config.seed)
        generator = torch.Generator().manual_seed(config.seed)
        x = torch.from_numpy(np.ascontiguousarray(train_x, dtype=np.float32))  # (N, d)
        scale = math.sqrt(d_model / float(x.pow(2).sum(dim=1).mean()))
        model = make_sae(
            config.variant, d_model, config.n_latents, input_scale=scale,
            **config.hyperparameters(),
        )  # fmt: skip
        with torch.no_grad():
            model.b_dec.copy_(model.scale(x).mean(dim=0))
        optimizer = torch.optim.Adam(_param_groups(model, config), lr=config.lr)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config))
        warm = max(1, int(0.05 * config.steps))
        resample_steps = (
            {int(f * config.steps) for f in RESAMPLE_AT} if config.variant != "topk" else set()
        )
        last_fired = torch.zeros(config.n_latents, dtype=torch.long)
        order = torch.randperm(len(x), generator=generator)
        cursor, started, loss_ema = 0, time.perf_counter(), None
        model.train()
        for step in range(config.steps):
            if cursor + config.batch_size > len(order):
                order, cursor = torch.randperm(len(x), generator=generator), 0
            batch = x[order[cursor : cursor + config.batch_size]]  # (B, d)
            cursor += config.batch_size
            dead = (step - last_fired) > config.dead_steps  # (n,)
            terms = model.losses(batch, dead, sparsity_weight=min(1.0, (step + 1) / warm))
            optimizer.zero_grad(set_to_none=True)
            terms["loss"].backward()
            model.remove_parallel_gradient()
            optimizer.step()
            schedule.step()
            model.normalize_decoder()
            last_fired[(terms["latents"] > 0).any(dim=0)] = step
            if step in resample_steps:
                pool = x[torch.randperm(len(x), generator=generator)[:RESAMPLE_POOL]]
                _resample_dead(model, optimizer, pool, dead, generator)
                last_fired[dead] = step
            value = float(terms["loss"].detach())
            loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
            if progress and (step % 50 == 0 or step == config.steps - 1):
                progress((step + 1) / config.steps, f"step {step + 1} loss {value:.4f}")
        seconds = time.perf_counter() - started
        model.eval()
        metrics = reconstruction_metrics(model, torch.from_numpy(heldout_x.astype(np.float32)))
        metrics["final_loss"] = float(loss_ema or 0.0)
    finally:
        torch.set_num_threads(previous_threads)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return SAEResult(state, config, seconds, metrics)


def _blob(result: SAEResult) -> dict[str, Any]:
    meta = {
        "config": asdict(result.config),
        "seconds": result.seconds,
        "metrics": result.metrics,
        "torch": str(torch.__version__),
    }
    return {"state_dict": result.state_dict, "meta": meta}


def _decode(config: SAEConfig, blob: dict[str, Any], path: Path) -> SAEResult:
    meta = blob["meta"]
    return SAEResult(
        blob["state_dict"], config, float(meta["seconds"]),
        {k: float(v) for k, v in meta["metrics"].items()}, cached=True, path=path,
    )  # fmt: skip


def load_cached(config: SAEConfig) -> SAEResult | None:
    """The weights of ``config`` shipped in ``weights/``, else cached, or None when absent or
    unreadable."""
    return load_weights(
        weights_path(config), SHIPPED_WEIGHTS, lambda blob, found: _decode(config, blob, found)
    )


def _train(config: SAEConfig, progress: Progress | None = None) -> SAEResult:
    """Train ``config`` on its cached activations."""
    train_x, heldout_x = load_activations([config.hook], config.corpus_templated, config.lm)
    return train_sae(config, train_x[config.hook], heldout_x[config.hook], progress)


def train_cached(
    config: SAEConfig, progress: Progress | None = None, force: bool = False
) -> SAEResult:
    """Cached weights for ``config``, training (and caching) them when needed."""
    path = weights_path(config)

    def train() -> SAEResult:
        result = _train(config, progress)
        result.path = path
        return result

    return load_or_train(
        path,
        SHIPPED_WEIGHTS,
        train,
        load=lambda blob, found: _decode(config, blob, found),
        save=_blob,
        force=force,
    )


def _train_and_save(config: SAEConfig) -> str:
    """Worker: train ``config`` on its cached activations and cache the weights; the path."""
    return str(save_weights(weights_path(config), _blob(_train(config))))


def train_suite(
    configs: list[SAEConfig], show_progress: bool = True, workers: int = 2
) -> list[SAEResult]:
    """Train (or load) every config; a progress bar names each SAE.

    Activations for all hook points are read (or computed, in one pass per model) first. Missing
    SAEs are trained by ``workers`` single-threaded processes (each SAE's weights do not
    depend on which process trains it); a script calling this with workers > 1 needs the
    usual ``if __name__ == "__main__":`` guard (processes are spawned).
    """
    from edgekit.progress import step_progress

    missing = [c for c in dict.fromkeys(configs) if load_cached(c) is None]
    if missing:
        for lm, templated in sorted({(c.lm, c.corpus_templated) for c in missing}):
            hooks = sorted(
                {c.hook for c in missing if (c.lm, c.corpus_templated) == (lm, templated)}
            )
            load_activations(hooks, templated, lm)
        with step_progress("train SAEs", len(missing), show_progress) as step:
            if workers <= 1 or len(missing) == 1:
                for config in missing:
                    step(f"{config.variant} {config.hook.name} {config.sparsity_knob}")
                    _train_and_save(config)
            else:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor, as_completed

                context = multiprocessing.get_context("spawn")
                with ProcessPoolExecutor(min(workers, len(missing)), mp_context=context) as pool:
                    futures = {pool.submit(_train_and_save, c): c for c in missing}
                    for future in as_completed(futures):
                        future.result()
                        config = futures[future]
                        step(f"trained {config.variant} {config.hook.name} {config.sparsity_knob}")
    results = []
    for config in configs:
        result = load_cached(config)
        if result is None:  # the cache write failed: train here
            result = train_cached(config, force=True)
        results.append(result)
    return results


def with_hook(config: SAEConfig, hook: HookPoint) -> SAEConfig:
    """``config`` moved to another hook point."""
    return replace(config, layer=hook.layer, site=hook.site)
