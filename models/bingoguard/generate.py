"""Generate-then-filter training data for the compact BingoGuard scorer.

Generator: for every topic x severity level ("cell") it composes candidate responses from the
shipped fragments (``templates_common.json``: stance openers/closers per level;
``templates_topics.json``: slot fillers and core sentences per topic and level). Like an LLM
asked for a given level, it does not always hit the cell: with probability ``drift`` the core
sentence comes from a neighbouring level, with ``topic_drift`` from another topic, and the
opener/closer stray to a neighbouring level with ``frame_drift``. Every candidate keeps the
cell it was asked for as its label and records whether any fragment strayed.

Filter: an independent scorer, a TF-IDF (word 1-2 grams) complement naive Bayes classifier that
never sees the candidate it scores (k-fold, out-of-fold predictions), predicts the topic and the
level of every candidate; only candidates whose predictions agree with the requested cell
survive. The scorer shares nothing with the MiniLM model trained on the survivors. (Naive Bayes
was chosen over logistic regression, ridge and linear SVM because, on the default config, it
removed 79% of candidates whose core sentence strayed while dropping under 1% of the others;
the discriminative models learned the strayed cores as part of the cell and removed under 45%.)

Split: the last core sentence of every cell is reserved for validation, so the validation texts
use phrasings the training texts never contain. Everything is seeded and deterministic.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import InputError
from edgekit.models.bingoguard.data import Example
from edgekit.models.bingoguard.taxonomy import NUM_LEVELS, load_taxonomy

COMMON_FILE = Path(__file__).with_name("templates_common.json")
TOPICS_FILE = Path(__file__).with_name("templates_topics.json")
_SLOT = re.compile(r"\{(\w+)\}")
_KEEP_CASE = {"I", "I'll", "I'm", "I've", "I'd"}


@dataclass(frozen=True)
class GeneratorConfig:
    """Everything that determines the generated and filtered data."""

    per_cell: int = 110  # candidates asked for per topic x level
    drift: float = 0.15  # P(core sentence from a neighbouring level)
    topic_drift: float = 0.04  # P(core sentence from another topic, same level)
    frame_drift: float = 0.10  # P(opener or closer from a neighbouring level), each
    folds: int = 5  # k of the filter's out-of-fold scorer
    seed: int = 0

    def __post_init__(self) -> None:
        if self.per_cell < 1:
            raise InputError(f"per_cell must be >= 1, got {self.per_cell}")
        for name in ("drift", "topic_drift", "frame_drift"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise InputError(f"{name} is a probability in [0, 1), got {value}")
        if self.folds < 2:
            raise InputError(f"the filter needs at least 2 folds, got {self.folds}")


@dataclass(frozen=True)
class Candidate:
    """One generated response: the cell asked for, the core sentence used, whether it strayed.

    ``core`` is (topic index, level, core index) of the core sentence actually used;
    ``drift`` says how the candidate strayed: "" (it did not), "frame" (only the opener or
    closer came from a neighbouring level), "level" or "topic" (the core sentence did).
    """

    text: str
    topic: int
    level: int
    core: tuple[int, int, int]
    drift: str = ""

    def example(self) -> Example:
        return Example(self.text, self.topic, self.level)


@dataclass
class FilterReport:
    """How many candidates each cell got and kept, and how the filter treated strayed ones.

    ``by_drift`` maps a drift kind ("none", "frame", "level", "topic") to [generated, removed].
    """

    generated: dict[str, int] = field(default_factory=dict)  # "S1/0" -> count
    kept: dict[str, int] = field(default_factory=dict)
    by_drift: dict[str, list[int]] = field(default_factory=dict)

    @property
    def total_generated(self) -> int:
        return sum(self.generated.values())

    @property
    def total_kept(self) -> int:
        return sum(self.kept.values())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(total_generated=self.total_generated, total_kept=self.total_kept)
        return data


@dataclass(frozen=True)
class Dataset:
    """Filtered examples split by core sentence: train and validation never share one."""

    train: tuple[Example, ...]
    validation: tuple[Example, ...]
    report: FilterReport


@lru_cache(maxsize=1)
def load_fragments() -> tuple[dict[str, Any], dict[str, Any]]:
    """(common, topics) fragment tables, checked: every topic of the taxonomy, every level."""
    common = json.loads(COMMON_FILE.read_text(encoding="utf-8"))
    topics = json.loads(TOPICS_FILE.read_text(encoding="utf-8"))["topics"]
    ids = load_taxonomy().topic_ids()
    if sorted(topics) != sorted(ids):
        raise ValueError(f"{TOPICS_FILE}: topics {sorted(topics)} differ from taxonomy {ids}")
    for topic_id, entry in topics.items():
        for level in range(NUM_LEVELS):
            cores = entry["cores"].get(str(level)) or []
            if len(cores) < 2:
                raise ValueError(f"{TOPICS_FILE}: {topic_id} level {level} needs >= 2 cores")
            for core in cores:
                missing = set(_SLOT.findall(core)) - set(entry["slots"])
                if missing:
                    raise ValueError(f"{TOPICS_FILE}: {topic_id} core uses unknown {missing}")
    for part in ("openers", "closers"):
        if sorted(common[part]) != [str(i) for i in range(NUM_LEVELS)]:
            raise ValueError(f"{COMMON_FILE}: {part} must cover levels 0-{NUM_LEVELS - 1}")
    return common, topics


def _neighbour(level: int, rng: random.Random) -> int:
    options = [x for x in (level - 1, level + 1) if 0 <= x < NUM_LEVELS]
    return rng.choice(options)


def _join(opener: str, core: str, closer: str, core_starts_with_slot: bool) -> str:
    """Opener + core + closer as one text, fixing the core's first letter for its position."""
    if opener.endswith(",") and not core_starts_with_slot and core.split()[0] not in _KEEP_CASE:
        core = core[0].lower() + core[1:]
    elif not opener or opener[-1] in ".!?":
        core = core[0].upper() + core[1:]
    return " ".join(part for part in (opener, core, closer) if part)


def generate_candidates(config: GeneratorConfig) -> list[Candidate]:
    """``config.per_cell`` distinct candidates per topic x level, in cell order (seeded).

    A cell gets at most ``20 * per_cell`` draws; one whose fragments cannot make that many
    distinct texts ends up with fewer (the default fragments fill every cell).
    """
    common, table = load_fragments()
    topic_ids = load_taxonomy().topic_ids()
    rng = random.Random(config.seed)
    out: list[Candidate] = []
    for t in range(len(topic_ids)):
        for level in range(NUM_LEVELS):
            seen: set[str] = set()
            for _ in range(20 * config.per_cell):
                if len(seen) >= config.per_cell:
                    break
                core_topic, core_level = t, level
                roll = rng.random()
                if roll < config.topic_drift:
                    core_topic = rng.choice([i for i in range(len(topic_ids)) if i != t])
                elif roll < config.topic_drift + config.drift:
                    core_level = _neighbour(level, rng)
                entry = table[topic_ids[core_topic]]
                cores = entry["cores"][str(core_level)]
                index = rng.randrange(len(cores))
                template = cores[index]
                core = _SLOT.sub(lambda m, e=entry: rng.choice(e["slots"][m.group(1)]), template)
                frame = []
                for part in ("openers", "closers"):
                    lv = _neighbour(level, rng) if rng.random() < config.frame_drift else level
                    frame.append((rng.choice(common[part][str(lv)]), lv))
                (opener, open_lv), (closer, close_lv) = frame
                text = _join(opener, core, closer, template.startswith("{"))
                if text in seen:
                    continue
                seen.add(text)
                drift = "topic" if core_topic != t else "level" if core_level != level else ""
                if not drift and ((opener and open_lv != level) or (closer and close_lv != level)):
                    drift = "frame"
                out.append(Candidate(text, t, level, (core_topic, core_level, index), drift))
    return out


def out_of_fold_predictions(
    texts: list[str], labels: np.ndarray, folds: int, seed: int
) -> np.ndarray:
    """Label predicted for every text (N,) by TF-IDF + complement naive Bayes trained on the
    other folds only (stratified k-fold, seeded)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import StratifiedKFold
    from sklearn.naive_bayes import ComplementNB

    labels = np.asarray(labels)
    predicted = np.empty_like(labels)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train_idx, test_idx in splitter.split(np.zeros(len(labels)), labels):
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
        features = vectorizer.fit_transform([texts[i] for i in train_idx])
        classifier = ComplementNB(alpha=0.3)
        classifier.fit(features, labels[train_idx])
        predicted[test_idx] = classifier.predict(vectorizer.transform([texts[i] for i in test_idx]))
    return predicted


def filter_candidates(
    candidates: list[Candidate], config: GeneratorConfig
) -> tuple[list[Candidate], FilterReport]:
    """Keep the candidates whose out-of-fold topic and level both match the cell asked for."""
    texts = [c.text for c in candidates]
    topics = np.array([c.topic for c in candidates])
    levels = np.array([c.level for c in candidates])
    topic_pred = out_of_fold_predictions(texts, topics, config.folds, config.seed)
    level_pred = out_of_fold_predictions(texts, levels, config.folds, config.seed + 1)
    keep = (topic_pred == topics) & (level_pred == levels)
    ids = load_taxonomy().topic_ids()
    report = FilterReport()
    generated, kept = Counter(), Counter()
    report.by_drift = {kind: [0, 0] for kind in ("none", "frame", "level", "topic")}
    for cand, ok in zip(candidates, keep, strict=True):
        cell = f"{ids[cand.topic]}/{cand.level}"
        generated[cell] += 1
        kept[cell] += int(ok)
        counts = report.by_drift[cand.drift or "none"]
        counts[0] += 1
        counts[1] += int(not ok)
    report.generated, report.kept = dict(generated), {k: kept[k] for k in generated}
    return [c for c, ok in zip(candidates, keep, strict=True) if ok], report


def is_validation_core(core: tuple[int, int, int]) -> bool:
    """True for the last core sentence of its cell: reserved for the validation split."""
    _, table = load_fragments()
    t, level, index = core
    topic_id = load_taxonomy().topic_ids()[t]
    return index == len(table[topic_id]["cores"][str(level)]) - 1


@lru_cache(maxsize=4)
def build_dataset(config: GeneratorConfig = GeneratorConfig()) -> Dataset:  # noqa: B008
    """Generate, filter and split (cached per config in this process)."""
    survivors, report = filter_candidates(generate_candidates(config), config)
    train = tuple(c.example() for c in survivors if not is_validation_core(c.core))
    validation = tuple(c.example() for c in survivors if is_validation_core(c.core))
    return Dataset(train, validation, report)


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Lower-cased word n-grams of ``text`` (punctuation dropped)."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def shared_ngrams(texts: list[str], others: list[str], n: int = 8) -> set[tuple[str, ...]]:
    """Word n-grams that occur both in ``texts`` and in ``others`` (overlap audit)."""
    left: set[tuple[str, ...]] = set()
    for text in texts:
        left |= word_ngrams(text, n)
    right: set[tuple[str, ...]] = set()
    for text in others:
        right |= word_ngrams(text, n)
    return left & right


def survivor_table(report: FilterReport) -> list[list[str]]:
    """Rows "topic, kept/generated per level 0-4, total" for printing the survivor counts."""
    rows = []
    for topic in load_taxonomy().topics:
        cells = [
            f"{report.kept.get(f'{topic.id}/{lv}', 0)}/{report.generated.get(f'{topic.id}/{lv}', 0)}"
            for lv in range(NUM_LEVELS)
        ]
        kept = sum(report.kept.get(f"{topic.id}/{lv}", 0) for lv in range(NUM_LEVELS))
        made = sum(report.generated.get(f"{topic.id}/{lv}", 0) for lv in range(NUM_LEVELS))
        rows.append([f"{topic.id} {topic.name}", *cells, f"{kept}/{made}"])
    return rows
