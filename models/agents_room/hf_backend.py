"""A transformers causal LM as a ``TextBackend`` (import-guarded; local weights only).

``TransformersBackend.from_pretrained(path)`` loads the tokenizer and model from a local
directory (``local_files_only``: nothing is downloaded); the constructor also takes a model and
tokenizer already built (tests build a tiny random GPT-2). Prompts are tokenised without
special tokens; generation is greedy at temperature 0, sampling above; only the new tokens are
decoded (special tokens skipped). The prompt is left-truncated to fit the model's context.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.errors import InputError, MissingDependencyError


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - transformers is installed here
        raise MissingDependencyError("the transformers text backend", "transformers") from exc
    return transformers


class TransformersBackend:
    """``generate(prompts, max_new_tokens)`` over a transformers causal LM (one prompt at a
    time, so no padding side effects); ``calls`` and ``generated`` count the work."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 0.0,
        seed: int = 0,
        name: str = "transformers",
    ) -> None:
        if temperature < 0:
            raise InputError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.temperature, self.seed, self.name = temperature, seed, name
        self.calls = self.generated = 0

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> TransformersBackend:
        """Tokenizer + ``AutoModelForCausalLM`` from the local directory ``path``."""
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise InputError(
                f"{folder} is not a local transformers model directory (expected config.json, "
                "weights and tokenizer files there)"
            )
        tf = _transformers()
        tokenizer = tf.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = tf.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
        return cls(model, tokenizer, name=kwargs.pop("name", folder.name), **kwargs)

    def context(self) -> int:
        """The model's maximum sequence length (positions), 2048 when the config has none."""
        config = self.model.config
        for attr in ("max_position_embeddings", "n_positions"):
            if isinstance(getattr(config, attr, None), int):
                return int(getattr(config, attr))
        return 2048

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """One continuation per prompt (new tokens only, decoded)."""
        import torch

        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        room = self.context() - max_new_tokens
        if room < 1:
            raise InputError(
                f"max_new_tokens {max_new_tokens} fills the model's context {self.context()}"
            )
        self.calls += 1
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        texts = []
        for prompt in prompts:
            ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"][-room:]
            if not ids:
                raise InputError("a prompt tokenised to nothing")
            input_ids = torch.tensor([ids])
            options: dict[str, Any] = {"do_sample": self.temperature > 0}
            if self.temperature > 0:
                torch.manual_seed(self.seed + self.generated)
                options["temperature"] = self.temperature
                options["top_k"] = 0
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad,
                    **options,
                )
            new = out[0, len(ids) :].tolist()
            self.generated += len(new)
            texts.append(str(self.tokenizer.decode(new, skip_special_tokens=True)).strip())
        return texts
