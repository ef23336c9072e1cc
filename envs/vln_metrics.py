"""R2R evaluation metrics on graph geodesic distances (no flwr).

Definitions follow the R2R evaluation (Anderson et al. 2018; Matterport3DSimulator's
`tasks/R2R/eval.py`), SPL (Anderson et al. 2018, "On evaluation of embodied navigation
agents"), nDTW/SDTW (Ilharco et al. 2019) and CLS (Jain et al. 2019), each with the success
threshold d_th = 3 m:

- NE   distance from the final viewpoint to the goal
- SR   NE < 3 m
- OSR  some viewpoint of the trajectory is < 3 m from the goal
- TL   length of the trajectory (sum of its edges, metres)
- SPL  SR * L / max(TL, L), L = geodesic start-goal distance
- nDTW exp(-DTW(trajectory, reference) / (|reference| * d_th))
- SDTW SR * nDTW
- CLS  PC * LS with PC = mean over reference nodes of exp(-d(r, trajectory) / d_th),
       EPL = PC * PL(reference), LS = EPL / (EPL + |EPL - PL(trajectory)|)

A trajectory is scored as given, back-to-back repeated viewpoints included, as the official
evaluator does (eric-ai-lab/FedVLN@2f98fd9 `r2r_src/eval.py` l. 51-61, 100: DTW over every
simulator step). Only nDTW/SDTW can change with repeats (each adds d(v, r) >= 0 to the DTW
cost); the other metrics cannot. This project's environment never repeats a viewpoint, but
trajectories from a simulator that turns in place do.
"""

from __future__ import annotations

import numpy as np

from envs.vln_data import Scan

SUCCESS_M = 3.0
METRICS = ("ne", "sr", "osr", "tl", "spl", "ndtw", "sdtw", "cls")


def dtw(dist: np.ndarray, pred: list[int], ref: list[int]) -> float:
    """Dynamic time warping cost between two node sequences under the distance matrix."""
    n, m = len(pred), len(ref)
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = dist[pred[i - 1], ref[j - 1]] + min(
                cost[i - 1, j], cost[i, j - 1], cost[i - 1, j - 1]
            )
    return float(cost[n, m])


def episode_metrics(scan: Scan, pred: list[int], ref: list[int]) -> dict[str, float]:
    """All metrics of one episode; `pred` and `ref` are node indices into `scan`, and `pred`
    starts at the reference's start (repeats are kept, as the official evaluator keeps them)."""
    d = scan.dist
    goal = ref[-1]
    ne = float(d[pred[-1], goal])
    sr = float(ne < SUCCESS_M)
    osr = float(min(d[v, goal] for v in pred) < SUCCESS_M)
    tl = scan.path_length(pred)
    shortest = float(d[ref[0], goal])
    spl = sr * shortest / max(tl, shortest) if max(tl, shortest) > 0 else sr
    ndtw = float(np.exp(-dtw(d, pred, ref) / (len(ref) * SUCCESS_M)))
    pc = float(np.mean([np.exp(-min(d[r, v] for v in pred) / SUCCESS_M) for r in ref]))
    epl = pc * scan.path_length(ref)
    ls = epl / (epl + abs(epl - tl)) if epl + abs(epl - tl) > 0 else 0.0
    return {
        "ne": ne,
        "sr": sr,
        "osr": osr,
        "tl": tl,
        "spl": spl,
        "ndtw": ndtw,
        "sdtw": sr * ndtw,
        "cls": pc * ls,
    }


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    """Means over episodes; rates (sr, osr, spl, ndtw, sdtw, cls) in percent, as papers print
    them; ne and tl in metres."""
    if not rows:
        return {}
    out = {}
    for k in METRICS:
        v = float(np.mean([r[k] for r in rows]))
        out[k] = v if k in ("ne", "tl") else 100.0 * v
    return out
