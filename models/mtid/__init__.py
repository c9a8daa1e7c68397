"""MTID: masked temporal interpolation diffusion for procedure planning (x0-diffusion over plans)."""
