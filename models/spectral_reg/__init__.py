"""Spectral regularisation for continual learning: keep each layer's top singular value near 1."""
