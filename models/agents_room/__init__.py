"""Agents' Room: multi-agent story writing (planning + writing agents on a scratchpad)."""
