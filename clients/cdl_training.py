"""Local training of a CDL silo: the Siamese backbone / sub-network pair (plain PyTorch).

Paper-faithful (`variant = "paper"`), per minibatch:
  P_b = softmax(features of the backbone), P_s = softmax(features of the sub-network)
  L_cd+ = KL(P_b || P_s)  with P_s a constant    -> trains the backbone, with L_lr = MSE
  L_cd- = KL(P_s || P_b)  with P_b a constant    -> trains the sub-network only
  backbone loss = L_lr + beta * L_cd+ ;  sub-network loss = (1 - beta) * L_cd-
The weights beta and 1 - beta come from L_final = L_lr + L_cd with L_cd = beta L_cd+ +
(1 - beta) L_cd-; the article's per-network updates (L_b = L_lr + L_cd+, sub on L_cd-) are that
loss's gradients with respect to each network. Features are the flattened ReLU output of the
last residual block (the input of the steering head), the representation both branches share in
size.

Reference (`variant = "reference"`), what the official code computes: one optimizer over both
branches on MSE(backbone output) + KLDivLoss(sigmoid(backbone output), sigmoid(sub output)),
i.e. PyTorch's pointwise KL term on the two scalar outputs with beta = 1, gradients flowing
into both branches. (The official model also shares its stem convolution between the two
branches; here the two ResNet-8s are separate.)
Without a sub-network yet (a silo's first round) only L_lr is used.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from clients.steering_training import device, make_optimizer, minibatches
from models.resnet8 import ResNet8


def kl_softmax(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Batch mean of KL(softmax(p) || softmax(q)) over the feature dimension."""
    logp = F.log_softmax(p_logits, dim=1)
    logq = F.log_softmax(q_logits, dim=1)
    return (logp.exp() * (logp - logq)).sum(dim=1).mean()


def train_cdl(backbone: ResNet8, sub: ResNet8 | None, x: np.ndarray, y: np.ndarray, *,
              epochs: int, lr: float, batch_size: int, seed: int, beta: float = 0.5,
              variant: str = "paper", optimizer: str = "sgd", max_steps: int = 0
              ) -> dict[str, float]:
    """Train the pair in place; returns the last epoch's mean MSE and mean L_cd+ (0 without a
    sub-network), as train_steering reports its loss."""
    dev = device()
    backbone.to(dev).train()
    params = list(backbone.parameters())
    if sub is not None:
        sub.to(dev).train()
        if variant == "reference":
            params += list(sub.parameters())
    opt_b = make_optimizer(params, optimizer, lr)
    opt_s = (make_optimizer(sub.parameters(), optimizer, lr)
             if sub is not None and variant == "paper" else None)
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    mse_sum = cd_sum = 0.0
    count = 0
    for new_epoch, idx in minibatches(len(xt), batch_size, epochs=epochs, seed=seed,
                                      device=dev, max_steps=max_steps):
        if new_epoch:
            mse_sum = cd_sum = 0.0
            count = 0
        xb, yb = xt[idx], yt[idx]
        cd = torch.zeros((), device=dev)
        if variant == "paper":
            fb = backbone.features(xb)
            mse = F.mse_loss(backbone.head(backbone.dropout(fb)).squeeze(-1), yb)
            if sub is not None:
                fs = sub.features(xb)
                cd = kl_softmax(fb, fs.detach())
                opt_s.zero_grad()
                ((1 - beta) * kl_softmax(fs, fb.detach())).backward()
                opt_s.step()
            loss = mse + beta * cd
        else:
            pb = backbone(xb)
            mse = F.mse_loss(pb, yb)
            if sub is not None:
                with warnings.catch_warnings():  # torch warns that 'mean' is not batchmean
                    warnings.simplefilter("ignore", UserWarning)
                    cd = nn.KLDivLoss(reduction="mean")(torch.sigmoid(pb),
                                                        torch.sigmoid(sub(xb)))
            loss = mse + cd
        opt_b.zero_grad()
        loss.backward()
        opt_b.step()
        mse_sum += float(mse.detach()) * len(idx)
        cd_sum += float(cd.detach()) * len(idx)
        count += len(idx)
    return {"mse": mse_sum / max(count, 1), "cd": cd_sum / max(count, 1)}
