"""Streaming segmentation (SAM 2): the graph contract, the streaming predictor and its config, prompts, rollout, array maths, metrics, rendering, the bench and the run command's engine."""
