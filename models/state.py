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
    return OrderedDict((k, v.detach().clone()) for k, v in model.state_dict().items()
                       if not k.endswith("num_batches_tracked"))


def load_shared_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load arrays produced by shared_state; any other missing or extra key is an error."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise KeyError(f"model arrays do not match: missing {missing[:3]}, unexpected "
                       f"{unexpected[:3]}")
