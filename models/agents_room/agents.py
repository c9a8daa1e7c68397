"""Planning and writing agents: each reads the scratchpad, calls the backend, appends one entry.

Planning agents (conflict, character, setting, plot) write the plan; writing agents
(exposition, rising action, climax, falling action, resolution) write the story's sections,
each conditioned on the premise and the whole plan only: ``writing_prompt`` leaves the
sections already written out of the prompt. An agent is just its name, its kind and its token
budget: the prompt format lives in ``scratchpad.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgekit.errors import InputError
from edgekit.models.agents_room.backend import TextBackend
from edgekit.models.agents_room.scratchpad import Scratchpad, planning_prompt, writing_prompt
from edgekit.models.agents_room.world import PLANNING, SECTIONS


@dataclass(frozen=True)
class Agent:
    """One specialised agent: ``name`` is its scratchpad key; ``kind`` "planning" | "writing"."""

    name: str
    kind: str
    max_new_tokens: int

    def __post_init__(self) -> None:
        known = (
            PLANNING if self.kind == "planning" else SECTIONS if self.kind == "writing" else None
        )
        if known is None:
            raise InputError(f"agent kind must be 'planning' or 'writing', got {self.kind!r}")
        if self.name not in known:
            raise InputError(f"{self.kind} agent must be one of {known}, got {self.name!r}")
        if self.max_new_tokens < 1:
            raise InputError(f"agent {self.name!r}: max_new_tokens must be >= 1")

    def prompt(self, pad: Scratchpad) -> str:
        """What the agent asks the backend, built from what is on ``pad`` now."""
        return (
            planning_prompt(pad, self.name)
            if self.kind == "planning"
            else writing_prompt(pad, self.name)
        )


def default_agents(plan_tokens: int = 40, section_tokens: int = 48) -> tuple[Agent, ...]:
    """The four planning agents then the five writing agents."""
    return (
        *(Agent(name, "planning", plan_tokens) for name in PLANNING),
        *(Agent(name, "writing", section_tokens) for name in SECTIONS),
    )


def act(agents: Sequence[Agent], pads: Sequence[Scratchpad], backend: TextBackend) -> list[str]:
    """Agent i acts on pad i (one batched backend call per distinct budget); returns the
    entries written."""
    if len(agents) != len(pads):
        raise InputError(f"{len(agents)} agents for {len(pads)} scratchpads")
    texts: list[str] = [""] * len(pads)
    for budget in sorted({a.max_new_tokens for a in agents}):
        rows = [i for i, a in enumerate(agents) if a.max_new_tokens == budget]
        outputs = backend.generate([agents[i].prompt(pads[i]) for i in rows], budget)
        for i, text in zip(rows, outputs, strict=True):
            texts[i] = text
    for agent, pad, text in zip(agents, pads, texts, strict=True):
        pad.write(agent.name, text)
    return texts
