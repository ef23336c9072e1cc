"""Flower strategies (server-side aggregation). Built on flwr.serverapp.strategy."""
