"""Benchmarks: the engine (p50/p90/p99, load, first run, RSS), its tables and plots, and the environment a run was measured in."""
