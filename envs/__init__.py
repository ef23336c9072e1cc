"""Environments and data. Nothing here imports flwr: a node builds its data from its identity."""
