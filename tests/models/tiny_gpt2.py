"""A tiny random GPT-2 and a GPT-2-style tokenizer trained on given texts, saved to a local
folder: the causal LM that tests of cards taking ``lm=FOLDER`` load (nothing is downloaded, and
no score from it is a result)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

BOS = "<|endoftext|>"  # GPT-2's one special token: BOS, EOS and padding


def train_byte_bpe(texts: Sequence[str], vocab_size: int = 600) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts``, as GPT-2's: leading
    spaces marked ("Ġbank"), untrimmed offsets, ``BOS`` its only special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(list(texts), trainer)
    return bpe


def build_tiny_gpt2(
    folder: Path,
    texts: Sequence[str],
    width: int = 64,
    layers: int = 2,
    heads: int = 4,
    vocab_size: int = 600,
    seed: int = 0,
) -> Path:
    """Save to ``folder`` a random GPT-2 (``layers`` blocks of ``width``, ``heads`` heads, 256
    positions; seeded) and its fast tokenizer (``train_byte_bpe`` on ``texts``, BOS = EOS);
    returns ``folder``."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = train_byte_bpe(texts, vocab_size)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS, eos_token=BOS)
    tokenizer.save_pretrained(folder)
    bos = bpe.token_to_id(BOS)
    config = GPT2Config(
        n_layer=layers, n_embd=width, n_head=heads, n_positions=256,
        vocab_size=bpe.get_vocab_size(), bos_token_id=bos, eos_token_id=bos,
    )  # fmt: skip
    torch.manual_seed(seed)
    GPT2LMHeadModel(config).eval().save_pretrained(folder)
    return folder
