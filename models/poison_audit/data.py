"""sklearn's bundled digits for the audit: features = pixels / 16 in [0, 1], (N, 64) float32."""

from __future__ import annotations

import numpy as np

PIXEL_SCALE = 16.0


def digits(seed: int = 0, test_fraction: float = 0.25) -> tuple[tuple, tuple]:
    """((x_train (N, 64) float32 in [0, 1], y_train (N,) int64), (x_test, y_test)),
    a stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.data / PIXEL_SCALE).astype(np.float32)
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return (x_tr, y_tr), (x_te, y_te)
