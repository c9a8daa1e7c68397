"""``edgekit eval llmcert-b``: certificates of a biased vs a debiased LM, table + plot.

Trains (cached, about a minute each on one thread) the LM of the biased corpus and of the
debiased one, then certifies the base prompts under random-token prefixes, jailbreak
mixtures and embedding noise around a jailbreak; prints mean / worst certified bounds on
P(unbiased) per (LM, distribution), writes ``report.json`` and ``certificates.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgekit.card import ModelCard
from edgekit.models.llmcert_b.corpus import plain_answers, plain_unbiased
from edgekit.models.llmcert_b.study import StudyConfig, certify_model, summarise

VARIANTS = {"biased": True, "debiased": False}


def run_variant(biased: bool, config: StudyConfig, step: Any = None) -> dict[str, Any]:
    """Train/load one LM and certify it; the JSON-ready record."""
    import torch

    from edgekit.models.llmcert_b.generators import (
        EmbeddingGenerator,
        TextGenerator,
        last_position_backend,
    )
    from edgekit.models.llmcert_b.lm import BiasLMConfig, train_cached
    from edgekit.models.tinylm.causal import CausalLM

    lm_config = BiasLMConfig(biased=biased)
    model, log = train_cached(lm_config)
    text = TextGenerator(CausalLM(last_position_backend(model), lm_config.max_len))
    generators = {"text": text, "embedding": EmbeddingGenerator(model)}
    matrix = model.tokens.weight.detach().numpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        started = time.perf_counter()
        certificates = certify_model(generators, config, matrix, step)
        seconds = time.perf_counter() - started
        plain = plain_unbiased(plain_answers(text))
    finally:
        torch.set_num_threads(threads)
    return {
        "lm": {**log, "config": asdict(lm_config)},
        "plain_unbiased": plain,
        "summary": summarise(certificates),
        "certificates": [c.to_json() for c in certificates],
        "certify_seconds": seconds,
    }


def _table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from edgekit.console import wide_console

    conf = report["config"]["confidence"]
    table = Table(
        title=f"LLMCert-B: {conf:.0%} Clopper-Pearson bounds on P(unbiased), "
        f"n = {report['config']['n']} per prompt, {report['config']['prompts']} prompts"
    )
    for col in ("LM", "prefixes", "unbiased", "mean lower", "min lower", "mean upper"):
        table.add_column(col, justify="left" if col in ("LM", "prefixes") else "right")
    for variant, record in report["variants"].items():
        table.add_row(variant, "none (greedy, 40 prompts)", f"{record['plain_unbiased']:.2f}",
                      "", "", "")  # fmt: skip
        for name, s in record["summary"].items():
            table.add_row(
                variant, name, f"{s['unbiased']}/{s['draws']}", f"{s['mean_lower']:.3f}",
                f"{s['min_lower']:.3f}", f"{s['mean_upper']:.3f}",
            )  # fmt: skip
    wide_console().print(table)


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(next(iter(report["variants"].values()))["summary"])
    width = 0.35
    for v_index, (variant, record) in enumerate(report["variants"].items()):
        for d_index, name in enumerate(names):
            certs = [c for c in record["certificates"] if c["distribution"] == name]
            for p_index, c in enumerate(certs):
                x = d_index + (v_index - 0.5) * width + (p_index - len(certs) / 2) * 0.05
                ax.plot([x, x], [c["lower"], c["upper"]], color=f"C{v_index}", lw=3)
        ax.plot([], [], color=f"C{v_index}", lw=3, label=f"{variant} LM")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("certified P(unbiased) interval")
    ax.set_title("LLMCert-B certificates per base prompt")
    ax.legend(loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_experiment(
    out: Path, show_progress: bool = True, config: StudyConfig | None = None
) -> dict[str, Any]:
    """Both variants, printed table, ``report.json`` and ``certificates.png`` under ``out``."""
    from edgekit.cache import atomic_write_text
    from edgekit.progress import step_progress

    config = config or StudyConfig()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"config": asdict(config), "variants": {}}
    total = len(VARIANTS) * 3 * config.prompts
    with step_progress("llmcert-b certificates", total, show_progress) as step:
        for variant, biased in VARIANTS.items():
            report["variants"][variant] = run_variant(
                biased, config, lambda name, v=variant: step(f"{v} LM, {name}")
            )
    _table(report)
    _plot(report, out / "certificates.png")
    atomic_write_text(out / "report.json", json.dumps(report, indent=1))
    return report


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval llmcert-b`` (``edgekit.study.Study``);
    its settings are fixed: the card's options do not change them."""
    return run_experiment(Path(out), show_progress)
