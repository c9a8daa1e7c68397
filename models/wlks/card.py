"""wlks card: the WLKS subgraph classifier (combined k = 0 / k = D WL kernel + one-vs-rest SVM).

One graph, "svm": histograms (B, F) float32, the subgraph's WL colour counts (rounds 0..depth)
on the global graph then on its induced subgraph, concatenated -> scores (B, C) float32, one
SVM decision value per class (argmax = class). The kernel rows against the support vectors are
computed inside the graph. The bundle ships the fitted WL palettes (rounds 0..depth, up to
a few hundred kB of JSON) as ``assets/wl_palette.json``: ``WLFeaturizer.from_json(...)
.histograms(graph, subgraphs)`` (``wl.py``, numpy only) turns subgraphs of any graph into the
graph's input, so the bundle scores subgraphs it never saw, also on other graphs. A colour the
fit never saw counts for nothing, and the tercile labels of density / cut ratio / coreness are
relative to the fitted task's subgraphs, so scores on another graph are rougher than on the
task's own test split.

Options: ``task`` (one of tasks.TASKS, default "coreness"), ``seed``, ``count``, ``n``.
Fitting takes about two seconds, so it is not cached; ``assets()`` writes the palette file
under ``cache_dir("wlks")`` for the bundle. ``edgekit eval wlks`` runs the study in
experiment.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from edgekit.card import Feeds, GraphSpec, ModelCard, Runner, Tolerance
from edgekit.errors import InputError
from edgekit.models.wlks.method import WLKSResult, fit_wlks
from edgekit.models.wlks.tasks import TASKS, make_task
from edgekit.numeric import bootstrap_interval

GRAPH = "svm"
PALETTE = "wl_palette.json"  # bundle asset: WLFeaturizer.to_json() of the fitted model


@dataclass
class WLKSSummary:
    """What ``edgekit train wlks`` reports: the validated configuration and its micro-F1."""

    task_name: str
    depth: int
    global_weight: float
    cost: float
    val_micro_f1: float
    test_micro_f1: float
    seconds: float
    result: WLKSResult


DEFAULTS: dict[str, Any] = {"task": "coreness", "seed": 0, "count": 240, "n": 500}


class WLKSCard(ModelCard):
    """WLKS fitted on one SubGNN-style synthetic task; the deployable part is its SVM."""

    name: ClassVar[str] = "wlks"
    tier: ClassVar[str] = "server"
    task: ClassVar[str] = "subgraph-classification"
    architecture: ClassVar[str] = "kernel-svm"
    summary: ClassVar[str] = (
        "WL subgraph kernels on k-hop neighbourhoods (k = 0 induced, k = D global) combined, "
        "precomputed-kernel SVM with WL depth picked on validation (SubGNN-style tasks)"
    )
    primary_metric: ClassVar[str | None] = "micro_f1"
    int8_budget: ClassVar[float] = 0.05
    tolerances: ClassVar[dict[str, Tolerance]] = {
        "fp32": Tolerance(atol=1e-4, rtol=1e-3),
        "fp16": Tolerance(atol=2e-2, rtol=2e-2),
        "int8": Tolerance(atol=0.3, rtol=0.1),
    }
    agreement_floors: ClassVar[dict[str, float]] = {
        "top1_agreement": 0.99,
        "max_score_abs_error": 1e-3,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        unknown = sorted(set(options) - set(DEFAULTS))
        if unknown:
            raise InputError(
                f"wlks options {unknown} are unknown; expected some of {sorted(DEFAULTS)}"
            )
        self.config = DEFAULTS | options
        if self.config["task"] not in TASKS:
            raise InputError(
                f"wlks task must be one of {', '.join(TASKS)}, got {self.config['task']!r}"
            )
        self._result: WLKSResult | None = None

    # ---- training --------------------------------------------------------------------------
    def fit(self) -> WLKSResult:
        """The combined-kernel WLKS fitted on the card's task (seconds; kept on the card)."""
        if self._result is None:
            c = self.config
            task = make_task(c["task"], c["count"], c["n"], c["seed"])
            self._result = fit_wlks(task, "combined")
        return self._result

    def train(self, progress: Callable[[float, str], None] | None = None) -> WLKSSummary:
        """Fit WLKS (WL depth, SVM cost and a_c picked on validation) and summarise it."""
        result = self.fit()
        choice = result.choice
        if progress:
            progress(1.0, f"WL depth {choice.depth}, test micro-F1 {choice.test_f1:.3f}")
        return WLKSSummary(
            result.task.name,
            choice.depth,
            choice.weights[0],
            choice.cost,
            choice.val_f1,
            choice.test_f1,
            result.seconds,
            result,
        )

    # ---- what to build -------------------------------------------------------------------
    def graphs(self) -> list[GraphSpec]:
        """One graph "svm": histograms (B, F) float32 -> scores (B, C) float32."""
        example = torch.from_numpy(self.golden_inputs()[GRAPH]["histograms"][:2].copy())
        return [
            GraphSpec(
                name=GRAPH,
                module=self.fit().module(),
                example_inputs={"histograms": example},
                output_names=["scores"],
                dynamic_axes={"histograms": {0: "batch"}, "scores": {0: "batch"}},
            )
        ]

    # ---- real data ---------------------------------------------------------------------------
    def _histograms(self, split: str) -> np.ndarray:
        """(N, F) float32 histograms of the "train", "val", "test" or "all" subgraphs."""
        result = self.fit()
        task = result.task
        index = np.arange(len(task.subgraphs)) if split == "all" else getattr(task, split)
        return result.histograms(index)

    def golden_inputs(self) -> dict[str, Feeds]:
        """Four test subgraphs' histograms (4, F) float32."""
        return {GRAPH: {"histograms": self._histograms("test")[:4]}}

    def calibration_data(self, limit: int = 64) -> dict[str, list[Feeds]]:
        """``limit`` single training subgraphs (1, F)."""
        return {GRAPH: [{"histograms": row[None]} for row in self._histograms("train")[:limit]]}

    def preprocessing(self) -> dict[str, Any]:
        result = self.fit()
        sizes = [int(f.features(result.choice.depth).shape[1]) for f in result.levels]
        return {
            "input": "WL colour counts of the subgraph's nodes, rounds 0..depth, per level",
            "levels": [
                {"k": "D (global)" if f.k < 0 else f.k, "columns": s}
                for f, s in zip(result.levels, sizes, strict=True)
            ],
            "depth": result.choice.depth,
            "palette": PALETTE,
            "featurizer": (
                f"edgekit.models.wlks.wl.WLFeaturizer.from_json(json of assets/{PALETTE})"
                ".histograms(graph, subgraphs); colours the fit never saw count for nothing"
            ),
            "kernel_weights": list(result.choice.weights),
            "task": self.config,
            "output": {"name": "scores", "postprocess": "argmax over classes"},
        }

    def assets(self) -> dict[str, str]:
        """``wl_palette.json``: the fitted palettes, written under ``cache_dir("wlks")``."""
        from edgekit.cache import atomic_write_text, cache_dir, recipe_key

        text = json.dumps(self.fit().featurizer().to_json(), separators=(",", ":"))
        path = cache_dir("wlks") / f"wl_palette-{recipe_key('wlks-palette', 1, self.config)}.json"
        if not path.is_file() or path.read_text() != text:
            atomic_write_text(path, text)
        return {PALETTE: str(path)}

    def labels(self) -> list[str]:
        return [f"class {c}" for c in range(self.fit().task.classes)]

    # ---- measuring -------------------------------------------------------------------------
    def _scores(self, runner: Runner, x: np.ndarray) -> np.ndarray:
        return np.asarray(runner.run({"histograms": x})["scores"], dtype=np.float64)

    def evaluate(self, runners: Mapping[str, Runner]) -> dict[str, float]:
        """Micro-F1 on the task's test subgraphs, its 95 % bootstrap interval over them
        (``micro_f1_ci_low`` / ``_high``) and the trivial baseline, always the most common
        training label (``majority_micro_f1``)."""
        result = self.fit()
        task = result.task
        pred = self._scores(runners[GRAPH], self._histograms("test")).argmax(axis=1)
        right = pred == task.labels[task.test]
        low, high = bootstrap_interval(lambda i: float(right[i].mean()), len(right))
        common = np.bincount(task.labels[task.train]).argmax()
        return {
            "micro_f1": float(right.mean()),
            "micro_f1_ci_low": low,
            "micro_f1_ci_high": high,
            "majority_micro_f1": float((task.labels[task.test] == common).mean()),
        }

    def agreement(
        self, reference: Mapping[str, Runner], candidate: Mapping[str, Runner]
    ) -> dict[str, float]:
        """Top-1 agreement and max |score difference| on every subgraph of the task."""
        x = self._histograms("all")
        ref, cand = self._scores(reference[GRAPH], x), self._scores(candidate[GRAPH], x)
        return {
            "top1_agreement": float((ref.argmax(axis=1) == cand.argmax(axis=1)).mean()),
            "max_score_abs_error": float(np.abs(ref - cand).max()),
        }
