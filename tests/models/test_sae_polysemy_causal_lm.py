"""SAE polysemy on a causal LM from a local folder (card option ``lm``): hooks, the target word's
tokens, input errors and the card end to end.

The LM is a random 2-layer GPT-2 (width 64) with a byte-level BPE tokenizer trained here on the
WiC contexts, both saved to a temporary folder: nothing is downloaded, and no score is a result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from test_sae_polysemy import TINY as SAE_TINY  # noqa: E402
from tiny_gpt2 import build_tiny_gpt2  # noqa: E402

from edgekit.errors import InputError  # noqa: E402
from edgekit.models.sae_polysemy import pseval  # noqa: E402
from edgekit.models.sae_polysemy.activations import HookPoint, hooked_activations  # noqa: E402
from edgekit.models.sae_polysemy.lm import language_model  # noqa: E402
from edgekit.models.sae_polysemy.wic import all_contexts, load_wic  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WIDTH, LAYERS = 64, 2
TEXTS = ["The bank approved the loan.", "A heron waited on the muddy river bank all day long."]


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A folder with a random GPT-2 (2 layers, width 64, 4 heads) and a GPT-2-style tokenizer
    (byte-level BPE, leading spaces marked, untrimmed offsets) trained on the WiC contexts."""
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    return str(build_tiny_gpt2(folder, all_contexts() + TEXTS, WIDTH, LAYERS))


def _real(feeds: dict[str, np.ndarray]) -> np.ndarray:
    return feeds["attention_mask"].astype(bool)  # (B, L): every real token, the BOS included


def test_hooks_read_the_blocks_of_a_causal_lm(tiny_gpt2: str) -> None:
    lm = language_model(tiny_gpt2)
    assert (lm.n_layers, lm.d_model) == (LAYERS, WIDTH)  # from the folder's config
    hooks = [lm.hook(1, "attn"), lm.hook(0, "resid"), lm.hook(1, "resid")]
    acts = hooked_activations(TEXTS, hooks, _real, threads=1, lm=tiny_gpt2)
    feeds = lm.tokenize(TEXTS)
    assert feeds["input_ids"][0, 0] == lm.tokenizer.bos_token_id  # BOS first, as TransformerLens
    mask = _real(feeds)
    assert all(acts[h].shape == (int(mask.sum()), WIDTH) for h in hooks)
    model = lm.model
    blocks = model.transformer.h
    rows = np.cumsum([0, *mask.sum(axis=1)])
    with torch.no_grad():
        for i in range(len(TEXTS)):  # one text at a time, no padding: what the rows must equal
            ids = torch.from_numpy(feeds["input_ids"][i : i + 1, : int(mask[i].sum())])
            hidden = model(input_ids=ids, output_hidden_states=True).hidden_states  # 3 x (1, S, 64)
            mine = {h: torch.from_numpy(acts[h][rows[i] : rows[i + 1]]) for h in hooks}
            # L0.resid: block 0's output is hidden state 1
            torch.testing.assert_close(mine[hooks[1]], hidden[1][0], atol=1e-5, rtol=1e-5)
            # L1.attn: block 1's attention output projection called directly on its input
            x = hidden[1]
            attn = blocks[1].attn(blocks[1].ln_1(x))
            attn = attn[0] if isinstance(attn, tuple) else attn  # (1, S, 64)
            torch.testing.assert_close(mine[hooks[0]], attn[0], atol=1e-5, rtol=1e-5)
            # and it is exactly what block 1 adds to the residual stream before its MLP
            mid = x[0] + mine[hooks[0]]
            out = mid + blocks[1].mlp(blocks[1].ln_2(mid))
            torch.testing.assert_close(mine[hooks[2]], out, atol=1e-5, rtol=1e-5)
            # L1.resid is the last block's output before the final norm
            final = model.transformer.ln_f(mine[hooks[2]])
            torch.testing.assert_close(final, hidden[2][0], atol=1e-5, rtol=1e-5)
    content = lm.content_tokens(feeds)
    assert not content[:, 0].any() and content.sum() == mask.sum() - len(TEXTS)  # BOS dropped


def test_target_word_tokens_are_the_words_pieces(tiny_gpt2: str) -> None:
    lm = language_model(tiny_gpt2)
    words = ["hedgehogs", "bank"]  # not in the tokenizer's training text / frequent there
    prompts = [
        pseval.build_prompt("Two hedgehogs slept under the shed.", "hedgehogs"),
        pseval.build_prompt("The bank approved the loan.", "bank"),
    ]
    tokens = pseval.word_tokens(prompts, words, tiny_gpt2)
    feeds, _ = lm.encode(prompts)
    pieces = [lm.tokenizer.convert_ids_to_tokens(feeds["input_ids"][i][t]) for i, t in
              enumerate(tokens)]  # fmt: skip
    assert len(pieces[0]) > 1  # several BPE pieces
    assert pieces[1] == ["Ġbank"]  # one piece, the leading space marked
    for i, word in enumerate(words):
        ids = feeds["input_ids"][i][: int(feeds["attention_mask"][i].sum())]
        first, last = int(tokens[i][0]), int(tokens[i][-1])
        assert np.array_equal(tokens[i], np.arange(first, last + 1))
        assert lm.tokenizer.decode(ids[first : last + 1]) == " " + word  # the word's tokens
        assert lm.tokenizer.decode(ids[1:first]).endswith(" The")  # all of them, and no more
        assert lm.tokenizer.decode(ids[last + 1 :]) == " means"
    pairs = load_wic()[:2]
    prompts, positions = pseval.prompts_and_positions(pairs, tiny_gpt2)
    assert len(prompts) == len(positions) == 4
    words = [p.word for p in pairs] * 2
    # the PS-Eval target: the last of the word's tokens, as MiniLM's last WordPiece
    assert positions == [int(t[-1]) for t in pseval.word_tokens(prompts, words, tiny_gpt2)]
    with pytest.raises(InputError, match="does not end in"):
        pseval.word_tokens([pseval.build_prompt("word " * 200, "bank")], ["bank"], tiny_gpt2)


def test_bad_model_folders_hook_sites_and_layers_are_input_errors(
    tiny_gpt2: str, tmp_path: Path
) -> None:
    from edgekit.registry import get_card

    expected = "expected a local folder holding a Hugging Face causal LM"
    with pytest.raises(InputError, match=f"{expected}.*no config.json"):
        get_card("sae-polysemy", lm=str(tmp_path)).sae_config()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InputError, match=f"{expected}.*no weight file"):
        get_card("sae-polysemy", lm=str(tmp_path)).sae_config()
    with pytest.raises(InputError, match=f"{expected}.*no such folder"):
        get_card("sae-polysemy", lm=str(tmp_path / "missing")).sae_config()
    with pytest.raises(InputError, match=f"{expected}.*not a path"):
        get_card("sae-polysemy", lm=3).sae_config()
    with pytest.raises(InputError, match=r"site in \('resid', 'attn'\).*site='mlp'"):
        get_card("sae-polysemy", lm=tiny_gpt2, layer=0, site="mlp").sae_config()
    with pytest.raises(InputError, match=r"layer in 0\.\.1, got site='resid' layer=2"):
        get_card("sae-polysemy", lm=tiny_gpt2, layer=2).sae_config()
    with pytest.raises(InputError, match=r"layer in 0\.\.1"):
        hooked_activations(TEXTS, [HookPoint(3, "attn")], _real, lm=tiny_gpt2)
    assert get_card("sae-polysemy", lm=tiny_gpt2, layer=1).sae_config().hook.name == "L1.resid"
    card = get_card("sae-polysemy", lm=tiny_gpt2, layer=1)
    with pytest.raises(InputError, match="runs on MiniLM only"):
        card.graphs()  # the exported device scorer is MiniLM's


TINY = {**SAE_TINY, "layer": 1}  # the tiny recipe of test_sae_polysemy, at the LM's layer 1


def test_card_trains_an_sae_on_the_lm_and_scores_pseval(
    tiny_gpt2: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from edgekit.models.sae_polysemy import experiment
    from edgekit.registry import get_card

    monkeypatch.setenv("EDGEKIT_CACHE", str(tmp_path / "cache"))
    card = get_card("sae-polysemy", lm=tiny_gpt2, **TINY)
    config = card.sae_config()
    assert (config.d_model, config.n_latents) == (WIDTH, WIDTH)
    assert config.key() != replace(config, lm="").key()  # the model is in the cache key
    report = experiment.run(card, tmp_path / "out", show_progress=False)
    assert (report["hook"], report["d_model"], report["latents"]) == ("L1.attn", WIDTH, WIDTH)
    assert report["pairs"] == 320 and report["majority_accuracy"] == 0.5
    for key in ("pseval_accuracy", "pseval_specificity", "raw_pseval_accuracy", "ps_eval_planted"):
        assert 0.0 <= report[key] <= 1.0, key
    assert report["pseval_accuracy_ci_low"] <= report["pseval_accuracy"]
    assert report["pseval_accuracy"] <= report["pseval_accuracy_ci_high"]
    assert 0 < report["l0"] <= TINY["k"] and report["fvu"] > 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["hook"] == "L1.attn"
    sae = card.train().build()
    assert tuple(sae.W_dec.shape) == (WIDTH, WIDTH)
    assert get_card("sae-polysemy", lm=tiny_gpt2, **TINY).train().cached  # cached by its key
