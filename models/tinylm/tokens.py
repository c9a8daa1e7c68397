"""Token ids and text <-> ids of the tiny causal LM: MiniLM's WordPiece vocabulary.

The ids are MiniLM's (30522 WordPiece tokens, lower-cased), so an answer's tokens are directly
the tokens the MiniLM equivalence model reads. Sequence format: ``[CLS] prompt [SEP] answer
[SEP]``; the LM continues after the first [SEP] and stops at the next one (EOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 100, 101, 102, 103
EOS_ID = SEP_ID
SPECIAL_IDS = frozenset((PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID))
VOCAB_SIZE = 30522


@lru_cache(maxsize=1)
def _wordpiece():  # tokenizers.Tokenizer of MiniLM, no special tokens added, no truncation
    from tokenizers import Tokenizer

    from edgekit.models.minilm.encoder import tokenizer_path

    tok = Tokenizer.from_file(str(tokenizer_path()))
    tok.no_padding()
    tok.no_truncation()
    return tok


def encode(text: str) -> list[int]:
    """WordPiece ids of ``text`` (lower-cased, no [CLS]/[SEP])."""
    return list(_wordpiece().encode(text, add_special_tokens=False).ids)


def encode_offsets(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """WordPiece ids of ``text`` (as ``encode``) and each one's character span in ``text``."""
    encoding = _wordpiece().encode(text, add_special_tokens=False)
    return list(encoding.ids), [tuple(span) for span in encoding.offsets]


def decode(ids: Sequence[int]) -> str:
    """Text of WordPiece ``ids`` (special tokens dropped, "##" pieces joined)."""
    return str(_wordpiece().decode([int(i) for i in ids if int(i) not in SPECIAL_IDS]))


def token_strings(ids: Sequence[int]) -> list[str]:
    """The WordPiece string of each id, e.g. ["ham", "##ster"]."""
    return [str(_wordpiece().id_to_token(int(i))) for i in ids]


def prompt_ids(question: str) -> list[int]:
    """``[CLS] question [SEP]`` ids: the prefix the LM answers from."""
    return [CLS_ID, *encode(question), SEP_ID]
