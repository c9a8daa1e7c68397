"""What SDLG needs of an LM's tokens: its prompt, where answers stop, words and text.

An ``AnswerVocabulary`` turns a question into the prefix the LM answers from, names the ids
that end an answer (``stop_ids``) and the ones never proposed as substitutes
(``special_ids``), groups an answer's tokens into words (only a word's first token is
substituted) and decodes answers to text, with each token's character span (``answer_spans``)
for equivalence models that read text with their own tokenizer.

- ``WordPieceVocabulary`` (``WORDPIECE``): the in-repo tiny LM's MiniLM WordPiece ids, prompt
  ``[CLS] question [SEP]``, EOS = [SEP], a "##" piece joins the word before it.
- ``TokenizerVocabulary``: any causal LM with its own fast tokenizer (transformers): a text
  prompt template around the question (the tokenizer adds its own special tokens, e.g. a BOS),
  answers stop at the tokenizer's EOS and, with ``stop="newline"``, at any token whose text
  holds a newline; a token starts a word when whitespace comes before it (GPT-2's "Ġ",
  SentencePiece's "▁").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from edgekit.errors import InputError
from edgekit.models.sdlg.semantic import word_groups
from edgekit.models.tinylm.tokens import (
    CLS_ID,
    EOS_ID,
    SEP_ID,
    SPECIAL_IDS,
    VOCAB_SIZE,
    decode,
    encode,
    token_strings,
)

MAX_QUESTION_CHARS = 2000
STOPS = ("newline", "eos")
DEFAULT_PROMPT = "Question: {question}\nAnswer:"


class AnswerVocabulary(Protocol):
    size: int  # ids below it are real tokens
    stop_ids: frozenset[int]
    special_ids: frozenset[int]
    prompt_tokens: int  # prompt tokens besides the question's

    def prefix(self, question: str, max_tokens: int) -> tuple[list[int], list[int], bool]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def answer_spans(self, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]: ...

    def word_groups(self, answer: Sequence[int]) -> list[int]: ...

    def word(self, answer: Sequence[int], position: int) -> str: ...

    def token_text(self, token: int) -> str: ...

    def feed_ids(self, question: str, answer: str) -> list[int]: ...


def check_question(question: object) -> str:
    """``question`` when it is a non-empty string of at most ``MAX_QUESTION_CHARS``."""
    if not isinstance(question, str) or not question.strip():
        raise InputError("question must be a non-empty string")
    if len(question) > MAX_QUESTION_CHARS:
        raise InputError(f"question is {len(question)} characters, over {MAX_QUESTION_CHARS}")
    return question


def _warn_cut(tokens: int, max_tokens: int) -> None:
    warnings.warn(
        f"question of {tokens} tokens cut to its first {max_tokens} (LM context)", stacklevel=4
    )


def question_prefix(question: str, max_tokens: int) -> tuple[list[int], list[int], bool]:
    """(prefix ids ``[CLS] q [SEP]``, question ids, truncated) for ``question``.

    An empty question is an InputError; one over ``max_tokens`` WordPiece tokens keeps its
    first ``max_tokens`` tokens, warns and reports ``truncated`` (the LM's position table
    bounds question + answer)."""
    check_question(question)
    ids = encode(question)
    if not ids:
        raise InputError(f"question {question!r} has no tokens")
    truncated = len(ids) > max_tokens
    if truncated:
        warnings.warn(
            f"question of {len(ids)} tokens cut to its first {max_tokens} (LM context)",
            stacklevel=3,
        )
        ids = ids[:max_tokens]
    return [CLS_ID, *ids, SEP_ID], ids, truncated


def raw_spans(
    decode_ids: Callable[[Sequence[int]], str], ids: Sequence[int]
) -> tuple[str, list[tuple[int, int]]]:
    """(text of ``ids`` as decoded, each token's character span (start, end) in it), from
    decoding growing prefixes. A token that adds no text (a special token, part of a
    multi-byte character) gets an empty span."""
    full = decode_ids(list(ids))
    spans, before = [], 0
    for t in range(len(ids)):
        now = decode_ids(list(ids[: t + 1]))
        shared = len(now) if full.startswith(now) else _common_prefix(full, now)
        spans.append((min(before, shared), max(before, shared)))
        before = shared
    return full, spans


def incremental_spans(
    decode_ids: Callable[[Sequence[int]], str], ids: Sequence[int]
) -> tuple[str, list[tuple[int, int]]]:
    """``raw_spans`` with the text stripped of surrounding whitespace and the spans moved
    into the stripped text."""
    full, spans = raw_spans(decode_ids, ids)
    lead = len(full) - len(full.lstrip())
    text = full.strip()
    return text, [(max(a - lead, 0), min(max(b - lead, 0), len(text))) for a, b in spans]


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def groups_from_spans(raw: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """Word index (T,) per token of the decoded text ``raw`` with token ``spans``: a token
    starts a word when it is the first one, its text begins with whitespace or whitespace
    ends the text before it; a token with an empty span joins the word before it."""
    groups, word = [], -1
    for t, (start, end) in enumerate(spans):
        starts = t == 0 or (
            start < end <= len(raw)
            and (raw[start].isspace() or (start > 0 and raw[start - 1].isspace()))
        )
        word += starts
        groups.append(max(word, 0))
    return groups


class WordPieceVocabulary:
    """The in-repo tiny LM's vocabulary: MiniLM WordPiece, ``[CLS] question [SEP]`` prompt."""

    size = VOCAB_SIZE
    stop_ids = frozenset((EOS_ID,))
    special_ids = SPECIAL_IDS
    prompt_tokens = 2
    prefix = staticmethod(question_prefix)

    @staticmethod
    def decode(ids: Sequence[int]) -> str:
        return decode(ids)

    @staticmethod
    def answer_spans(ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
        return incremental_spans(decode, ids)

    @staticmethod
    def word_groups(answer: Sequence[int]) -> list[int]:
        """Word index (T,) of each WordPiece token: a "##" piece joins the word before it."""
        return word_groups(answer)

    def word(self, answer: Sequence[int], position: int) -> str:
        """The word (its pieces joined) that the token at ``position`` belongs to."""
        groups = self.word_groups(answer)
        pieces = token_strings(answer)
        return "".join(
            p.removeprefix("##")
            for p, g in zip(pieces, groups, strict=True)
            if g == groups[position]
        )

    @staticmethod
    def token_text(token: int) -> str:
        """The text of one token ("" for a special token, a "##" piece without "##")."""
        return "" if token in SPECIAL_IDS else token_strings([token])[0].removeprefix("##")

    @staticmethod
    def feed_ids(question: str, answer: str) -> list[int]:
        """``[CLS] question [SEP] answer`` ids: a prompt with a partial answer."""
        return [CLS_ID, *encode(question), SEP_ID, *encode(answer)]


WORDPIECE = WordPieceVocabulary()


class TokenizerVocabulary:
    """A causal LM's own fast tokenizer (transformers) with a text prompt (module doc).

    ``prompt`` holds ``{question}`` once; ``stop`` is "newline" (EOS or a newline ends an
    answer) or "eos" (only EOS does)."""

    def __init__(self, tokenizer: Any, prompt: str = DEFAULT_PROMPT, stop: str = "newline"):
        if not isinstance(prompt, str) or prompt.count("{question}") != 1:
            raise InputError(f"sdlg option prompt must hold {{question}} once, got {prompt!r}")
        if stop not in STOPS:
            raise InputError(f"sdlg option stop must be one of {STOPS}, got {stop!r}")
        self.tokenizer, self.prompt, self.stop = tokenizer, prompt, stop
        self.size = len(tokenizer)
        eos = tokenizer.eos_token_id
        stops = set() if eos is None else {int(eos)}
        if stop == "newline":
            texts = tokenizer.batch_decode([[i] for i in range(self.size)])
            stops |= {i for i, text in enumerate(texts) if "\n" in text}
        if not stops:
            raise InputError(
                f"sdlg: the LM's tokenizer has no EOS token and stop={stop!r} names no other; "
                "use stop=newline"
            )
        self.stop_ids = frozenset(stops)
        self.special_ids = frozenset(int(i) for i in tokenizer.all_special_ids)
        self.prompt_tokens = len(self._prompt_ids(""))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_ids(self, question: str) -> list[int]:
        """The prompt's ids with the special tokens the tokenizer adds in front (a BOS for
        Llama or OPT, none for GPT-2); an end token it appends ([SEP], EOS) is dropped, the
        answer follows the prompt."""
        ids = list(self.tokenizer(self.prompt.replace("{question}", question))["input_ids"])
        ends = {self.tokenizer.eos_token_id, self.tokenizer.sep_token_id} - {None}
        while len(ids) > 1 and ids[-1] in ends:
            ids.pop()
        return ids

    def prefix(self, question: str, max_tokens: int) -> tuple[list[int], list[int], bool]:
        """(prompt ids, question ids, truncated): the prompt around ``question``, cut to its
        first tokens (a warning) so that the prompt is at most ``prompt_tokens +
        max_tokens`` long."""
        check_question(question)
        ids = self._encode(question)
        if not ids:
            raise InputError(f"question {question!r} has no tokens")
        truncated = len(ids) > max_tokens
        if truncated:
            _warn_cut(len(ids), max_tokens)
            ids = ids[:max_tokens]
        text = self.decode(ids) if truncated else question
        prompt = self._prompt_ids(text)
        while len(prompt) > self.prompt_tokens + max_tokens and len(ids) > 1:
            ids, truncated = ids[:-1], True  # the template's tokens merged with the question's
            text = self.decode(ids)
            prompt = self._prompt_ids(text)
        return prompt, ids, truncated

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens dropped, surrounding whitespace stripped)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True)).strip()

    def _raw(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def answer_spans(self, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
        return incremental_spans(self._raw, ids)

    def word_groups(self, answer: Sequence[int]) -> list[int]:
        """Word index (T,) of each token: whitespace before a token starts a new word."""
        return groups_from_spans(*raw_spans(self._raw, answer))

    def word(self, answer: Sequence[int], position: int) -> str:
        """The lower-cased text of the word the token at ``position`` belongs to."""
        groups = self.word_groups(answer)
        tokens = [t for t, g in zip(answer, groups, strict=True) if g == groups[position]]
        return self.decode(tokens).lower()

    def token_text(self, token: int) -> str:
        """The text of one token, leading space kept ("" for a special token)."""
        return self._raw([token])

    def feed_ids(self, question: str, answer: str) -> list[int]:
        """The prompt of ``question`` followed by the tokens of `` answer`` (a partial one)."""
        return self._prompt_ids(question) + (self._encode(" " + answer) if answer else [])
