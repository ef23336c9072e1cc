"""The minibatch loop the VLN follower and speaker share (plain PyTorch, no flwr)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class Batches:
    """Minibatches drawn without replacement, reshuffled at the end of each pass."""

    def __init__(self, items: list, batch_size: int, rng: np.random.Generator):
        self.items, self.size, self.rng = items, batch_size, rng
        self.order, self.k = rng.permutation(len(items)), 0

    def next(self) -> list:
        if self.k + self.size > len(self.order):
            self.order, self.k = self.rng.permutation(len(self.items)), 0
        batch = [self.items[i] for i in self.order[self.k : self.k + self.size]]
        self.k += self.size
        return batch


def train_steps(
    model: nn.Module,
    optimizer,
    items: list,
    batch_size: int,
    iterations: int,
    rng: np.random.Generator,
    loss_of,
    progress=None,
) -> float:
    """`iterations` updates on minibatches drawn without replacement (reshuffled per pass);
    `loss_of(batch)` gives the loss tensor. Gradients are clipped at norm 40 as Envdrop does.
    Returns the mean loss."""
    model.train()
    losses, batches = [], Batches(items, batch_size, rng)
    for _ in range(iterations):
        optimizer.zero_grad()
        loss = loss_of(batches.next())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 40.0)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(loss.item())
    return float(np.mean(losses)) if losses else float("nan")


OPTIMIZERS = {"rms": torch.optim.RMSprop, "adam": torch.optim.Adam}


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    """Envdrop's `--optim rms|adam` with torch defaults (RMSprop alpha 0.99, eps 1e-8)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    return OPTIMIZERS[name](params, lr=lr)
