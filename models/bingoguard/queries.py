"""The user queries BingoGuard responses answer: generated for training, hand-written for test.

BingoGuard classifies a response given the question it answers. The generator's responses
(generate.py) get a query after filtering: a kind drawn with odds that depend on the response's
level (``KIND_ODDS``: a refusal most often answers a request for harm, a news summary a question
about the news), then a message of that kind for the response's topic from
``templates_queries.json`` with its slots filled. The odds overlap on purpose: a request for
harm is answered at every level, so the query alone never gives the label away. A share
``EMPTY_SHARE`` of the responses keeps no query, so a scorer trained on pairs still scores a
response given alone. Everything is seeded by (seed, example index): the responses, and the
response-only recipe, are untouched.

The held-out responses' queries were written by hand (``heldout_queries.tsv``, one per id).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from edgekit.errors import InputError
from edgekit.models.bingoguard.data import Example
from edgekit.models.bingoguard.taxonomy import NUM_LEVELS, load_taxonomy

QUERIES_FILE = Path(__file__).with_name("templates_queries.json")
HELDOUT_QUERIES_FILE = Path(__file__).with_name("heldout_queries.tsv")
KINDS = ("harm", "info", "story", "opinion")
#: odds of each query kind (KINDS order) for a response of level 0..4
KIND_ODDS: tuple[tuple[float, ...], ...] = (
    (0.45, 0.35, 0.05, 0.15),  # 0 benign: refusals of harmful asks, safety advice
    (0.10, 0.20, 0.60, 0.10),  # 1 low risk: fiction, history, news
    (0.25, 0.10, 0.05, 0.60),  # 2 risk: opinions that normalise the harm
    (0.65, 0.05, 0.05, 0.25),  # 3 high risk: encouragement, partial help
    (0.85, 0.05, 0.05, 0.05),  # 4 extreme risk: real help with severe harm
)
EMPTY_SHARE = 0.15  # responses that keep no query
_SLOT = re.compile(r"\{(\w+)\}")


@lru_cache(maxsize=1)
def load_query_templates() -> dict[str, dict[str, list[str]]]:
    """{topic id: {kind: [query templates]}} from ``templates_queries.json``, checked: every
    topic of the taxonomy, every kind non-empty, every ``{slot}`` one the topic's response
    fragments define."""
    from edgekit.models.bingoguard.generate import load_fragments

    table = json.loads(QUERIES_FILE.read_text(encoding="utf-8"))["topics"]
    _, fragments = load_fragments()
    for topic in load_taxonomy().topic_ids():
        kinds = table.get(topic)
        if not isinstance(kinds, dict) or any(not kinds.get(k) for k in KINDS):
            raise ValueError(f"{QUERIES_FILE}: topic {topic} needs non-empty lists {KINDS}")
        slots = fragments[topic]["slots"]
        for kind in KINDS:
            for query in kinds[kind]:
                unknown = set(_SLOT.findall(query)) - set(slots)
                if unknown:
                    raise ValueError(
                        f"{QUERIES_FILE}: {topic}/{kind} query {query!r} uses slots "
                        f"{sorted(unknown)} that topic {topic} does not define"
                    )
    return table


def draw_query(topic: int, level: int, rng: random.Random) -> str:
    """One generated query for a response of ``topic`` (index) and ``level``: "" with odds
    EMPTY_SHARE, else a kind drawn by KIND_ODDS[level] and a template with its slots filled."""
    from edgekit.models.bingoguard.generate import load_fragments

    if rng.random() < EMPTY_SHARE:
        return ""
    topic_id = load_taxonomy().topic_ids()[topic]
    kind = rng.choices(KINDS, weights=KIND_ODDS[level])[0]
    template = rng.choice(load_query_templates()[topic_id][kind])
    slots = load_fragments()[1][topic_id]["slots"]
    query = _SLOT.sub(lambda m: rng.choice(slots[m.group(1)]), template)
    return query[0].upper() + query[1:]


def with_generated_queries(examples: Sequence[Example], seed: int) -> tuple[Example, ...]:
    """``examples`` with a generated query each (seeded per (seed, index)); examples without a
    harm topic (everyday text) keep none."""
    if len(KIND_ODDS) != NUM_LEVELS:  # pragma: no cover - a table edit gone wrong
        raise ValueError(f"KIND_ODDS needs {NUM_LEVELS} rows")
    out = []
    for i, example in enumerate(examples):
        if example.topic < 0:
            out.append(example)
            continue
        rng = random.Random(f"bingoguard-query/{seed}/{i}")
        out.append(replace(example, query=draw_query(example.topic, example.level, rng)))
    return tuple(out)


@lru_cache(maxsize=2)
def load_heldout_queries(path: str | None = None) -> dict[str, str]:
    """{held-out id: hand-written query} from ``heldout_queries.tsv`` (``#`` comments, header
    ``id query``); ValueError naming the line for a malformed or repeated row."""
    from edgekit.tsv import tsv_rows

    file = Path(path) if path else HELDOUT_QUERIES_FILE
    out: dict[str, str] = {}
    for lineno, _, (row_id, query) in tsv_rows(file, [("id", "query")]):
        if not query.strip() or row_id in out:
            raise ValueError(f"{file}:{lineno}: expected 'id<TAB>query' with a new id and a query")
        out[row_id] = query.strip()
    return out


def check_queries(queries: Any, count: int) -> list[str]:
    """``queries`` as ``count`` strings ("" = no query), else InputError."""
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
        raise InputError(f"queries must be a list of {count} strings, one per text")
    if len(queries) != count:
        raise InputError(f"{len(queries)} queries for {count} texts: give one per text")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise InputError(f"query {i} is a {type(query).__name__}, expected str ('' for none)")
    return list(queries)
