"""Orchestrators decide which agent acts next; ``run_agents_room`` runs a room to the end.

An ``Orchestrator`` is ``choose(pad, remaining agents) -> agent``. Built in:

- ``FixedOrder``: the deterministic policy of the paper, planning (conflict, character,
  setting, plot) then writing (exposition ... resolution);
- ``ShuffledPlanning``: planning agents in a seeded random order per scratchpad, then writing;
- ``BackendOrchestrator``: asks a ``TextBackend`` to name the next agent and falls back to
  another orchestrator when the answer names no remaining agent (``fallbacks`` counts it).

Every agent acts exactly once; the story is the writing agents' sections in section order.
Rooms for many premises run in lockstep, one batched backend call per turn.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from edgekit.errors import InputError
from edgekit.models.agents_room.agents import Agent, act, default_agents
from edgekit.models.agents_room.backend import TextBackend
from edgekit.models.agents_room.scratchpad import PREMISE, Scratchpad
from edgekit.models.agents_room.world import PLANNING, SECTIONS


class Orchestrator(Protocol):
    name: str

    def choose(self, pad: Scratchpad, remaining: Sequence[Agent]) -> Agent: ...


class FixedOrder:
    """The first remaining agent in ``order`` (default: PLANNING then SECTIONS)."""

    name = "fixed"

    def __init__(self, order: Sequence[str] = (*PLANNING, *SECTIONS)) -> None:
        self.order = tuple(order)

    def choose(self, pad: Scratchpad, remaining: Sequence[Agent]) -> Agent:
        by_name = {a.name: a for a in remaining}
        for name in self.order:
            if name in by_name:
                return by_name[name]
        return remaining[0]


class ShuffledPlanning:
    """Planning agents in a random order fixed per (seed, premise), then writing in order."""

    name = "shuffled-planning"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def choose(self, pad: Scratchpad, remaining: Sequence[Agent]) -> Agent:
        digest = hashlib.sha256(f"{self.seed}:{pad.entries[PREMISE]}".encode()).digest()
        order = list(PLANNING)
        random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
        return FixedOrder((*order, *SECTIONS)).choose(pad, remaining)


class BackendOrchestrator:
    """Asks ``backend`` "premise : ... done : a , b next agent :" and takes the first remaining
    agent name its answer contains; otherwise ``fallback`` decides (counted in ``fallbacks``)."""

    name = "backend"

    def __init__(self, backend: TextBackend, fallback: Orchestrator | None = None) -> None:
        self.backend, self.fallback = backend, fallback or FixedOrder()
        self.fallbacks = self.decisions = 0

    def choose(self, pad: Scratchpad, remaining: Sequence[Agent]) -> Agent:
        done = " , ".join(pad.log) or "nothing"
        prompt = f"{PREMISE} : {pad.entries[PREMISE]} done : {done} next agent :"
        answer = " ".join(re.findall(r"[a-z]+", self.backend.generate([prompt], 8)[0].lower()))
        self.decisions += 1
        hits = [(answer.find(a.name), a) for a in remaining if a.name in answer]
        if hits:
            return min(hits, key=lambda hit: hit[0])[1]
        self.fallbacks += 1
        return self.fallback.choose(pad, remaining)


@dataclass
class RoomResult:
    """One finished room: its scratchpad, the agents in the order they acted, the story."""

    pad: Scratchpad
    order: list[str]

    @property
    def story(self) -> str:
        return self.pad.story()


def run_agents_room(
    premises: Sequence[str],
    backend: TextBackend,
    agents: Sequence[Agent] | None = None,
    orchestrator: Orchestrator | None = None,
) -> list[RoomResult]:
    """Run one room per premise text until every agent has acted once."""
    agents = tuple(agents or default_agents())
    if len({a.name for a in agents}) != len(agents):
        raise InputError("each agent may appear once in a room")
    orchestrator = orchestrator or FixedOrder()
    pads = [Scratchpad(p) for p in premises]
    for _ in agents:
        chosen = []
        for pad in pads:
            remaining = [a for a in agents if not pad.has(a.name)]
            agent = orchestrator.choose(pad, remaining)
            if agent not in remaining:
                raise InputError(
                    f"orchestrator {orchestrator.name!r} chose {agent.name!r}, which is not waiting to act"
                )
            chosen.append(agent)
        act(chosen, pads, backend)
    return [RoomResult(pad, list(pad.log)) for pad in pads]


def end_to_end(
    premises: Sequence[str], backend: TextBackend, max_new_tokens: int = 160
) -> list[str]:
    """The baseline: the whole story from ``end_to_end_prompt`` in one generation per premise."""
    from edgekit.models.agents_room.scratchpad import end_to_end_prompt

    return backend.generate([end_to_end_prompt(p) for p in premises], max_new_tokens)
