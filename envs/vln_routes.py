"""R2R-like route sampling in one house (no flwr): used to build the embedded episodes, and by
speaker augmentation and pre-exploration to draw new routes inside a client's own house."""

from __future__ import annotations

import math

import numpy as np

from envs.vln_data import Scan


def sample_path(
    scan: Scan,
    rng: np.random.Generator,
    min_edges: int = 4,
    max_edges: int = 7,
    min_dist: float = 5.0,
    tries: int = 200,
) -> list[int] | None:
    """A shortest path of min..max edges and >= min_dist metres between random viewpoints, or
    None if `tries` draws found none. R2R's paths are drawn this way (Anderson et al. 2018)."""
    n = len(scan.ids)
    for _ in range(tries):
        a, b = rng.integers(n, size=2)
        if not np.isfinite(scan.dist[a, b]) or scan.dist[a, b] < min_dist:
            continue
        path = [int(a)]
        while path[-1] != b:
            path.append(int(scan.next_hop[path[-1], b]))
        if min_edges <= len(path) - 1 <= max_edges:
            return path
    return None


def sample_routes(
    scan: Scan, n: int, rng: np.random.Generator, **kw
) -> list[tuple[list[int], float]]:
    """Up to n (path, start heading) pairs; fewer when the house has no such paths left to
    find (a tiny graph), never duplicates of the same (start, goal)."""
    out, seen = [], set()
    for _ in range(4 * n):
        path = sample_path(scan, rng, **kw)
        if path is None:
            break
        if (path[0], path[-1]) in seen:
            continue
        seen.add((path[0], path[-1]))
        out.append((path, float(rng.uniform(0, 2 * math.pi))))
        if len(out) == n:
            break
    return out
