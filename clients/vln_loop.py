"""The minibatch loop the VLN follower and speaker share (plain PyTorch, no flwr)."""
from __future__ import annotations

import numpy as np
from torch import nn


def train_steps(model: nn.Module, optimizer, items: list, batch_size: int, iterations: int,
                rng: np.random.Generator, loss_of, progress=None) -> float:
    """`iterations` updates on minibatches drawn without replacement (reshuffled per pass);
    `loss_of(batch)` gives the loss tensor. Gradients are clipped at norm 40 as Envdrop does.
    Returns the mean loss."""
    model.train()
    losses, order, k = [], rng.permutation(len(items)), 0
    for _ in range(iterations):
        if k + batch_size > len(order):
            order, k = rng.permutation(len(items)), 0
        batch = [items[i] for i in order[k:k + batch_size]]
        k += batch_size
        optimizer.zero_grad()
        loss = loss_of(batch)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 40.0)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(loss.item())
    return float(np.mean(losses)) if losses else float("nan")
