"""The scalar baseline: a Bradley-Terry reward model on frozen all-MiniLM-L6-v2 embeddings.

Each answer is read as the text "question answer" and embedded by MiniLM (mean pooled, unit
norm, 384-d); a one-hidden-layer head maps the embedding to a reward r. Training minimises the
Bradley-Terry loss -log sigmoid(r(better) - r(worse)) over the same preference pairs the judge
learns from; the verdict is the answer with the higher reward.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from edgekit.errors import InputError
from edgekit.models.con_j.modules import RewardHead
from edgekit.models.con_j.prefs import PrefPair


def answer_text(question: str, answer: str) -> str:
    """What the reward model reads for one answer."""
    return f"{question} {answer}"


def pair_texts(pairs: Sequence[PrefPair]) -> tuple[list[str], list[str]]:
    """(texts of answer a, texts of answer b) of ``pairs``."""
    return (
        [answer_text(p.question, p.answer_a) for p in pairs],
        [answer_text(p.question, p.answer_b) for p in pairs],
    )


def embed_texts(texts: Sequence[str], batch_size: int = 64, cache: bool = True) -> np.ndarray:
    """MiniLM sentence embeddings (N, 384) float32 of ``texts``; cached under
    ``cache_dir("con-j")`` by a hash of the texts when ``cache``."""
    from edgekit.cache import atomic_write_bytes, cache_dir
    from edgekit.models.minilm.encoder import MeanPoolEncoder, load_bert, tokenize

    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache_dir("con-j") / f"minilm-{digest}.npy"
    if cache and path.exists():
        return np.load(path)
    encoder = MeanPoolEncoder(load_bert())
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            feeds = tokenize(list(texts[start : start + batch_size]))
            out.append(encoder(*(torch.from_numpy(feeds[k]) for k in feeds)).numpy())
    emb = np.concatenate(out).astype(np.float32)
    if cache:
        buffer = io.BytesIO()
        np.save(buffer, emb)
        atomic_write_bytes(path, buffer.getvalue())
    return emb


def bradley_terry_loss(reward_better: torch.Tensor, reward_worse: torch.Tensor) -> torch.Tensor:
    """Mean -log sigmoid(r_better - r_worse) over (B,) rewards."""
    return -F.logsigmoid(reward_better - reward_worse).mean()


def fit_bradley_terry(
    better: np.ndarray,
    worse: np.ndarray,
    hidden: int = 128,
    epochs: int = 400,
    lr: float = 3e-3,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> tuple[RewardHead, list[float]]:
    """A RewardHead fitted full-batch (AdamW) on embeddings of better / worse answers (N, D).
    Returns (head in eval mode, loss per epoch)."""
    if better.shape != worse.shape or better.ndim != 2 or len(better) == 0:
        raise InputError(
            f"better and worse must be equal (N, D) arrays, got {better.shape} and {worse.shape}"
        )
    torch.manual_seed(seed)
    head = RewardHead(better.shape[1], hidden)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    good, bad = torch.from_numpy(better).float(), torch.from_numpy(worse).float()
    losses = []
    for _ in range(epochs):
        loss = bradley_terry_loss(head(good), head(bad))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return head.eval(), losses


def pair_embeddings(pairs: Sequence[PrefPair], cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM embeddings (N, 384) of answer a and answer b of every pair."""
    a, b = pair_texts(pairs)
    emb = embed_texts(a + b, cache=cache)
    return emb[: len(pairs)], emb[len(pairs) :]


def better_worse(
    pairs: Sequence[PrefPair], emb_a: np.ndarray, emb_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (emb_a, emb_b) reordered into (better answers, worse answers)."""
    first = np.array([p.better == "a" for p in pairs])[:, None]
    return np.where(first, emb_a, emb_b), np.where(first, emb_b, emb_a)


def bt_verdicts(reward_a: np.ndarray, reward_b: np.ndarray) -> list[str]:
    """ "a" where reward_a > reward_b else "b" (ties go to "b")."""
    return ["a" if ra > rb else "b" for ra, rb in zip(reward_a, reward_b, strict=True)]
