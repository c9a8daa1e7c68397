"""Building bundles: the export pipeline, verification against the eager model, tensor and decision parity, the per-target bundle cache and the verify reports."""
