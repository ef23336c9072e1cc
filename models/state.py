"""What of a torch model travels between server and clients.

BatchNorm's `num_batches_tracked` counters are left out: they are integers that averaging would
turn into meaningless floats, and with a fixed momentum they do not affect the model. Running
means and variances do travel and are averaged like weights, as in FedAvg's reference
implementations.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn


def shared_state(model: nn.Module) -> OrderedDict[str, torch.Tensor]:
    """The arrays to send, on the CPU."""
    return OrderedDict(
        (k, v.detach().cpu().clone())
        for k, v in model.state_dict().items()
        if not k.endswith("num_batches_tracked")
    )


def load_shared_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load arrays produced by shared_state; any other missing or extra key is an error."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise KeyError(
            f"model arrays do not match: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )


def initial_state(
    image_size: int, channels: int, seed: int, with_sub: bool = False
) -> OrderedDict[str, torch.Tensor]:
    """The common starting model of every driving method (seeded, so runs compare), plus a copy
    under `sub.` when a method also mixes a CDL sub-network (its reference variant)."""
    from models.resnet8 import ResNet8
    from models.rng import owned

    with owned(seed):  # models/rng
        state = shared_state(ResNet8(image_size, channels))
    if with_sub:
        state.update({f"sub.{k}": v.clone() for k, v in list(state.items())})
    return state
