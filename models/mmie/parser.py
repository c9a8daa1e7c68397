"""Reading a judge's verdict: the "### Score" parser and the "### Feedback / ### Score" format.

MMIE-Score's judge writes ``### Feedback`` (its reasons) then ``### Score`` (an integer 0-6);
the paper reads the score with the regex ``### Score.*?(-?\\d+(\\.\\d+)?)``. That regex takes
the first number after the first heading, so "### Score (0-6): 5" reads as 0 and a judge that
restates the template before answering is read from the template. ``parse_score`` keeps the
paper's rule (the first number after a Score heading) and makes it robust:

- the *last* Score heading that holds a number wins (the verdict comes last in the template);
- a range annotation such as "(0-6)", "[1 to 6]" or "on a 0-6 scale" is skipped;
- "4/6", "**4**", "4 out of 6", "Score:4.5" and a number word ("five") are read;
- any run of two or more '#' and any letter case count as a heading;
- with no heading at all, the last "score: N" / "score is N" phrase is used (``fallback``);
- a value outside [SCORE_MIN, SCORE_MAX] or no number at all raises InputError
  (``try_parse_score`` returns None instead).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from edgekit.errors import InputError
from edgekit.models.mmie.rubrics import SCORE_MAX, SCORE_MIN

PAPER_REGEX = re.compile(r"### Score.*?(-?\d+(\.\d+)?)", re.DOTALL)
_HEADING = re.compile(r"#{2,}\s*score\w*", re.IGNORECASE)
_ANY_HEADING = re.compile(r"#{2,}\s*\w")
_RANGE = re.compile(
    r"[(\[]\s*-?\d+(?:\.\d+)?\s*(?:-|–|to)\s*-?\d+(?:\.\d+)?\s*[)\]]"  # (0-6), [1 to 6]
    r"|(?:on\s+an?\s+|from\s+)?-?\d+(?:\.\d+)?\s*(?:-|–|to)\s*\d+(?:\.\d+)?\s+(?:scale|range)",
    re.IGNORECASE,
)
_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?![\w])|\b(" + "|".join(_WORDS) + r")\b", re.I)
_PHRASE = re.compile(
    r"\bscore\s*(?:is|of|=|:)?\s*[*_`]*\s*(-?\d+(?:\.\d+)?|" + "|".join(_WORDS) + r")\b",
    re.IGNORECASE,
)


def paper_parse(text: str) -> float | None:
    """The paper's regex as written (first heading, first number); None when it finds none."""
    match = PAPER_REGEX.search(text)
    return float(match.group(1)) if match else None


def _first_number(section: str) -> float | None:
    section = _RANGE.sub(" ", section)
    match = _NUMBER.search(section)
    if match is None:
        return None
    if match.group(1) is not None:
        return float(match.group(1))
    return float(_WORDS[match.group(2).lower()])


def _value(token: str) -> float:
    return float(_WORDS[token.lower()]) if token.lower() in _WORDS else float(token)


def _raw_score(text: str, fallback: bool) -> float | None:
    headings = list(_HEADING.finditer(text))
    for heading in reversed(headings):
        rest = text[heading.end() :]
        following = _ANY_HEADING.search(rest)
        section = rest[: following.start()] if following else rest
        value = _first_number(section)
        if value is not None:
            return value
    if headings or not fallback:
        return None
    phrases = list(_PHRASE.finditer(text))
    return _value(phrases[-1].group(1)) if phrases else None


def parse_score(text: str, fallback: bool = True) -> float:
    """The score a judge wrote in ``text`` (see the module docstring for the rules).

    Raises InputError when ``text`` is not a string, holds no score, or the score lies outside
    [SCORE_MIN, SCORE_MAX]."""
    if not isinstance(text, str):
        raise InputError(f"judge output must be a string, got {type(text).__name__}")
    value = _raw_score(text, fallback)
    if value is None:
        raise InputError(
            "judge output holds no score: expected a '### Score: N' section with N in "
            f"{SCORE_MIN}..{SCORE_MAX}; got {text[-80:]!r}"
        )
    if not SCORE_MIN <= value <= SCORE_MAX:
        raise InputError(f"judge score {value:g} is outside the scale {SCORE_MIN}..{SCORE_MAX}")
    return value


def try_parse_score(text: str, fallback: bool = True) -> float | None:
    """``parse_score`` that returns None instead of raising for a missing or invalid score."""
    try:
        return parse_score(text, fallback)
    except InputError:
        return None


@dataclass(frozen=True)
class Judgement:
    """One parsed verdict: the feedback text and the score (None when unreadable)."""

    feedback: str
    score: float | None


def format_judgement(feedback: str, score: int) -> str:
    """The judge's output in MMIE-Score's template: "### Feedback\\n...\\n### Score: N"."""
    if not SCORE_MIN <= score <= SCORE_MAX:
        raise InputError(f"score {score} is outside the scale {SCORE_MIN}..{SCORE_MAX}")
    return f"### Feedback\n{feedback.strip()}\n### Score: {int(score)}"


def parse_judgement(text: str) -> Judgement:
    """Split a verdict into its feedback (text under "### Feedback", else everything before the
    last Score heading) and its score (``try_parse_score``)."""
    if not isinstance(text, str):
        raise InputError(f"judge output must be a string, got {type(text).__name__}")
    headings = list(_HEADING.finditer(text))
    body = text[: headings[-1].start()] if headings else text
    match = re.search(r"#{2,}\s*feedback\w*\s*:?", body, re.IGNORECASE)
    feedback = body[match.end() :] if match else body
    return Judgement(feedback.strip(), try_parse_score(text))


def parse_many(texts: Iterable[str]) -> list[float | None]:
    """``try_parse_score`` over a sequence of judge outputs."""
    return [try_parse_score(t) for t in texts]
