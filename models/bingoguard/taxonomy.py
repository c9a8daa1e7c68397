"""The BingoGuard moderation taxonomy: 11 topics x 5 severity levels, read from ``taxonomy.json``.

Every level has one shared header (0 benign .. 4 extreme risk) and every topic adds its own
rubric sentence per level. Level 0 is safe; levels 1-4 are unsafe (the binary task's positive
class). Topics are named by id ("S1"), key ("violent_crime") or name ("Violent crime"),
case-insensitively; anything else is an InputError listing the known topics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from edgekit.errors import InputError

TAXONOMY_FILE = Path(__file__).with_name("taxonomy.json")
NUM_LEVELS = 5
NUM_TOPICS = 11


@dataclass(frozen=True)
class Level:
    """One severity level: number 0-4, short name and the header shared by every topic."""

    level: int
    name: str
    header: str

    @property
    def unsafe(self) -> bool:
        return self.level >= 1


@dataclass(frozen=True)
class Topic:
    """One harm topic with its rubric: ``rubric[level]`` is the text for levels 0-4."""

    id: str
    key: str
    name: str
    description: str
    rubric: tuple[str, ...]


@dataclass(frozen=True)
class Taxonomy:
    """Levels (5), topics (11) and the judgment dimensions, in file order."""

    levels: tuple[Level, ...]
    topics: tuple[Topic, ...]
    dimensions: tuple[tuple[str, str], ...]

    def topic(self, name: str) -> Topic:
        """The topic named ``name`` (id, key or name, any case); InputError when unknown."""
        wanted = " ".join(str(name).strip().lower().replace("_", " ").split())
        for topic in self.topics:
            if wanted in (topic.id.lower(), topic.key.replace("_", " "), topic.name.lower()):
                return topic
        known = ", ".join(f"{t.id} ({t.key})" for t in self.topics)
        raise InputError(f"unknown BingoGuard topic {name!r}; known topics: {known}")

    def topic_index(self, name: str) -> int:
        """Position 0-10 of the topic named ``name`` (see ``topic``)."""
        return self.topics.index(self.topic(name))

    def topic_ids(self) -> list[str]:
        return [t.id for t in self.topics]

    def rubric_text(self, topic: str, level: int) -> str:
        """Level header followed by the topic's rubric sentence for ``level`` (0-4)."""
        return f"{self.levels[check_level(level)].header} {self.topic(topic).rubric[level]}"


def check_level(level: int) -> int:
    """``level`` as an int in 0-4; InputError otherwise."""
    try:
        value = int(level)
    except (TypeError, ValueError) as exc:
        raise InputError(f"severity level must be an integer 0-4, got {level!r}") from exc
    if not 0 <= value < NUM_LEVELS or value != level:
        raise InputError(f"severity level must be an integer 0-4, got {level!r}")
    return value


def is_unsafe(level: int) -> bool:
    """The binary label of a severity level: unsafe when level >= 1."""
    return check_level(level) >= 1


@lru_cache(maxsize=1)
def load_taxonomy(path: str | None = None) -> Taxonomy:
    """Parse and validate the taxonomy file (default: the shipped ``taxonomy.json``).

    Raises ValueError when levels are not exactly 0-4, a topic lacks a rubric sentence for a
    level, ids or keys repeat, or the file does not hold 11 topics.
    """
    file = Path(path) if path else TAXONOMY_FILE
    raw = json.loads(file.read_text(encoding="utf-8"))
    levels = tuple(Level(int(x["level"]), x["name"], x["header"]) for x in raw["levels"])
    if [lv.level for lv in levels] != list(range(NUM_LEVELS)):
        raise ValueError(f"{file}: levels must be 0..{NUM_LEVELS - 1} in order")
    topics = []
    for entry in raw["topics"]:
        rubric = tuple(entry["rubric"].get(str(i), "").strip() for i in range(NUM_LEVELS))
        if not all(rubric) or len(entry["rubric"]) != NUM_LEVELS:
            raise ValueError(f"{file}: topic {entry['id']} needs rubric text for levels 0-4")
        topics.append(Topic(entry["id"], entry["key"], entry["name"], entry["description"], rubric))
    if len(topics) != NUM_TOPICS:
        raise ValueError(f"{file}: expected {NUM_TOPICS} topics, found {len(topics)}")
    for attr in ("id", "key", "name"):
        values = [getattr(t, attr) for t in topics]
        if len(set(values)) != len(values):
            raise ValueError(f"{file}: topic {attr}s repeat: {values}")
    dims = tuple((d["name"], d["question"]) for d in raw["dimensions"])
    return Taxonomy(levels, tuple(topics), dims)
