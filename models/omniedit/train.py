"""Training an editor on curated specialist pairs, cached under ``cache_dir("omniedit")``.

``OmniEditConfig.training_pairs()`` builds the curated training set: procedural scenes with a
request each, the specialists' (noisy) edits, the judge's scores. ``train_editor(config)`` fits
``config.arch`` on ``config.curation`` of them with the squared error of the predicted edit,
drawing every batch from the curation's sampling distribution (importance sampling). Weights
are cached keyed by ``recipe_key("omniedit", RECIPE_VERSION, config)``, so a changed config or a
bumped RECIPE_VERSION retrains; a file of the same name in ``weights/`` is loaded first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.cache import recipe_key
from edgekit.errors import InputError
from edgekit.models.omniedit import judge
from edgekit.models.omniedit.curation import CURATIONS, sampling_probabilities
from edgekit.models.omniedit.editors import ARCHITECTURES, Editor
from edgekit.models.omniedit.judge import JudgeScores
from edgekit.models.omniedit.scenes import INSTRUCTION_DIM, TASKS, EditSet, make_edits
from edgekit.models.omniedit.specialists import SpecialistPairs, run_specialists
from edgekit.weights_cache import load_or_train

Progress = Callable[[float, str], None]
SHIPPED_WEIGHTS = Path(__file__).parent / "weights"  # editors a package ships, cache file names
RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class OmniEditConfig:
    """Data, curation, network and training sizes (defaults: about 30 s of CPU per editor)."""

    size: int = 16
    train_count: int = 2000
    test_count: int = 400
    seed: int = 0
    failure_rate: float = 0.4
    judge_noise: float = 0.7
    threshold: float = 9.0
    temperature: float = 1.0
    arch: str = "editnet"
    curation: str = "importance"
    dim: int = 48
    depth: int = 2
    heads: int = 4
    patch: int = 4
    text_tokens: int = 4
    steps: int = 800
    batch: int = 32
    lr: float = 6e-3

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise InputError(f"arch must be one of {ARCHITECTURES}, got {self.arch!r}")
        if self.curation not in CURATIONS:
            raise InputError(f"curation must be one of {CURATIONS}, got {self.curation!r}")
        if not 0.0 <= self.failure_rate <= 1.0:
            raise InputError(f"failure_rate must lie in [0, 1], got {self.failure_rate}")
        for name in ("train_count", "test_count", "batch"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 15:  # the one-cycle schedule needs a warm-up of at least one step
            raise InputError(f"steps must be >= 15, got {self.steps}")

    def editor(self) -> Editor:
        return Editor(
            self.arch,
            self.size,
            INSTRUCTION_DIM,
            self.dim,
            self.depth,
            self.heads,
            self.patch,
            self.text_tokens,
        )

    def training_pairs(self) -> tuple[SpecialistPairs, JudgeScores]:
        """The specialists' pairs for ``train_count`` scenes and the judge's scores of them."""
        return _training_pairs(
            self.train_count, self.size, self.seed, self.failure_rate, self.judge_noise
        )

    def test_edits(self) -> EditSet:
        """``test_count`` held-out scenes with their true edits (tasks in turn)."""
        return make_edits(self.test_count, self.seed + 1000, self.size)

    def probabilities(self, scores: JudgeScores) -> np.ndarray:
        return sampling_probabilities(
            scores.overall, self.curation, self.threshold, self.temperature
        )


@lru_cache(maxsize=4)
def _training_pairs(
    count: int, size: int, seed: int, failure_rate: float, judge_noise: float
) -> tuple[SpecialistPairs, JudgeScores]:
    edits = make_edits(count, seed, size)
    pairs = run_specialists(edits, dict.fromkeys(TASKS, failure_rate), seed + 1)
    scores = judge.judge(edits.source, pairs.edited, edits.instructions, judge_noise, seed + 2)
    return pairs, scores


@dataclass
class Trained:
    """An eval-mode editor, its config and training seconds (0 when loaded from cache)."""

    editor: Editor
    config: OmniEditConfig
    seconds: float
    cached: bool
    path: Path | None = None


def _key(config: OmniEditConfig) -> str:
    """Cache key (16 hex chars): recipe_key over "omniedit", RECIPE_VERSION and ``config``."""
    return recipe_key("omniedit", RECIPE_VERSION, config)


def cache_path(config: OmniEditConfig) -> Path:
    """Where the editor of ``config`` is cached."""
    from edgekit.cache import cache_dir

    return cache_dir("omniedit") / f"{config.arch}-{config.curation}-{_key(config)}.pt"


def fit_editor(
    config: OmniEditConfig,
    source: np.ndarray,
    target: np.ndarray,
    instruction: np.ndarray,
    probabilities: np.ndarray,
    progress: Progress | None = None,
) -> Editor:
    """``config.editor()`` trained for ``config.steps`` AdamW steps on batches drawn from
    ``probabilities`` (N,); source / target (N, 3, S, S) in [0, 1], instruction (N, I)."""
    gen = torch.Generator().manual_seed(config.seed + 7)
    torch.manual_seed(config.seed + 7)
    model = config.editor()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, config.lr, total_steps=config.steps, pct_start=0.1
    )
    src, tgt, ins = (
        torch.from_numpy(np.ascontiguousarray(a, np.float32)) for a in (source, target, instruction)
    )
    probs = torch.from_numpy(np.asarray(probabilities, np.float64))
    model.train()
    for step in range(config.steps):
        idx = torch.multinomial(probs, config.batch, replacement=True, generator=gen)
        loss = torch.mean((model(src[idx], ins[idx]) - tgt[idx]) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if progress and step % 100 == 0:
            progress(
                step / config.steps,
                f"{config.arch}/{config.curation} step {step} loss {loss.item():.4f}",
            )
    return model.eval()


def _decode(config: OmniEditConfig, blob: dict[str, Any], path: Path) -> Trained:
    editor = config.editor()
    editor.load_state_dict(blob["editor"])
    return Trained(editor.eval(), config, float(blob["seconds"]), True, path)


def train_editor(config: OmniEditConfig | None = None, progress: Progress | None = None) -> Trained:
    """The editor of ``config`` (arch x curation), from the cache or trained now."""
    config = config or OmniEditConfig()
    path = cache_path(config)

    def train() -> Trained:
        started = time.perf_counter()
        pairs, scores = config.training_pairs()
        target = pairs.edits.target if config.curation == "oracle" else pairs.edited
        editor = fit_editor(
            config,
            pairs.edits.source,
            target,
            pairs.edits.instruction,
            config.probabilities(scores),
            progress,
        )
        return Trained(editor, config, time.perf_counter() - started, False, path)

    return load_or_train(
        path,
        SHIPPED_WEIGHTS,
        train,
        load=lambda blob, found: _decode(config, blob, found),
        save=lambda trained: {"editor": trained.editor.state_dict(), "seconds": trained.seconds},
    )


def variant(config: OmniEditConfig, arch: str, curation_name: str) -> OmniEditConfig:
    """``config`` with another architecture and curation."""
    return replace(config, arch=arch, curation=curation_name)
