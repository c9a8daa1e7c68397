"""The model zoo: one subpackage per system, each with a card.py registered in edgekit.registry."""
