"""The real photos every image component shares: scene radiance for the simulated camera and
the classes of the in-repo classifiers (models/photo_cnn). Torch-free, so cameras stay light."""

from __future__ import annotations

import numpy as np

from edgekit.errors import InputError

# skimage.data images that ship with scikit-image (no download): 7 colour, 3 grey (-> RGB).
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "coins",  # not hubble_deep_field: a near-black starfield class made dark, noisy captures
    # of every scene look like "hubble" with high confidence, which misleads VisiT (Lens)
    "immunohistochemistry",
    "retina",
    "camera",
    "brick",
    "gravel",
)
HELDOUT_BAND = (0.4, 0.6)  # fractions of the longer side held out from classifier training


def load_photo(name: str) -> np.ndarray:
    """A bundled scikit-image photo as (H, W, 3) float32 sRGB in [0, 1] (grey -> RGB)."""
    from skimage import data

    if name not in PHOTOS:
        raise InputError(f"unknown scene '{name}'; expected one of {', '.join(PHOTOS)} or an array")
    image = np.asarray(getattr(data, name)())
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return image[..., :3].astype(np.float32) / 255.0
