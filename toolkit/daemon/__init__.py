"""The on-device daemon: camera + pipelines + HTTP API (see serve.py), and its client."""
