"""Aggregation that a few hostile or broken clients cannot steer, and an update-norm bound.

`aggregate` is Flower's example-weighted mean (FedAvg), or, against poisoned updates, the
coordinate-wise median or trimmed mean of the accepted updates (Yin et al., 2018), which ignore
the example counts (a forged count cannot buy weight). `update_norm` is the L2 norm of an
update's change to the global model over its floating arrays; `max-update-norm` rejects the
updates above it before they are aggregated.
"""

from __future__ import annotations

import math

import numpy as np
from flwr.app import Array, ArrayRecord

AGGREGATORS = ("mean", "median", "trimmed-mean")


def update_norm(update: dict[str, np.ndarray], current: dict[str, np.ndarray]) -> float:
    total = 0.0
    for name, b in current.items():
        a = update[name]
        if a.dtype.kind == "f":
            total += float(np.sum((a.astype(np.float64) - b) ** 2))
    return math.sqrt(total)


def aggregate(
    updates: list[dict[str, np.ndarray]], weights: list[float], how: str, trim: float = 0.2
) -> ArrayRecord:
    """One ArrayRecord from the accepted updates (numpy arrays, as screen_update decoded them):
    weighted mean, median or trimmed mean (cutting floor(trim * n) values at each end of every
    coordinate; at least one value stays). The mean accumulates in float64 without stacking."""
    if how not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {', '.join(AGGREGATORS)}, got {how!r}")
    out = {}
    w = np.asarray(weights, np.float64) / float(np.sum(weights))
    for name, ref in updates[0].items():
        if how == "mean":
            value = np.zeros(ref.shape, np.float64)
            for wi, u in zip(w, updates):
                value += wi * u[name]
        else:
            stack = np.stack([u[name].astype(np.float64) for u in updates])
            if how == "median":
                value = np.median(stack, axis=0)
            else:
                k = min(int(math.floor(trim * len(updates))), (len(updates) - 1) // 2)
                value = np.sort(stack, axis=0)[k : len(updates) - k].mean(axis=0)
        if ref.dtype.kind in "iu":
            value = np.rint(value)
        out[name] = Array(np.ascontiguousarray(value.astype(ref.dtype)))
    return ArrayRecord(out)
