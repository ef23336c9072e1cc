"""Fault injection for robustness studies, the same for every method (run config `faults.*`).

Which training calls are faulty:
* `faults.raise-partitions`, `faults.nan-partitions`, `faults.hang-partitions`: comma-separated
  partition ids ("1,3"; "" = none) whose training calls raise / carry NaN / hang;
* `faults.fraction` with `faults.fraction-kind`: besides those, each training call of every
  partition is faulty with this probability, drawn from (seed, round, partition, attempt,
  call), so a run is reproducible and a retried call (FedRL) draws again;
* `faults.rounds`: only in these rounds ("2-4,7"; "" = every round). A partition listed for
  `hang` in some rounds is a client that drops out for those rounds.

What a faulty call does:
* raise: the ClientApp raises InjectedFault, as a client whose data or code broke would;
* nan: the reply's first floating array is NaN (driving/CDL: the model update; FedVLN: the
  arrays it shares; FedRL: its released Q outputs);
* hang: the ClientApp sleeps `faults.hang-s` seconds (0 = the run's round-timeout + 5) before
  answering normally, so the server has moved on without it.
The server must leave the update out (FedAvg, FedProx, CDL, gossip, FedVLN) and record why, or
retry the step and stop the run naming the party if it keeps failing (FedRL, whose two parties
cannot lose one). A deployed SuperNode's partition is its `partition-id` node config.
"""

from __future__ import annotations

import time
import zlib

import numpy as np
import torch

from config import Config
from config.faults import KINDS


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault, so a log or a clients.csv row says it was meant."""


def partition(context_node_config) -> int:
    return int(context_node_config.get("partition-id", -1))


def fault_of(c: Config, pid: int, rnd: int, attempt: int = 0, call: str = "training") -> str | None:
    """The fault of this training call (partition pid, server round rnd, attempt, and which
    call of the round: FedRL makes several), or None."""
    f = c.faults
    if f.round_set and rnd not in f.round_set:
        return None
    for kind in KINDS:
        if pid in f.partitions[kind]:
            return kind
    if f.fraction > 0:
        draw = np.random.default_rng(
            [c.run.seed, rnd, pid, attempt, zlib.crc32(call.encode())]
        ).random()
        if draw < f.fraction:
            return f.fraction_kind
    return None


def before_training(c: Config, pid: int, rnd: int, what: str, attempt: int = 0) -> str | None:
    """Raise or hang here if this call is faulty; returns its fault (nan is applied later)."""
    kind = fault_of(c, pid, rnd, attempt, what)
    if kind == "raise":
        raise InjectedFault(f"injected fault: partition {pid} fails its {what} in round {rnd}")
    if kind == "hang":
        time.sleep(c.faults.hang_s or c.run.round_timeout + 5.0)
    return kind


def nan_state(state: dict, kind: str | None) -> dict:
    """`state` with its first floating array (torch or numpy) all NaN when kind is "nan";
    unchanged otherwise."""
    if kind != "nan":
        return state
    for k, v in state.items():
        a = np.asarray(v.detach() if torch.is_tensor(v) else v)
        if a.dtype.kind == "f" and a.size:
            state[k] = (
                torch.full_like(v, float("nan")) if torch.is_tensor(v) else np.full_like(a, np.nan)
            )
            break
    return state
