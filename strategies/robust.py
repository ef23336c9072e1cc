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


def update_norm(update: ArrayRecord, current: ArrayRecord) -> float:
    total = 0.0
    for name, ref in current.items():
        a, b = update[name].numpy(), ref.numpy()
        if a.dtype.kind == "f":
            total += float(np.sum((a.astype(np.float64) - b) ** 2))
    return math.sqrt(total)


def aggregate(records: list[ArrayRecord], weights: list[float], how: str,
              trim: float = 0.2) -> ArrayRecord:
    """One ArrayRecord from the accepted ones: weighted mean, median or trimmed mean (cutting
    floor(trim * n) values at each end of every coordinate; at least one value stays)."""
    if how not in AGGREGATORS:
        raise ValueError(f"aggregator must be one of {', '.join(AGGREGATORS)}, got {how!r}")
    out = {}
    for name in records[0].keys():
        stack = np.stack([r[name].numpy().astype(np.float64) for r in records])
        if how == "mean":
            w = np.asarray(weights, np.float64) / float(np.sum(weights))
            value = np.tensordot(w, stack, axes=1)
        elif how == "median":
            value = np.median(stack, axis=0)
        else:
            k = min(int(math.floor(trim * len(records))), (len(records) - 1) // 2)
            ordered = np.sort(stack, axis=0)
            value = ordered[k:len(records) - k].mean(axis=0)
        ref = records[0][name].numpy()
        if ref.dtype.kind in "iu":
            value = np.rint(value)
        out[name] = Array(np.ascontiguousarray(value.astype(ref.dtype)))
    return ArrayRecord(out)
