"""MMIE-Score: a fine-tuned judge of interleaved image-text answers (MMIE, ICLR 2025)."""
