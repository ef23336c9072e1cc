"""Local training and evaluation of a steering regressor, in plain PyTorch (no flwr).

FedProx's proximal term (mu/2)*||w - w_global||^2 is added to the loss when mu > 0; with mu = 0
this is exactly FedAvg's local SGD.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from training.optimizer_state import load_optimizer_arrays, optimizer_arrays


def device() -> torch.device:
    """The GPU when this process was given one (Ray hides GPUs from ClientApps given none)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass(frozen=True)
class LocalOptimizer:
    """How a silo's networks are optimized locally.

    `sgd` (momentum 0.9) or `adam` (what the CDL/FADNet official code trains with, `utils/optim.py`:
    Adam with weight_decay 1e-5). `decay = "sqrt"` is the official `--decay sqrt`: lr / sqrt(t)
    at the silo's t-th local step (t counted over the whole run, LambdaLR stepped per batch,
    github:aioz-ai/CDL `models/model.py` l. 39). `clip` > 0 clips the gradient norm (not in the papers; a stability
    limit for strong CDL settings). The caller keeps `state` between rounds when the optimizer
    persists (`driving.optimizer-state = silo`, as the official code's one optimizer per worker);
    by default each round starts a fresh optimizer, since its state is not averaged."""

    name: str = "sgd"
    lr: float = 0.01
    weight_decay: float = 0.0
    decay: str = "none"
    clip: float = 0.0

    def build(self, params, state: dict | None = None) -> torch.optim.Optimizer:
        params = list(params)
        if self.name == "sgd":
            opt = torch.optim.SGD(params, lr=self.lr, momentum=0.9, weight_decay=self.weight_decay)
        elif self.name == "adam":
            opt = torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        else:
            raise ValueError(f"unknown optimizer {self.name!r} (sgd or adam)")
        if state:
            load_optimizer_arrays(opt, state)
        return opt

    def step(self, opt: torch.optim.Optimizer, params, t: int) -> None:
        """One update at the silo's local step t (0-based, over the run)."""
        lr = self.lr / math.sqrt(t) if self.decay == "sqrt" and t > 0 else self.lr
        for group in opt.param_groups:
            group["lr"] = lr
        if self.clip > 0:
            nn.utils.clip_grad_norm_(params, self.clip)
        opt.step()


def minibatches(
    n: int, batch_size: int, *, epochs: int, seed: int, device: torch.device, max_steps: int = 0
):
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
            idx = perm[i : i + batch_size]
            if len(idx) < 2:
                continue
            yield first, idx
            first = False
            steps += 1
            if 0 < max_steps <= steps:
                return
        epoch += 1


def train_steering(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    optim: LocalOptimizer = LocalOptimizer(),
    proximal_mu: float = 0.0,
    max_steps: int = 0,
    resume: dict | None = None,
    step0: int = 0,
) -> dict:
    """Run `epochs` of minibatch training on MSE (or exactly `max_steps` minibatches when > 0).
    Returns {"mse": mean training MSE of the last epoch, "steps": updates made, "optimizers":
    {"model": optimizer state}}; `resume` is such a dict from the silo's previous round, `step0`
    the updates it made before. The model is trained on device() and left there."""
    dev = device()
    model.to(dev)
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    anchor = [p.detach().clone() for p in model.parameters()] if proximal_mu > 0 else None
    params = list(model.parameters())
    opt = optim.build(params, (resume or {}).get("model"))
    model.train()
    total, count, steps = 0.0, 0, 0
    for new_epoch, idx in minibatches(
        len(xt), batch_size, epochs=epochs, seed=seed, device=dev, max_steps=max_steps
    ):
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
        optim.step(opt, params, step0 + steps)
        steps += 1
    return {
        "mse": total / count if count else float("nan"),
        "steps": steps,
        "optimizers": {"model": optimizer_arrays(opt)},
    }


@torch.no_grad()
def estimate_statistics(
    model: nn.Module, x: np.ndarray, only: str | None = None, batch_size: int = 256
) -> nn.Module:
    """Replace the running mean and variance of every BatchNorm (or of the one named `only`)
    with those of the model's own activations on `x`, in place; weights untouched.

    For `driving.batchnorm-statistics = "local"` (models/state.py): statistics never travel, so
    a model is scored with statistics of the data it runs on (the scoring silo's training
    images). `x` is cut into near-equal batches of at most `batch_size` (no one-image batch,
    which BatchNorm cannot normalise at a 1x1 feature map), and each batch's statistics count
    by its size (momentum n_k / n_seen), not the training EMA. Large batches, not the training
    minibatch: a batch's variance misses the spread between batch means, so the fewer the
    batches the closer to the images' own variance (a silo of a few hundred images is one or
    two batches). Only the chosen BatchNorms
    run in train mode, so no other layer's statistics move and the dropout stays off."""
    if len(x) < 2:
        raise ValueError(f"BatchNorm statistics need at least 2 images, got {len(x)}")
    chosen = [
        m
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and only in (None, name)
    ]
    if only is not None and not chosen:
        raise ValueError(f"no BatchNorm named {only!r} in the model")
    dev = device()
    model.to(dev).eval()
    momenta = [m.momentum for m in chosen]
    for m in chosen:
        m.reset_running_stats()
        m.train()
    seen = 0
    for part in np.array_split(np.arange(len(x)), math.ceil(len(x) / batch_size)):
        seen += len(part)
        for m in chosen:
            m.momentum = len(part) / seen
        model(torch.from_numpy(np.ascontiguousarray(x[part])).to(dev))
    for m, momentum in zip(chosen, momenta):
        m.momentum = momentum
    return model.eval()


@torch.no_grad()
def evaluate_steering(
    model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 256
) -> tuple[float, float]:
    """(MSE, MAE) of the model's steering on (x, y)."""
    dev = device()
    model.to(dev).eval()
    preds = [
        model(torch.from_numpy(x[i : i + batch_size]).to(dev)).cpu()
        for i in range(0, len(x), batch_size)
    ]
    err = torch.cat(preds).numpy() - y if preds else np.zeros(0)
    return float(np.mean(err**2)), float(np.mean(np.abs(err)))
