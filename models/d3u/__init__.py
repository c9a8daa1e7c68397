"""D3U: a point forecaster for the certain part, conditional diffusion (PatchDN) for the residual."""
