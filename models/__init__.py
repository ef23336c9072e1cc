"""Torch modules. Nothing here imports flwr: models are plain PyTorch."""
