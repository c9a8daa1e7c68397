"""PS-Eval of the card's SAE recipe on a causal LM (card option ``lm``), through forward hooks.

``edgekit eval sae-polysemy --option lm=FOLDER`` runs this instead of the MiniLM study
(report.py). One SAE of the card's recipe (its other options: variant, layer, site, expansion,
k, steps, ...) is trained on the LM's corpus activations at the hook point and scored by PS-Eval
on the WiC pairs, the target-token activations read by hooks in torch (no exported graph: the
device scorer is MiniLM's). Beside it, as in the card's ``evaluate``: chance, raw activations
without an SAE, bootstrap intervals over pairs, the planted-sense positive control at the LM's
width, and the SAE's reconstruction of held-out corpus activations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekit.models.sae_polysemy.control import planted_control
from edgekit.models.sae_polysemy.pseval import (
    NO_FEATURE,
    max_features,
    prompt_activations,
    pseval_summary,
)
from edgekit.models.sae_polysemy.sae import reconstruction_metrics
from edgekit.models.sae_polysemy.train import SAEConfig, load_activations, train_cached
from edgekit.models.sae_polysemy.wic import load_wic

STEPS = ("train the SAE", "PS-Eval", "reconstruction", "planted control")


def evaluate_recipe(config: SAEConfig, show_progress: bool = False) -> dict[str, Any]:
    """Train (or load) the SAE of ``config`` and measure it (module doc): the model and hook,
    the card evaluate's ``pseval_*`` / ``raw_pseval_*`` / interval keys, ``no_feature_rate``,
    held-out ``mse`` / ``fvu`` / ``l0`` / ``dead_fraction`` and ``ps_eval_planted*``."""
    from edgekit.progress import step_progress

    hook = config.hook
    pairs = load_wic()
    labels = np.array([p.label for p in pairs])  # (P,)
    with step_progress(f"PS-Eval {hook.name}", len(STEPS), show_progress) as step:
        step(STEPS[0])
        result = train_cached(config)
        sae = result.build()
        step(STEPS[1])
        context1, context2 = prompt_activations([hook], pairs, config.lm)[hook]  # (P, d) each
        with torch.no_grad():
            first = max_features(sae.encode(torch.from_numpy(context1)).numpy())  # (P,)
            second = max_features(sae.encode(torch.from_numpy(context2)).numpy())  # (P,)
        report: dict[str, Any] = {
            "lm": config.lm,
            "model": config.language_model.name,
            "hook": hook.name,
            "d_model": config.d_model,
            "latents": config.n_latents,
            "variant": config.variant,
            "sparsity": config.sparsity_knob,
            "pairs": len(pairs),
            "train_seconds": round(result.seconds, 2),
            "cached": result.cached,
        }
        report.update(
            pseval_summary(first, second, context1.argmax(-1), context2.argmax(-1), labels)
        )
        report["no_feature_rate"] = float(np.mean(np.concatenate([first, second]) == NO_FEATURE))
        step(STEPS[2])
        _, heldout = load_activations([hook], config.corpus_templated, config.lm)
        report.update(reconstruction_metrics(sae, torch.from_numpy(heldout[hook])))
        step(STEPS[3])
        report.update(planted_control(config))
    return report


def run(config: SAEConfig, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """``evaluate_recipe``, printed and written to ``out/report.json``; returns the report."""
    from edgekit.cache import atomic_write_text
    from edgekit.console import wide_console

    report = evaluate_recipe(config, show_progress)
    console = wide_console()
    console.print(
        f"PS-Eval of a {report['variant']} SAE ({report['sparsity']}, {report['latents']} "
        f"latents) on {report['model']} {report['hook']} (width {report['d_model']}), "
        f"{report['pairs']} WiC pairs, hooked in torch:"
    )
    for key, value in report.items():
        if isinstance(value, float):
            console.print(f"  {key}: {value:.4f}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2, default=float))
    console.print(f"wrote {out / 'report.json'}")
    return report
