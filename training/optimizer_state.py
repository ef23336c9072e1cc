"""An optimizer's state as flat named tensors, so a node can keep it in its Flower context
(`context.state`) between rounds. It is never sent: optimizer state is the node's own.
(Used by FedVLN's `fedvln.optimizer-state = house` and the driving `driving.optimizer-state =
silo`.)"""

from __future__ import annotations

import torch


def optimizer_arrays(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """An optimizer's per-parameter state as flat named tensors ("<param index>/<name>"), so a
    house can keep it in its Flower context between rounds."""
    return {
        f"{i}/{name}": (v if torch.is_tensor(v) else torch.tensor(v)).detach().clone()
        for i, st in opt.state_dict()["state"].items()
        for name, v in st.items()
    }


def load_optimizer_arrays(opt: torch.optim.Optimizer, arrays: dict[str, torch.Tensor]) -> None:
    """Inverse of `optimizer_arrays` (hyper-parameters stay those of `opt`)."""
    sd = opt.state_dict()
    state: dict[int, dict] = {}
    for key, v in arrays.items():
        i, name = key.split("/", 1)
        state.setdefault(int(i), {})[name] = v
    sd["state"] = state
    opt.load_state_dict(sd)
