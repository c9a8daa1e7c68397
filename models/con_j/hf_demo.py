"""A small transformers judge trained in-repo, for trying Con-J on a causal LM without weights.

``make_demo_judge(folder)`` saves a random GPT-2 (MiniLM WordPiece tokenizer) briefly SFT'd on
gold text judgments of the seed facts ("anna lives in paris . Better: A") to ``folder``; then
``python -m edgekit.models.con_j.hf_demo FOLDER`` runs ``train_hf_conj`` on it and prints
held-out verdict accuracy before / after. Nothing is downloaded.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from edgekit.models.con_j.hf_judge import HFJudge, balanced_pairs, train_hf_conj
from edgekit.models.con_j.prefs import LONG_FORM, PrefPair
from edgekit.models.con_j.train import ConJConfig


def gold_text(pair: PrefPair) -> str:
    """The gold text judgment of ``pair``: the fact as a sentence, then the verdict line."""
    return f"{pair.fact.answer(LONG_FORM)} . Better: {pair.better.upper()}"


def make_demo_judge(
    folder: str | Path, steps: int = 120, dim: int = 64, seed: int = 0, threads: int = 2
) -> Path:
    """Save an SFT'd tiny GPT-2 judge (``dim`` wide, 2 layers) to ``folder``; returns it."""
    import torch
    import transformers

    from edgekit.models.minilm.encoder import tokenizer_path

    torch.set_num_threads(threads)
    folder = Path(folder)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_path()),
        unk_token="[UNK]",
        pad_token="[PAD]",
        eos_token="[SEP]",
    )
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=256, n_embd=dim, n_layer=2, n_head=4,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    judge = HFJudge(transformers.GPT2LMHeadModel(config).eval(), tokenizer)
    seed_pairs = ConJConfig().prefs().select("seed", False)
    prompts = [judge.encode(judge.prompt(p)) for p in seed_pairs]
    golds = [judge.encode(gold_text(p)) + [tokenizer.eos_token_id] for p in seed_pairs]
    opt = torch.optim.AdamW(judge.model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    for _ in range(steps):
        index = rng.sample(range(len(prompts)), min(8, len(prompts)))
        lp, count = judge.log_probs([prompts[i] for i in index], [golds[i] for i in index])
        loss = -(lp / count).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    folder.mkdir(parents=True, exist_ok=True)
    judge.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main(folder: str) -> dict:
    """SFT demo judge -> Con-J (train_hf_conj) on training pairs; held-out accuracy."""
    import torch

    torch.set_num_threads(2)
    start = time.perf_counter()
    if not (Path(folder) / "config.json").is_file():
        make_demo_judge(folder)
    data = ConJConfig().prefs()
    train = data.select("train", False)[::4][:32]
    held = balanced_pairs(data.heldout_seen(), 16) + balanced_pairs(data.heldout_unseen(), 16)
    judge = HFJudge.from_pretrained(folder, max_new_tokens=16)
    result = train_hf_conj(judge, train, steps=30, eval_pairs=held, samples=4, hint_samples=2)
    report = {
        "before": result.before,
        "after": result.after,
        "contrastive": result.stats,
        "dpo_first_last": [result.log["dpo"][0], result.log["dpo"][-1]],
        "seconds": time.perf_counter() - start,
    }
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1] if len(sys.argv) > 1 else "out/con-j-hf-demo")
