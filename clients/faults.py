"""Fault injection for robustness studies, the same for every method (run config `faults.*`).

* `faults.nan-partition = p`: partition p's training replies carry NaN (driving/CDL: its model
  update; FedVLN: the arrays it shares; FedRL: its released Q outputs). The server must leave
  the update out (FedAvg, FedProx, CDL, FedVLN) or stop the run naming the party (FedRL, whose
  two parties cannot lose one).
* `faults.raise-partition = p`: partition p's training calls raise, as a client whose data or
  code broke would; the server records a failed row and goes on (FedRL: stops, naming it).

-1 turns a fault off. A deployed SuperNode's partition is its `partition-id` node config.
"""
from __future__ import annotations

import numpy as np
import torch


class InjectedFault(RuntimeError):
    """Raised by `faults.raise-partition`, so a log or a clients.csv row says it was meant."""


def partition(context_node_config) -> int:
    return int(context_node_config.get("partition-id", -1))


def nan_state(state: dict, pid: int, cfg: dict) -> dict:
    """`state` with its first floating array (torch or numpy) all NaN when pid is
    `faults.nan-partition`; unchanged otherwise."""
    if pid != int(cfg["faults.nan-partition"]):
        return state
    for k, v in state.items():
        a = np.asarray(v.detach() if torch.is_tensor(v) else v)
        if a.dtype.kind == "f" and a.size:
            state[k] = torch.full_like(v, float("nan")) if torch.is_tensor(v) else \
                np.full_like(a, np.nan)
            break
    return state


def maybe_raise(pid: int, cfg: dict, what: str) -> None:
    if pid == int(cfg["faults.raise-partition"]):
        raise InjectedFault(f"injected fault: partition {pid} fails its {what} "
                            f"(faults.raise-partition)")
