"""FedAdam, the server step of Reddi et al. 2021 ("Adaptive Federated Optimization", Alg. 2):
the round's mean update D is a pseudo-gradient for Adam on the server,

    m <- b1 m + (1 - b1) D,   v <- b2 v + (1 - b2) D^2,   w <- w + eta m / (sqrt(v) + tau),

with no bias correction, as there. The server sees only what FedAvg's server sees (the mean of
the round's updates), so the step asks no house for more than FedAvg does. Why FedVLN's speaker
uses it: experiments/studies/fedvln_speaker_fedadam_long.toml. b1 and b2 as Reddi et al. fix
them; tau, which they tune, at Flower's FedAdam default. D weighs the houses by size,
n_k / n (w_k - w), as Eq. 7 does (Alg. 2 averages uniformly), so FedAdam and FedVLN's FedAvg
differ only in the step.
"""

from __future__ import annotations

import numpy as np

FEDADAM = {"b1": 0.9, "b2": 0.99, "tau": 1e-3}


def fedadam_step(w: dict, d: dict, moments: dict, eta: float, sqrt=np.sqrt) -> dict:
    """The next global model from w and the round's mean update d (arrays by name; numpy by
    default, torch tensors with `sqrt=torch.sqrt`). `moments` holds (m, v) per name across
    rounds and is updated here; a name it lacks starts at zeros."""
    new = {}
    for k in w:
        m, v = moments.get(k, (d[k] * 0, d[k] * 0))
        m = m * FEDADAM["b1"] + (1 - FEDADAM["b1"]) * d[k]
        v = v * FEDADAM["b2"] + (1 - FEDADAM["b2"]) * d[k] ** 2
        moments[k] = (m, v)
        new[k] = w[k] + eta * m / (sqrt(v) + FEDADAM["tau"])
    return new


def moments_state(moments: dict) -> dict:
    """The moments as tensors named `m.<array>` and `v.<array>`, for a server checkpoint (a
    resumed run goes on with them: server/fedvln_run.py)."""
    import torch

    return {f"{part}.{k}": torch.from_numpy(np.ascontiguousarray(mv[i]))
            for k, mv in moments.items() for i, part in enumerate("mv")}  # fmt: skip


def moments_from(saved: dict) -> dict:
    """What moments_state wrote, as (m, v) per array again."""
    names = {k[2:] for k in saved if k[:2] in ("m.", "v.")}
    return {k: (saved[f"m.{k}"].numpy(), saved[f"v.{k}"].numpy()) for k in names}
