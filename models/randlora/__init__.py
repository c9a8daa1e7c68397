"""RandLoRA: full-rank parameter-efficient fine-tuning from shared random bases."""
