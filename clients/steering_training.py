"""Local training and evaluation of a steering regressor, in plain PyTorch (no flwr).

FedProx's proximal term (mu/2)*||w - w_global||^2 is added to the loss when mu > 0; with mu = 0
this is exactly FedAvg's local SGD.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


def device() -> torch.device:
    """The GPU when this process was given one (Ray hides GPUs from ClientApps given none)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_optimizer(params, name: str, lr: float) -> torch.optim.Optimizer:
    """`sgd` (momentum 0.9) or `adam` (what the CDL/FADNet reference code trains with). A fresh
    optimizer per round: optimizer state is not averaged and would be stale after mixing."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r} (sgd or adam)")


def minibatches(n: int, batch_size: int, *, epochs: int, seed: int, device: torch.device,
                max_steps: int = 0):
    """Yield (starts_an_epoch, indices): `epochs` shuffled passes, or exactly `max_steps`
    minibatches (reshuffling at every pass) when max_steps > 0, the reference code's
    `local_steps`. Batches of one sample are skipped: BatchNorm needs two."""
    if n < 2:
        return
    g = torch.Generator().manual_seed(seed)
    steps = epoch = 0
    while (steps < max_steps) if max_steps > 0 else (epoch < epochs):
        perm = torch.randperm(n, generator=g).to(device)
        first = True
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            if len(idx) < 2:
                continue
            yield first, idx
            first = False
            steps += 1
            if 0 < max_steps <= steps:
                return
        epoch += 1


def train_steering(model: nn.Module, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float,
                   batch_size: int, seed: int, proximal_mu: float = 0.0,
                   optimizer: str = "sgd", max_steps: int = 0) -> float:
    """Run `epochs` of minibatch SGD on MSE (or exactly `max_steps` minibatches when > 0);
    returns the mean training MSE of the last epoch. The model is trained on device() and
    left there."""
    dev = device()
    model.to(dev)
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
    opt = make_optimizer(model.parameters(), optimizer, lr)
    model.train()
    total, count = 0.0, 0
    for new_epoch, idx in minibatches(len(xt), batch_size, epochs=epochs, seed=seed,
                                      device=dev, max_steps=max_steps):
        if new_epoch:
            total, count = 0.0, 0
        loss = nn.functional.mse_loss(model(xt[idx]), yt[idx])
        total += float(loss.detach()) * len(idx)
        count += len(idx)
        if anchor is not None:
            prox = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
            loss = loss + 0.5 * proximal_mu * prox
        opt.zero_grad()
        loss.backward()
        opt.step()
    last = total / count if count else float("nan")
    return last


@torch.no_grad()
def evaluate_steering(model: nn.Module, x: np.ndarray, y: np.ndarray,
                      batch_size: int = 256) -> tuple[float, float]:
    """(MSE, MAE) of the model's steering on (x, y)."""
    dev = device()
    model.to(dev).eval()
    preds = [model(torch.from_numpy(x[i:i + batch_size]).to(dev)).cpu()
             for i in range(0, len(x), batch_size)]
    err = torch.cat(preds).numpy() - y if preds else np.zeros(0)
    return float(np.mean(err**2)), float(np.mean(np.abs(err)))
