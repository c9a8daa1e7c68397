"""Text generators over the in-repo causal LM (``edgekit.models.tinylm``): prompt -> text.

- ``TextGenerator`` runs batched greedy decoding over any ``CausalLM`` (torch or an exported
  graph through ``runner_backend``); a prompt is ``[CLS] prompt [SEP]`` and, when too long for
  the LM, keeps its last tokens (the prefix is cut from the left, the question is kept).
- ``EmbeddingGenerator`` takes prefixes as input embeddings (P, d): the sequence is
  ``E[CLS], prefix rows, E[prompt tokens], E[SEP], generated...`` run through the LM's own
  blocks (``hidden_from_embeddings``), for LLMCert-B's embedding-space prefix distribution.
- ``last_position_backend`` is a torch backend for ``CausalLM`` that computes the output
  projection only at each row's last real token (the only logits ``CausalLM`` reads) and
  returns them broadcast over the sequence axis (a view: no (B, S, V) array is built).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from edgekit.models.tinylm.causal import Backend, CausalLM
from edgekit.models.tinylm.model import TinyCausalLM
from edgekit.models.tinylm.tokens import CLS_ID, EOS_ID, SEP_ID, decode, encode


def last_position_backend(model: TinyCausalLM) -> Backend:
    """(ids (B, S), mask (B, S)) -> logits broadcast to (B, S, V): each row's last-token logits."""

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            hidden = model.hidden(torch.from_numpy(ids), torch.from_numpy(mask))  # (B, S, d)
            last = torch.from_numpy(mask.sum(axis=1) - 1)  # (B,)
            logits = hidden[torch.arange(len(last)), last] @ model.tokens.weight.T  # (B, V)
        out = logits.float().numpy()
        return np.broadcast_to(out[:, None, :], (ids.shape[0], ids.shape[1], out.shape[1]))

    return run


def fit_prompt(ids: list[int], room: int) -> list[int]:
    """``[CLS] ... [SEP]`` ids cut from the left (after [CLS]) to at most ``room`` tokens."""
    if len(ids) <= room:
        return ids
    return [ids[0], *ids[len(ids) - room + 1 :]]


class TextGenerator:
    """Greedy ``prompt -> answer text`` over a ``CausalLM``, batched ``chunk`` rows at a time."""

    def __init__(self, lm: CausalLM, max_new_tokens: int = 3, chunk: int = 64) -> None:
        self.lm, self.max_new_tokens, self.chunk = lm, max_new_tokens, chunk

    def __call__(self, prompt: str) -> str:
        return self.batch([prompt])[0]

    def batch(self, prompts: Sequence[str]) -> list[str]:
        """Greedy answers (EOS excluded) of ``prompts``, in order."""
        room = self.lm.max_len - self.max_new_tokens
        rows = [fit_prompt([CLS_ID, *encode(p), SEP_ID], room) for p in prompts]
        out: list[str] = []
        for start in range(0, len(rows), self.chunk):
            out += self._greedy(rows[start : start + self.chunk])
        return out

    def _greedy(self, prefixes: list[list[int]]) -> list[str]:
        answers: list[list[int]] = [[] for _ in prefixes]
        live = list(range(len(prefixes)))
        for _ in range(self.max_new_tokens):
            if not live:
                break
            log_probs = self.lm.next_log_probs([prefixes[i] + answers[i] for i in live])
            nxt = log_probs.argmax(axis=1)  # (n,)
            still = []
            for row, token in zip(live, nxt.tolist(), strict=True):
                if token != EOS_ID:
                    answers[row].append(int(token))
                    still.append(row)
            live = still
        return [decode(a) for a in answers]


def hidden_from_embeddings(
    model: TinyCausalLM, embeds: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``model.hidden`` with input embeddings (B, S, d) in place of token ids -> (B, S, d)."""
    s = embeds.shape[1]
    x = embeds + model.positions(torch.arange(s))[None]  # (B, S, d)
    causal = torch.ones(s, s, dtype=torch.bool).tril()  # (S, S)
    allowed = causal[None, None] & mask.bool()[:, None, None, :]  # (B, 1, S, S)
    bias = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, -1e4)
    for block in model.blocks:
        x = block(x, bias)
    return model.norm(x)


class EmbeddingGenerator:
    """Greedy answers for (prefix embeddings (P, d), prompt) queries on a ``TinyCausalLM``."""

    def __init__(self, model: TinyCausalLM, max_new_tokens: int = 3, chunk: int = 64) -> None:
        self.model, self.max_new_tokens, self.chunk = model.eval(), max_new_tokens, chunk

    def batch_embedded(self, queries: Sequence[tuple[np.ndarray, str]]) -> list[str]:
        out: list[str] = []
        for start in range(0, len(queries), self.chunk):
            out += self._greedy(queries[start : start + self.chunk])
        return out

    def _greedy(self, queries: Sequence[tuple[np.ndarray, str]]) -> list[str]:
        table = self.model.tokens.weight  # (V, d)
        room = self.model.max_len - self.max_new_tokens
        seqs = []
        for prefix, prompt in queries:
            pieces = [torch.from_numpy(np.asarray(prefix, dtype=np.float32)), table[encode(prompt)]]
            body = torch.cat(pieces)[-(room - 2) :]  # keep the prompt, cut the prefix's left
            seqs.append(torch.cat([table[[CLS_ID]], body, table[[SEP_ID]]]))  # (L, d)
        answers: list[list[int]] = [[] for _ in seqs]
        done = [False] * len(seqs)
        with torch.inference_mode():
            for _ in range(self.max_new_tokens):
                live = [i for i in range(len(seqs)) if not done[i]]
                if not live:
                    break
                length = max(len(seqs[i]) for i in live)
                embeds = torch.zeros(len(live), length, table.shape[1])  # (B, S, d)
                mask = torch.zeros(len(live), length, dtype=torch.long)
                for row, i in enumerate(live):
                    embeds[row, : len(seqs[i])] = seqs[i]
                    mask[row, : len(seqs[i])] = 1
                hidden = hidden_from_embeddings(self.model, embeds, mask)  # (B, S, d)
                last = mask.sum(dim=1) - 1
                tokens = (hidden[torch.arange(len(live)), last] @ table.T).argmax(dim=1)
                for row, i in enumerate(live):
                    token = int(tokens[row])
                    if token == EOS_ID:
                        done[i] = True
                    else:
                        answers[i].append(token)
                        seqs[i] = torch.cat([seqs[i], table[[token]]])
        return [decode(a) for a in answers]
