"""The judge's text format in MiniLM WordPiece ids (the vocabulary of tinylm's TinyCausalLM).

Prompt: ``[CLS] question [SEP] a : answer a [SEP] b : answer b [SEP]``, with a hint
``hint : a [SEP]`` appended for hint-driven sampling ("answer a is known to be better").
Every field is filled with a filler token to a fixed slot width (question 10 tokens, answers 6,
filled on the left so an answer's last word, its value, sits at a fixed position).
Judgment (what the judge writes): ``rationale . better : value [SEP]``; the gold rationale is the
fact as a sentence ("anna lives in paris"), then the better answer is quoted by its value. The
verdict is the answer whose value (last word) the judgment quotes; a judgment quoting neither
answer has no verdict (counted wrong). The tiny judge did not learn to write the answer's label
"a"/"b" itself (with or without slots, 200-300 SFT steps: it fell back on the labels' length
bias), so the host reads the label from the quoted value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from edgekit.errors import InputError
from edgekit.models.con_j.prefs import LONG_FORM, PrefPair
from edgekit.models.sdlg.corpus import ATTRIBUTES
from edgekit.models.tinylm.tokens import CLS_ID, EOS_ID, SEP_ID, decode, encode

VERDICTS = ("a", "b")
FILLER_ID = 1  # "[unused0]": fills a field to its slot width (attended, like any token)
QUESTION_SLOT = 10  # tokens
ANSWER_SLOT = 6


@dataclass(frozen=True)
class Vocab:
    """Token ids of the format's fixed words."""

    better: int
    colon: int
    a: int
    b: int
    period: int


@lru_cache(maxsize=1)
def vocab() -> Vocab:
    better, colon, a, b, period = encode("better : a b .")
    return Vocab(better, colon, a, b, period)


def verdict_id(verdict: str) -> int:
    """Token id of verdict "a" or "b"."""
    if verdict not in VERDICTS:
        raise InputError(f"verdict must be 'a' or 'b', got {verdict!r}")
    return vocab().a if verdict == "a" else vocab().b


def _slot(ids: list[int], width: int, what: str, left: bool = False) -> list[int]:
    if len(ids) > width:
        raise InputError(f"{what} has {len(ids)} tokens; its slot holds {width}")
    fill = [FILLER_ID] * (width - len(ids))
    return fill + ids if left else ids + fill


def prompt_ids(question: str, answer_a: str, answer_b: str, hint: str | None = None) -> list[int]:
    """The judge prompt's ids, each field filled to its slot width (fixed positions; answers
    filled on the left so their last word, the value, sits at a fixed position);
    ``hint`` ("a" | "b" | None) appends ``hint : x [SEP]``."""
    ids = [CLS_ID, *_slot(encode(question), QUESTION_SLOT, "question"), SEP_ID]
    for label, answer in (("a :", answer_a), ("b :", answer_b)):
        ids += [
            *encode(label),
            *_slot(encode(answer), ANSWER_SLOT, f"answer {label[0]}", True),
            SEP_ID,
        ]
    if hint is not None:
        ids += [*encode("hint :"), verdict_id(hint), SEP_ID]
    return ids


def pair_prompt(pair: PrefPair, hint: str | None = None) -> list[int]:
    """``prompt_ids`` of a preference pair."""
    return prompt_ids(pair.question, pair.answer_a, pair.answer_b, hint)


def judgment_ids(rationale: str, quote: str | None = None) -> list[int]:
    """``rationale . better : quote`` ids followed by EOS; ``quote`` (the value of the answer
    judged better) defaults to the rationale's last word."""
    v = vocab()
    quote = rationale.split()[-1] if quote is None else quote
    return [*encode(rationale), v.period, v.better, v.colon, *encode(quote), EOS_ID]


def gold_judgment(pair: PrefPair) -> list[int]:
    """The gold judgment of ``pair``: the fact as a sentence, then the better answer's value."""
    return judgment_ids(pair.fact.answer(LONG_FORM), pair.fact.value)


def answer_value(answer: str) -> str:
    """An answer's value: its last word ("anna lives in paris" -> "paris")."""
    return answer.split()[-1]


def quoted(tokens: Sequence[int]) -> str | None:
    """The text after the last ``better :`` of judgment ``tokens`` (EOS excluded), or None."""
    v = vocab()
    tokens = [int(t) for t in tokens]
    for i in range(len(tokens) - 2, -1, -1):
        if tokens[i] == v.better and tokens[i + 1] == v.colon:
            return decode(tokens[i + 2 :]).strip() or None
    return None


def parse_verdict(tokens: Sequence[int], answer_a: str, answer_b: str) -> str | None:
    """The verdict of judgment ``tokens``: "a" or "b", the answer whose value the judgment
    quotes after ``better :``; None when it quotes neither (or both, or nothing)."""
    quote = quoted(tokens)
    in_a = quote is not None and quote == answer_value(answer_a)
    in_b = quote is not None and quote == answer_value(answer_b)
    return "a" if in_a and not in_b else "b" if in_b and not in_a else None


def pair_verdict(tokens: Sequence[int], pair: PrefPair) -> str | None:
    """``parse_verdict`` against the answers of ``pair``."""
    return parse_verdict(tokens, pair.answer_a, pair.answer_b)


def rationale_text(tokens: Sequence[int]) -> str:
    """The rationale of generated judgment ``tokens``: the text before the first ``.``."""
    tokens = [int(t) for t in tokens]
    cut = tokens.index(vocab().period) if vocab().period in tokens else len(tokens)
    return decode(tokens[:cut])


def rationale_value(tokens: Sequence[int], attribute: str) -> str | None:
    """The ``attribute`` value the rationale states (its last word that is such a value)."""
    values = set(ATTRIBUTES[attribute]["values"])
    words = [w for w in rationale_text(tokens).split() if w in values]
    return words[-1] if words else None


def judgment_text(tokens: Sequence[int]) -> str:
    """Readable text of generated judgment ``tokens`` (EOS dropped)."""
    return decode([int(t) for t in tokens if int(t) != EOS_ID])
