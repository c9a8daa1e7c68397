"""``edgekit eval sae-polysemy``: the PS-Eval study (``report.eval_table``): tables by variant,
layer and hook point, the planted-feature positive control (``report["planted_control"]``:
``ps_eval_planted`` and its broken variants), report.json and frontier.png. With the card
option ``lm=FOLDER`` (a local causal LM), the card's one SAE recipe on that model instead
(``lm_study.run``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgekit.card import ModelCard
from edgekit.models.sae_polysemy.report import eval_table


def run(card: ModelCard, out: Path, show_progress: bool = True) -> dict[str, Any]:
    """The study behind ``edgekit eval sae-polysemy`` (``edgekit.study.Study``). On MiniLM its
    settings are fixed: the card's options do not change them. With the option ``lm``, the
    card's options are the recipe of the one SAE measured on that model."""
    if card.options.get("lm"):
        from edgekit.models.sae_polysemy.lm_study import run as run_lm

        return run_lm(card.sae_config(), Path(out), show_progress)
    return eval_table(Path(out), show_progress)
