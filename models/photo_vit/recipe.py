"""Training recipe for PhotoViT: photo-cnn's data and training loop, a ViT network and config.

Nothing here copies photo-cnn: crops, augmentation, the held-out split and the AdamW/one-cycle
loop are ``edgekit.models.photo_cnn.data`` and ``.train``; this module only states the ViT's
hyper-parameters and where its weights are cached (``cache_dir("photo-vit")``). The cache key is
``recipe_key("photo-vit", RECIPE_VERSION, ...)`` over this config and photo-cnn's RECIPE_VERSION
(its data and loop), so a changed config or a bumped version of either recipe retrains; weights
shipped in ``weights/`` (same file names) are loaded first; writes are atomic (photo-cnn's
``_save``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from edgekit.cache import cache_dir, recipe_key
from edgekit.models.photo_cnn import data
from edgekit.models.photo_cnn import train as photo_train
from edgekit.models.photo_vit import net

RECIPE_VERSION = 1  # bump when what training does changes (data, loss, network, schedule)


@dataclass(frozen=True)
class ViTTrainConfig:
    """Everything that determines the trained PhotoViT weights (a ``photo_cnn.train.Recipe``)."""

    steps: int = 360
    batch_size: int = 96
    lr: float = 2e-3
    weight_decay: float = 0.05
    label_smoothing: float = 0.05
    grad_clip: float = 1.0
    dim: int = 64
    depth: int = 4
    heads: int = 4
    patch: int = 8
    mlp_ratio: int = 2
    seed: int = 0
    threads: int = 2
    extreme_fraction: float = 0.0  # sensor-aware: extreme captures added per batch (share)
    render_crops: int = 0  # sensor-rendered: crops per batch rendered as a camera would ...
    renders: int = 4  # ... this many times each (data.camera_renders)
    rank_weight: float = 0.0  # weight of the correctness-ranking term over each crop's renders
    render_weight: float = 1.0  # weight of the renders' rows in the cross-entropy

    def key(self) -> str:
        """Cache key (16 hex chars): recipe_key over "photo-vit", RECIPE_VERSION, this config
        and photo-cnn's RECIPE_VERSION (the data and training loop this recipe reuses)."""
        spec = asdict(self) | {"photo_cnn_recipe": photo_train.RECIPE_VERSION}
        return recipe_key("photo-vit", RECIPE_VERSION, spec)

    def network(self) -> net.PhotoViT:
        """A freshly initialised PhotoViT of this shape (10 classes)."""
        return net.PhotoViT(
            len(data.PHOTOS),
            dim=self.dim,
            depth=self.depth,
            heads=self.heads,
            patch=self.patch,
            mlp_ratio=self.mlp_ratio,
        )


def weights_path(config: ViTTrainConfig) -> Path:
    """Where the weights for ``config`` are (or will be) cached."""
    return cache_dir("photo-vit") / f"photovit-{config.key()}.pt"


def train_cached(
    config: ViTTrainConfig | None = None,
    progress: photo_train.Progress | None = None,
    force: bool = False,
) -> photo_train.TrainResult:
    """Cached PhotoViT weights for ``config`` (default recipe), training them if needed; a
    file of the same name in this package's ``weights/`` folder is loaded first."""
    config = config or ViTTrainConfig()
    return photo_train.train_cached(
        config,
        progress,
        force,
        network=config.network,
        path=weights_path(config),
        shipped=Path(__file__).parent / "weights",
    )
