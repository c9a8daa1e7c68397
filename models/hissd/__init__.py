"""HiSSD: hierarchical and separate skill discovery for offline multi-task MARL (compact)."""
