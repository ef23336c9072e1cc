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

Temperature (`cdl.temperature`, not in the article, whose T is 1): P = softmax(features / T).
At T = 1 the softmax over 512 non-negative ReLU features of mean ~0.1 is close to uniform, so
the KL term is tiny; T < 1 sharpens P and makes the term bite. The KL is not rescaled by T^2
(distillation's convention), so beta keeps its meaning as the weight of the KL as computed.

The signal (does L_cd move the backbone at all?): on the first minibatch of every round with a sub-network, the ratio
||grad_backbone L_cd+|| / ||grad_backbone L_lr|| (beta not applied; the effective share is
beta times it) and the mean entropy of P_b (its maximum is log(feature_dim), uniform).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.resnet8 import ResNet8
from training.optimizer_state import optimizer_arrays
from training.steering import LocalOptimizer, device, minibatches


def kl_softmax(
    p_logits: torch.Tensor, q_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Batch mean of KL(softmax(p / T) || softmax(q / T)) over the feature dimension."""
    logp = F.log_softmax(p_logits / temperature, dim=1)
    logq = F.log_softmax(q_logits / temperature, dim=1)
    return (logp.exp() * (logp - logq)).sum(dim=1).mean()


def paper_losses(
    fb: torch.Tensor, fs: torch.Tensor, beta: float, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The article's contrastive-divergence terms on one minibatch of features (backbone `fb`,
    sub-network `fs`): (L_cd+ = KL(P_b || P_s) with P_s constant, which the backbone adds as
    beta * L_cd+ to L_lr; the sub-network's whole loss (1 - beta) * L_cd- = (1 - beta) *
    KL(P_s || P_b) with P_b constant). L_cd = beta L_cd+ + (1 - beta) L_cd-."""
    cd_plus = kl_softmax(fb, fs.detach(), temperature)
    return cd_plus, (1 - beta) * kl_softmax(fs, fb.detach(), temperature)


def reference_cd(pb: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:
    """What the official code adds to the MSE: PyTorch's pointwise KLDivLoss (reduction
    "mean") of sigmoid(backbone output) against sigmoid(sub-network output), gradients into
    both branches (beta = 1)."""
    with warnings.catch_warnings():  # torch warns that 'mean' is not batchmean
        warnings.simplefilter("ignore", UserWarning)
        return nn.KLDivLoss(reduction="mean")(torch.sigmoid(pb), torch.sigmoid(ps))


def softmax_entropy(logits: torch.Tensor, temperature: float = 1.0) -> float:
    """Mean entropy (nats) of softmax(logits / T) over the batch."""
    logp = F.log_softmax(logits.detach() / temperature, dim=1)
    return float(-(logp.exp() * logp).sum(dim=1).mean())


def _grad_norm(loss: torch.Tensor, params: list) -> float:
    grads = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    return math.sqrt(sum(float((g.detach() ** 2).sum()) for g in grads if g is not None))


def train_cdl(
    backbone: ResNet8,
    sub: ResNet8 | None,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    optim: LocalOptimizer = LocalOptimizer(),
    beta: float = 0.5,
    temperature: float = 1.0,
    variant: str = "paper",
    max_steps: int = 0,
    resume: dict | None = None,
    step0: int = 0,
    progress: Callable[[float], None] | None = None,
) -> dict:
    """Train the pair in place (`progress(loss)` after every step: training/progress.StepLog). Returns the last epoch's mean MSE and mean L_cd+ ("mse", "cd"; 0
    without a sub-network), the signal of the round's first minibatch ("cd_grad_ratio",
    "pb_entropy"; NaN when not measured), "steps" and the optimizers' states ("optimizers":
    {"backbone": ..., "sub": ...}) that `resume` takes back next round (see train_steering)."""
    dev = device()
    resume = resume or {}
    backbone.to(dev).train()
    b_params = list(backbone.parameters())
    params = list(b_params)
    if sub is not None:
        sub.to(dev).train()
        if variant == "reference":
            params += list(sub.parameters())
    # a silo's first round has no sub-network: its backbone state would not fit the pair's
    opt_b = optim.build(params, resume.get("backbone") if len(params) == _n_state(resume) else None)
    opt_s = (
        optim.build(sub.parameters(), resume.get("sub"))
        if sub is not None and variant == "paper"
        else None
    )
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    sums = np.zeros(3)  # this epoch's MSE x n, L_cd x n, n
    steps = 0
    ratio = entropy = math.nan
    for new_epoch, idx in minibatches(
        len(xt), batch_size, epochs=epochs, seed=seed, device=dev, max_steps=max_steps
    ):
        if new_epoch:
            sums[:] = 0.0
        xb, yb = xt[idx], yt[idx]
        if variant == "paper":
            fb, mse, cd, sub_loss = _paper_step(backbone, sub, xb, yb, beta, temperature)
            if sub is not None:
                if steps == 0:
                    entropy = softmax_entropy(fb, temperature)
                opt_s.zero_grad()
                sub_loss.backward()
                optim.step(opt_s, list(sub.parameters()), step0 + steps)
            loss = mse + beta * cd
        else:
            pb = backbone(xb)
            mse = F.mse_loss(pb, yb)
            cd = reference_cd(pb, sub(xb)) if sub is not None else torch.zeros((), device=dev)
            loss = mse + cd
        if steps == 0 and sub is not None:
            ratio = _grad_norm(cd, b_params) / max(_grad_norm(mse, b_params), 1e-12)
        opt_b.zero_grad()
        loss.backward()
        optim.step(opt_b, params, step0 + steps)
        steps += 1
        if progress is not None:
            progress(float(mse.detach()))
        sums += (float(mse.detach()) * len(idx), float(cd.detach()) * len(idx), len(idx))
    states = {"backbone": optimizer_arrays(opt_b)}
    if opt_s is not None:
        states["sub"] = optimizer_arrays(opt_s)
    return {
        "mse": float(sums[0] / max(sums[2], 1)),
        "cd": float(sums[1] / max(sums[2], 1)),
        "steps": steps,
        "cd_grad_ratio": ratio,
        "pb_entropy": entropy,
        "optimizers": states,
    }


def _paper_step(backbone, sub, xb, yb, beta: float, temperature: float):
    """One minibatch of the paper's losses: the backbone's features, its MSE, and (with a
    sub-network) L_cd+ and the sub-network's loss from `paper_losses` (zeros without one)."""
    fb = backbone.features(xb)
    mse = F.mse_loss(backbone.head(backbone.dropout(fb)).squeeze(-1), yb)
    if sub is None:
        zero = torch.zeros((), device=xb.device)
        return fb, mse, zero, zero
    cd, sub_loss = paper_losses(fb, sub.features(xb), beta, temperature)
    return fb, mse, cd, sub_loss


def _n_state(resume: dict) -> int:
    """How many parameters the kept backbone optimizer state covers (0: none kept)."""
    return len({k.split("/", 1)[0] for k in resume.get("backbone", {})})
