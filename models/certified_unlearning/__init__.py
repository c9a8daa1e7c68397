"""Certified unlearning: ERM + output perturbation and robust (trimmed-mean) noisy GD."""
