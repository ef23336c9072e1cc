"""The floating-point kernels a FedRL party computes with, pinned so that a run repeats to the
digit on either engine and on every host of one kind (not on every x86-64 host: see below).

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

The pin is not enough across kinds of host (measured 2026-12-03): Table 1's FedRL 8x8 seed-0 run,
same code, packages (torch 2.13.0, numpy 2.4.6) and pin, gives test SuccRates 0.909 / 0.922 /
0.924 / 0.932 on the Xeons with AVX-512 and AMX of that day where the hosts that made the table
(and passed CI with it until 2026-12-02) gave 0.937 / 0.929 / 0.929 / 0.927; unpinned, or
pinned to SSE4.1, it gives other digits again (0.904-0.952). ATen's own kernels are not the cause
(ATEN_CPU_CAPABILITY=avx2 changed no digit). Not traced further; a likely cause is that oneDNN
and MKL choose their blocking, and so their order of summation, by the host's cache sizes as
well as by its ISA. So a run repeats to the digit on one kind of host, and across kinds within
the seeds' spread (tests/test_fedrl_tables.py holds the table to that).
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
