"""The shared scratchpad and the prompts agents build from it (training uses the same prompts).

The scratchpad starts with the premise; each agent appends one entry under its own key. A
prompt is the entries an agent reads (planning agents: the premise and the other planning
entries; writing agents: the premise and the plan), each as ``"key : text"``, then an instruction:
``"plan : setting"`` for a planning agent, ``"write : climax"`` for a writing agent,
``"write : story"`` for end-to-end generation. Entries are rendered in the canonical order
(premise, planning, sections) whatever order they were written in, so the prompt an agent
sees depends on what is on the pad, not on the orchestrator's order.
"""

from __future__ import annotations

from collections.abc import Iterable

from edgekit.errors import InputError
from edgekit.models.agents_room.world import PLANNING, SECTIONS, with_header

PREMISE = "premise"
CANONICAL = (PREMISE, *PLANNING, *SECTIONS)


class Scratchpad:
    """Ordered ``key -> text`` entries; ``premise`` is always the first."""

    def __init__(self, premise: str) -> None:
        if not premise.strip():
            raise InputError("the scratchpad needs a non-empty premise")
        self.entries: dict[str, str] = {PREMISE: premise.strip()}
        self.log: list[str] = []  # keys in the order they were written

    def write(self, key: str, text: str) -> None:
        """Append the entry of agent ``key`` (one of PLANNING or SECTIONS, written once)."""
        if key not in CANONICAL or key == PREMISE:
            raise InputError(f"scratchpad key must be one of {CANONICAL[1:]}, got {key!r}")
        if key in self.entries:
            raise InputError(f"scratchpad already holds an entry for {key!r}")
        self.entries[key] = text.strip()
        self.log.append(key)

    def has(self, key: str) -> bool:
        return key in self.entries

    def render(self, keys: Iterable[str]) -> str:
        """The entries named by ``keys`` that exist, as ``"key : text"`` in canonical order."""
        wanted = set(keys)
        return " ".join(
            with_header(k, self.entries[k]) for k in CANONICAL if k in wanted and k in self.entries
        )

    def story(self) -> str:
        """The written sections with their headers, in canonical section order."""
        return self.render(SECTIONS)


def planning_prompt(pad: Scratchpad, kind: str) -> str:
    """Premise + the other planning entries on the pad + ``"plan : kind"``."""
    if kind not in PLANNING:
        raise InputError(f"planning agent must be one of {PLANNING}, got {kind!r}")
    others = [k for k in PLANNING if k != kind]
    return f"{pad.render([PREMISE, *others])} plan : {kind}"


def writing_prompt(pad: Scratchpad, section: str) -> str:
    """Premise + the plan entries on the pad + ``"write : section"``.

    The sections already written are left out: the plan carries every choice a section needs,
    and the prompt stays within the story LM's context (about 110 tokens with a full plan)."""
    if section not in SECTIONS:
        raise InputError(f"writing agent must be one of {SECTIONS}, got {section!r}")
    return f"{pad.render([PREMISE, *PLANNING])} write : {section}"


def end_to_end_prompt(premise: str) -> str:
    """The one-shot prompt: premise + ``"write : story"``."""
    return f"{PREMISE} : {premise.strip()} write : story"
