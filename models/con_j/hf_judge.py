"""Con-J on a transformers causal LM loaded from a local folder (no downloads).

The judge sees a text prompt (question, answer A, answer B, optionally a hint naming the better
answer for hint-driven sampling; wrapped in the tokenizer's chat template when it has one) and
writes a short rationale then a verdict line ``Better: A`` or ``Better: B`` (``parse_verdict``).
``HFJudge`` samples judgments (repeated sampling at a temperature, seeded), decodes greedily and
scores a judgment by its summed log-probability given the prompt (judgment tokens only).

``train_hf_conj`` is Con-J on it: sample judgments of training preference pairs, keep one
(right verdict, wrong verdict) pair per preference pair with ``contrastive_core`` (hints where
sampling found none), then a few AdamW steps of DPO (``dpo.dpo_loss``) plus an SFT term on the
chosen judgment against a frozen reference copy; verdict accuracy on held-out pairs before/after.
"""

from __future__ import annotations

import copy
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import InputError, MissingDependencyError
from edgekit.models.con_j.contrastive_core import Choice, Request, select_contrastive
from edgekit.models.con_j.dpo import dpo_loss
from edgekit.models.con_j.prefs import PrefPair

Progress = Callable[[float, str], None]

JUDGE_PROMPT = """You are a careful judge. Decide which answer to the question is better \
(correct and to the point).

Question: {question}
Answer A: {answer_a}
Answer B: {answer_b}
{hint}
Write one short sentence of rationale, then a final line 'Better: A' or 'Better: B'."""
HINT_LINE = "Hint: answer {label} is known to be the better one.\n"

# a verdict: "Better: A", "**better** - (b)", "Better = Answer A." at the start of a line or
# of a sentence (WordPiece decoding loses newlines: "paris is right . better : a")
_VERDICT_LINE = re.compile(
    r"(?:^|[.!?;])[\s*#>_-]*better[\s*_]*[:=-]+[\s*_]*(?:answer|response)?\s*[(\[\"']?\s*([ab])\b(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_BOTH = re.compile(r"^\s*[)\]\"']?\s*(?:or|and|/|&|,|\|)\s*(?:answer\s*)?[(\[\"']?\s*[ab]\b", re.I)


def parse_verdict(text: str) -> str | None:
    """The verdict "a" or "b" of a free-text judgment, else None.

    Read from lines (or sentences) starting with ``Better:`` (case, markdown, "answer" and brackets ignored;
    trailing text allowed, e.g. "Better: A, since ..."). None when there is no such line, when
    a line names both letters ("Better: A or B") or when verdict lines disagree."""
    found = set()
    for match in _VERDICT_LINE.finditer(text or ""):
        if _BOTH.match(match.group(2)):
            return None
        found.add(match.group(1).lower())
    return found.pop() if len(found) == 1 else None


def judge_body(question: str, answer_a: str, answer_b: str, hint: str | None = None) -> str:
    """The judge prompt's text; ``hint`` ("a" | "b" | None) adds a line naming the better one."""
    if hint is not None and hint not in ("a", "b"):
        raise InputError(f"hint must be 'a', 'b' or None, got {hint!r}")
    line = HINT_LINE.format(label=hint.upper()) if hint else ""
    return JUDGE_PROMPT.format(question=question, answer_a=answer_a, answer_b=answer_b, hint=line)


@dataclass
class HFJudge:
    """A causal LM judge: ``model`` (transformers ``PreTrainedModel``) + its ``tokenizer``."""

    model: Any
    tokenizer: Any
    max_new_tokens: int = 48
    device: str = "cpu"

    @classmethod
    def from_pretrained(
        cls, path: str | Path, device: str = "cpu", max_new_tokens: int = 48
    ) -> HFJudge:
        """Tokenizer + ``AutoModelForCausalLM`` from the local folder ``path`` (never
        downloads: ``local_files_only`` and HF_HUB_OFFLINE). InputError when ``path`` is not a
        folder with a config.json."""
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise InputError(f"a Con-J judge must be a local folder with config.json, got {path}")
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a core dependency
            raise MissingDependencyError("the Con-J LM judge", "transformers") from exc
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token_id is None:
                raise InputError(f"the tokenizer in {path} has neither a pad nor an eos token")
            tokenizer.pad_token = tokenizer.eos_token
        return cls(model.to(device).eval(), tokenizer, max_new_tokens, device)

    # ---- text ------------------------------------------------------------------------------
    def prompt(self, pair: PrefPair, hint: str | None = None) -> str:
        """The judge prompt of ``pair``, in the chat template when the tokenizer has one."""
        body = judge_body(pair.question, pair.answer_a, pair.answer_b, hint)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": body}], tokenize=False, add_generation_prompt=True
            )
        return body + "\nJudgment:"

    def encode(self, text: str) -> list[int]:
        """Prompt ids (no special tokens added; the tokenizer's BOS first if it has one)."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        bos = self.tokenizer.bos_token_id
        return [bos, *ids] if bos is not None and (not ids or ids[0] != bos) else ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True).strip()

    # ---- generation ------------------------------------------------------------------------
    def _generate(
        self, prompts: Sequence[list[int]], temperature: float | None, seed: int | None
    ) -> list[list[int]]:
        import torch

        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # (B, S) left pad
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad}
        if eos is not None:
            kwargs["eos_token_id"] = eos
        if temperature is None:
            kwargs.update(do_sample=False)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs
            )[:, width:]
        judgments = []
        for row in out.tolist():  # cut after the first EOS (kept), drop padding
            if eos is not None and eos in row:
                row = row[: row.index(eos) + 1]
            judgments.append(row)
        return judgments

    def greedy(self, pairs: Sequence[PrefPair], batch: int = 32) -> list[list[int]]:
        """Greedy judgment ids (up to ``max_new_tokens``, EOS kept) of each pair's prompt."""
        out: list[list[int]] = []
        for start in range(0, len(pairs), batch):
            part = pairs[start : start + batch]
            out += self._generate([self.encode(self.prompt(p)) for p in part], None, None)
        return out

    def sample(
        self,
        pairs: Sequence[PrefPair],
        k: int,
        temperature: float = 1.0,
        seed: int = 0,
        hint: str | Sequence[str | None] | None = None,
    ) -> list[list[list[int]]]:
        """``k`` judgments per pair (``[pair][sample] -> ids``) sampled at ``temperature``;
        the same ``seed`` gives the same judgments. ``hint`` (one for all pairs or one per
        pair; "a" | "b" | None) prompts hint-driven sampling."""
        if k < 1 or temperature <= 0:
            raise InputError(f"k must be >= 1 and temperature > 0, got {k}, {temperature}")
        hints = [hint] * len(pairs) if hint is None or isinstance(hint, str) else list(hint)
        if len(hints) != len(pairs):
            raise InputError(f"{len(hints)} hints for {len(pairs)} pairs")
        prompts = [self.encode(self.prompt(p, h)) for p, h in zip(pairs, hints, strict=True)]
        flat = self._generate([p for p in prompts for _ in range(k)], temperature, seed)
        return [flat[i * k : (i + 1) * k] for i in range(len(pairs))]

    def verdict(self, judgment: Sequence[int]) -> str | None:
        """``parse_verdict`` of judgment ids."""
        return parse_verdict(self.decode(judgment))

    # ---- scoring ---------------------------------------------------------------------------
    def log_probs(
        self, prompts: Sequence[list[int]], judgments: Sequence[list[int]], model: Any = None
    ) -> tuple[Any, Any]:
        """Summed log-probabilities (B,) of each judgment's tokens given its prompt (prompt
        tokens not counted) and the judgment lengths (B,), under ``model`` (default: the
        judge's). Differentiable unless called in inference mode."""
        import torch

        if len(prompts) != len(judgments) or not prompts:
            raise InputError(f"{len(prompts)} prompts for {len(judgments)} judgments")
        if any(not j for j in judgments):
            raise InputError("a judgment to score has no token")
        model = self.model if model is None else model
        seqs = [list(p) + list(j) for p, j in zip(prompts, judgments, strict=True)]
        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=self.device)
        mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        target = torch.zeros(len(seqs), width, dtype=torch.bool)  # (B, S): judgment tokens
        for b, (p, j) in enumerate(zip(prompts, judgments, strict=True)):
            target[b, len(p) : len(p) + len(j)] = True
        logits = model(input_ids=ids, attention_mask=mask.to(self.device)).logits  # (B, S, V)
        keep = target[:, 1:].to(self.device)  # (B, S-1): position t predicts ids[:, t + 1]
        picked = torch.log_softmax(logits[:, :-1][keep].float(), dim=-1)  # (N, V) judgment only
        tok = picked.gather(-1, ids[:, 1:][keep][:, None])[:, 0]  # (N,)
        rows = keep.nonzero()[:, 0]
        sums = torch.zeros(len(seqs), device=tok.device, dtype=tok.dtype).index_add(0, rows, tok)
        return sums, keep.sum(-1).float()


# ---- Con-J on the LM judge ---------------------------------------------------------------------
def balanced_pairs(pairs: Sequence[PrefPair], n: int) -> list[PrefPair]:
    """``n`` pairs (even) evenly spread over ``pairs``, half with answer a better, half b (a
    judge that always says "a" scores 0.5 on them)."""
    if n < 2 or n % 2:
        raise InputError(f"n must be even and >= 2, got {n}")
    out: list[PrefPair] = []
    for label in ("a", "b"):
        side = [p for p in pairs if p.better == label]
        if len(side) < n // 2:
            raise InputError(f"{n // 2} pairs with answer {label} better wanted, {len(side)} given")
        out += [side[round(i * len(side) / (n // 2))] for i in range(n // 2)]
    return out


def verdict_accuracy(judge: HFJudge, pairs: Sequence[PrefPair]) -> dict[str, float]:
    """Greedy verdict accuracy on ``pairs`` (no verdict counts as wrong), the share of
    judgments without a verdict and the share of "a" verdicts (0.5 = no position bias)."""
    if not pairs:
        raise InputError("verdict accuracy needs at least one preference pair")
    verdicts = [judge.verdict(j) for j in judge.greedy(pairs)]
    right = [v == p.better for v, p in zip(verdicts, pairs, strict=True)]
    return {
        "verdict_accuracy": float(np.mean(right)),
        "invalid_rate": float(np.mean([v is None for v in verdicts])),
        "a_share": float(np.mean([v == "a" for v in verdicts])),
    }


def hf_contrastive(
    judge: HFJudge,
    pairs: Sequence[PrefPair],
    samples: int = 4,
    hint_samples: int = 2,
    temperature: float = 1.0,
    seed: int = 0,
) -> tuple[list[Choice[list[int]]], dict[str, float]]:
    """Con-J's contrastive pairs (judgment ids, EOS kept where generated) from judgments the
    LM samples, via ``contrastive_core.select_contrastive``."""

    def draw(requests: list[Request], rng: np.random.Generator) -> list[list[int]]:
        chunk = [judge.encode(judge.prompt(pairs[i], h)) for i, h in requests]
        return judge._generate(chunk, temperature, int(rng.integers(2**31)))

    return select_contrastive(
        pairs,
        draw,
        lambda ids, _pair: judge.verdict(ids),
        np.random.default_rng(seed),
        samples,
        hint_samples,
    )


def dpo_step_loss(
    judge: HFJudge,
    reference: Any,
    prompts: Sequence[list[int]],
    chosen: Sequence[list[int]],
    rejected: Sequence[list[int]],
    beta: float = 0.1,
    sft_weight: float = 0.1,
) -> tuple[Any, Any, Any]:
    """(loss, dpo term, implicit reward margins (B,)) of a batch: ``dpo.dpo_loss`` of the
    judge's model against the frozen ``reference`` plus ``sft_weight`` times the chosen
    judgments' mean per-token negative log-likelihood."""
    import torch

    with torch.no_grad():
        ref_c, _ = judge.log_probs(prompts, chosen, reference)
        ref_r, _ = judge.log_probs(prompts, rejected, reference)
    pol, count = judge.log_probs([*prompts, *prompts], [*chosen, *rejected])
    b = len(prompts)
    pol_c, pol_r = pol[:b], pol[b:]
    dpo = dpo_loss(pol_c, pol_r, ref_c, ref_r, beta)
    loss = dpo + sft_weight * (-(pol_c / count[:b]).mean())
    return loss, dpo, ((pol_c - pol_r) - (ref_c - ref_r)).detach()


@dataclass
class HFConJResult:
    """The trained judge (its model trained in place, eval mode), the frozen reference model,
    the contrastive pairs, their statistics, the training log and held-out accuracy."""

    judge: HFJudge
    reference: Any
    contrastive: list[Choice[list[int]]]
    stats: dict[str, float]
    log: dict[str, list[float]] = field(default_factory=dict)
    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)


def train_hf_conj(
    path: str | Path | HFJudge,
    pairs: Sequence[PrefPair],
    steps: int,
    eval_pairs: Sequence[PrefPair] = (),
    samples: int = 4,
    hint_samples: int = 2,
    temperature: float = 1.0,
    beta: float = 0.1,
    sft_weight: float = 0.1,
    batch_size: int = 8,
    lr: float = 1e-4,
    seed: int = 0,
    progress: Progress | None = None,
) -> HFConJResult:
    """Con-J on the causal LM at ``path`` (or an ``HFJudge``): contrastive pairs sampled from
    ``pairs``, then ``steps`` AdamW steps of DPO + SFT against a frozen copy of the starting
    model; greedy verdict accuracy on ``eval_pairs`` before and after (when given)."""
    import torch

    if steps < 1 or batch_size < 1 or lr <= 0:
        raise InputError(
            f"steps, batch_size must be >= 1 and lr > 0, got {steps}, {batch_size}, {lr}"
        )
    judge = path if isinstance(path, HFJudge) else HFJudge.from_pretrained(path)
    before = verdict_accuracy(judge, eval_pairs) if eval_pairs else {}
    if progress:
        progress(0.05, "sampling judgments")
    contrastive, stats = hf_contrastive(judge, pairs, samples, hint_samples, temperature, seed)
    if not contrastive:
        raise InputError(
            f"no contrastive pair among {len(pairs)} preference pairs (every sampled and hinted "
            "judgment was right, or none was): raise samples / hint_samples or temperature"
        )
    reference = copy.deepcopy(judge.model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    model = judge.model.eval()  # dropout off: the policy starts equal to the reference
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(seed)
    log: dict[str, list[float]] = {"loss": [], "dpo": [], "pair_accuracy": []}
    prompts = [judge.encode(judge.prompt(pairs[c.index])) for c in contrastive]
    for step in range(steps):
        index = rng.sample(range(len(contrastive)), min(batch_size, len(contrastive)))
        loss, dpo, margin = dpo_step_loss(
            judge,
            reference,
            [prompts[i] for i in index],
            [contrastive[i].chosen for i in index],
            [contrastive[i].rejected for i in index],
            beta,
            sft_weight,
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log["loss"].append(float(loss.detach()))
        log["dpo"].append(float(dpo.detach()))
        log["pair_accuracy"].append(float((margin > 0).float().mean()))
        if progress:
            progress(0.1 + 0.8 * (step + 1) / steps, f"dpo step {step + 1} loss {float(loss):.3f}")
    after = verdict_accuracy(judge, eval_pairs) if eval_pairs else {}
    return HFConJResult(judge, reference, contrastive, stats, log, before, after)
