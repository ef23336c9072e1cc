"""What of a torch model travels between server and clients.

BatchNorm's `num_batches_tracked` counters are left out: they are integers that averaging would
turn into meaningless floats, and with a fixed momentum they do not affect the model. Running
means and variances travel and are averaged like weights, as in FedAvg's reference
implementations (`statistics=True`, the papers').

With `statistics=False` (run config `driving.batchnorm-statistics = "local"`) they never leave
a silo: only weights and the BatchNorm affine parameters travel. Why: they are computed from
the silo's data (they leak it), and under DP they would be clipped and noised with the weights
although the smallest of them are below the noise (docs/privacy.md, CDL's breakdown). Training
runs BatchNorm in train mode (batch statistics), so they matter only when a model is scored:
whoever scores a model re-estimates them on its own training images first
(training.steering.estimate_statistics). That is FedBN's rule (Li et al., ICLR 2021: a
client normalises with its own statistics), with one choice of ours: FedBN keeps the affine
parameters local too; we share them, so that "only the statistics stay home" is the one change.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

STATISTICS = ("running_mean", "running_var")


def kept(key: str, statistics: bool) -> bool:
    """Whether array `key` of a model travels."""
    return not key.endswith("num_batches_tracked") and (statistics or not key.endswith(STATISTICS))


def shared_state(model: nn.Module, statistics: bool = True) -> OrderedDict[str, torch.Tensor]:
    """The arrays to send, on the CPU (BatchNorm statistics only with `statistics`)."""
    return OrderedDict(
        (k, v.detach().cpu().clone()) for k, v in model.state_dict().items() if kept(k, statistics)
    )


def load_shared_state(
    model: nn.Module, state: dict[str, torch.Tensor], statistics: bool = True
) -> None:
    """Load arrays produced by shared_state(statistics=...); any other missing or extra key is
    an error (statistics that should not have travelled included)."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if not statistics:
        missing = [k for k in missing if not k.endswith(STATISTICS)]
        unexpected += [k for k in state if k.endswith(STATISTICS)]
    if missing or unexpected:
        raise KeyError(
            f"model arrays do not match: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )


def initial_state(
    image_size: int, channels: int, seed: int, with_sub: bool = False, statistics: bool = True
) -> OrderedDict[str, torch.Tensor]:
    """The common starting model of every driving method (seeded, so runs compare), plus a copy
    under `sub.` when a method also mixes a CDL sub-network (its reference variant)."""
    from models.resnet8 import ResNet8
    from models.rng import owned

    with owned(seed):  # models/rng
        state = shared_state(ResNet8(image_size, channels), statistics)
    if with_sub:
        state.update({f"sub.{k}": v.clone() for k, v in list(state.items())})
    return state
