"""The two D3U graphs as GraphSpecs, and torch-runtime runners over them.

"point": history (B, C, L) float32 -> forecast (B, C, H) float32.
"denoiser": noisy (B, C, H), timestep (B,), history (B, C, L), forecast (B, C, H) float32
-> x0 (B, C, H) float32, the predicted clean residual.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.card import GraphSpec
from edgekit.models.d3u.patchdn import PatchDN, PointForecaster

BATCH = {0: "batch"}


def d3u_graphs(
    point: PointForecaster | None, denoiser: PatchDN, history: np.ndarray, horizon: int
) -> list[GraphSpec]:
    """GraphSpecs with ``history`` (B, C, L) as the example batch; "point" is left out when
    ``point`` is None (the raw-target diffusion baseline)."""
    hist = torch.from_numpy(np.ascontiguousarray(history, dtype=np.float32))
    b, c, _ = hist.shape
    with torch.no_grad():
        forecast = point(hist) if point is not None else torch.zeros(b, c, horizon)
    specs = []
    if point is not None:
        specs.append(
            GraphSpec(
                "point",
                point.eval(),
                {"history": hist},
                ["forecast"],
                {"history": BATCH, "forecast": BATCH},
            )
        )
    example = {
        "noisy": torch.randn(b, c, horizon, generator=torch.Generator().manual_seed(0)),
        "timestep": torch.linspace(0, 99, b),
        "history": hist,
        "forecast": forecast,
    }
    axes = {name: BATCH for name in (*example, "x0")}
    specs.append(GraphSpec("denoiser", denoiser.eval(), example, ["x0"], axes))
    return specs
