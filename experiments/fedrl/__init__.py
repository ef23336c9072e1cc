"""FedRL's tables and studies (one script per table or study).

Every study here runs in the named study mode `fedrl.reproducible-noise = true` (STUDY): the
parties' noise is drawn from the run seed, so a table repeats to the digit and a resumed or
cached run is the run it claims to be. That noise is NOT private (anyone with the run config
removes it: experiments/privacy/fedrl_derandomize.py); it measures utility at a noise level,
and the privacy a default run gets at that level is what its own secret noise gives.

Repeating to the digit also needs the same floating-point kernels on every host. The Q-network's
convolutions run through oneDNN and its linear layers through MKL, whose AVX-512 and AVX2
kernels sum in different orders; DQN training amplifies the last-bit difference into another
policy (issue 61: Table 1 and the privacy frontier, one recipe and one code, differed by 6
points on DQN-alpha because one was made on an AVX-512 host and one on an AVX2 host). Importing
this package pins both to their AVX2 paths (`PINNED`, what every x86-64 host since 2013 has),
unless the environment already sets them; `numerics()` is recorded in every run row and its
fingerprint, so runs made under other kernels are never mixed or reused. The pin takes effect
only in a process that has not yet run a convolution or a matrix product: the table scripts
import this package before anything computes, and their worker processes inherit it.
"""

import os

STUDY = {"fedrl.reproducible-noise": True}
PINNED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}
for _k, _v in PINNED.items():
    os.environ.setdefault(_k, _v)


def numerics() -> str:
    """The floating-point kernels this process computes with: the pinned variables as set,
    and torch's version (its kernels change between releases)."""
    import torch

    return " ".join(f"{k}={os.environ.get(k, '')}" for k in PINNED) + f" torch={torch.__version__}"
