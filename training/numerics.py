"""The floating-point kernels a FedRL party computes with, pinned so that a run repeats to the
digit on any engine and any x86-64 host.

The Q-network's convolutions run through oneDNN and its linear layers through MKL, whose
AVX-512 and AVX2 kernels sum in different orders; DQN training amplifies the last-bit
difference into another policy (issue 61: one recipe differed by 6 points on DQN-alpha between
an AVX-512 and an AVX2 host). `pin()` sets both to their AVX2 paths (`PINNED`, what every
x86-64 host since 2013 has) unless the environment already sets them (an operator's choice,
then recorded by `numerics()`).

The party pins itself (clients/fedrl_client.handle, before anything computes), not its launcher:
issue 63 found a deployed Table-1 run and the same run simulated disagreeing on test SuccRate
(82.6 vs 83.6) because the benchmark had pinned the simulation's environment and not the
SuperNodes'. The pin takes effect only in a process that has not yet run a convolution or a
matrix product (oneDNN and MKL read it once, at their first use): a SuperNode's message
process, a simulation's worker and a table script (experiments/fedrl imports this first) all
pin before they compute. It is set for FedRL only: the other methods' committed runs were
made on the host's own kernels.
"""

from __future__ import annotations

import os

PINNED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}


def pin() -> None:
    """Pin the kernels for this process and its children (an operator's own setting stays)."""
    for k, v in PINNED.items():
        os.environ.setdefault(k, v)


def numerics() -> str:
    """The floating-point kernels this process computes with: the pinned variables as set,
    and torch's version (its kernels change between releases)."""
    import torch

    return " ".join(f"{k}={os.environ.get(k, '')}" for k in PINNED) + f" torch={torch.__version__}"
