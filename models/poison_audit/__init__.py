"""Poisoning-unlearning audit: Gaussian poisoning and the Gaussian unlearning score."""
