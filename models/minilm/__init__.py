"""MiniLM (all-MiniLM-L6-v2) sentence encoder card: pretrained weights, shipped pair set."""
