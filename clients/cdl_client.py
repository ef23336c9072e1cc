"""Client side of CDL: the silo trains its Siamese pair with the contrastive-divergence loss.

The backbone arrives in the message (the silo's mix of its neighbours' backbones, or the global
model under a server) and goes back after training; the sub-network lives only in this node's
`context.state` and never leaves it (variant "paper"). In the "reference" variant the
sub-network travels and is mixed too, as in the official code: its arrays are sent under `sub.`.

The sub-network starts as a copy of the backbone after the silo's first round (the article:
"the sub-network initially adopts the same weights as the backbone during the initial
communication round"): the first round trains the backbone on L_lr alone, then copies it.
BatchNorm: the backbone's running statistics are part of the backbone and are accumulated with
its weights (a silo's backbone is evaluated on other silos' data, so it must carry them), unless
`driving.batchnorm-statistics = "local"` keeps them home (models/state.py); the sub-network's
statistics stay local like the rest of it.
"""

from __future__ import annotations

import copy
import math
import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from clients import costs, faults, policy
from clients.driving_client import (  # noqa: F401 (evaluate: the handler)
    build_model,
    evaluate,
    keep_optimizers,
    kept_optimizers,
    local_optimizer,
    silo_data,
    statistics_travel,
)
from config import parse
from contracts.messages import CD_LOSS, FIT_S, HOLDS_PARTITION, NUM_EXAMPLES, TRAIN_LOSS, round_of
from models.rng import owned, stream_seed
from models.state import load_shared_state, shared_state
from training.cdl import train_cdl
from training.progress import StepLog

SUB_STATE = "cdl-sub-network"


def local_steps(c, n: int) -> int:
    """The steps train_cdl takes (training/steering.minibatches): `driving.local-steps`, else
    every minibatch of two or more samples of every epoch."""
    b = c.driving.batch_size
    per_epoch = n // b + (n % b >= 2)
    return c.driving.local_steps or c.driving.local_epochs * per_epoch


def train(msg: Message, context: Context) -> Message:
    c = parse(context.run_config)
    pid = int(context.node_config["partition-id"])
    rnd = round_of(msg)
    variant = c.cdl.variant
    torch.set_num_threads(c.run.client_threads)
    p = policy.of_node(context.node_config)
    if variant == "reference" and not p.cdl.share_sub_network:  # it sends `sub.*` up
        raise p.refuse(
            "cdl.share-sub-network",
            f"silo {pid}: the run asks cdl.variant='reference', which sends the sub-network; "
            "this silo sends its backbone only",
        )
    fault = faults.before_training(c, pid, rnd, "training")
    with costs.phase("rebuild"):  # the silo's data (rendered per process), as FedAvg's silo
        data = silo_data(context)
    # this silo's stream (models/rng); the work phase as FedAvg's: models built, then trained
    with owned(stream_seed(c.run.seed, pid, rnd)), costs.phase("work"):
        received = msg.content["arrays"].to_torch_state_dict()
        backbone = build_model(c, received)
        sub = None
        if variant == "reference" and any(k.startswith("sub.") for k in received) and rnd > 1:
            sub = build_model(c)
            load_shared_state(
                sub,
                {k[4:]: v for k, v in received.items() if k.startswith("sub.")},
                statistics_travel(c),
            )
        elif variant == "paper" and SUB_STATE in context.state:
            sub = build_model(c, context.state[SUB_STATE].to_torch_state_dict())
        resume, step0 = kept_optimizers(c, context)
        t0 = time.perf_counter()
        stats = train_cdl(
            backbone,
            sub,
            data.x_train,
            data.y_train,
            epochs=c.driving.local_epochs,
            optim=local_optimizer(c),
            batch_size=c.driving.batch_size,
            max_steps=c.driving.local_steps,
            beta=c.cdl.beta,
            temperature=c.cdl.temperature,
            seed=c.run.seed + 1000 * rnd + pid,
            variant=variant,
            resume=resume,
            step0=step0,
            progress=StepLog(
                f"silo {pid} round {rnd}: training", local_steps(c, len(data.y_train))
            ),
        )
    fit_s = time.perf_counter() - t0
    keep_optimizers(c, context, stats, step0)
    if sub is None:
        sub = copy.deepcopy(backbone)
    out = shared_state(backbone, statistics_travel(c))
    if variant == "paper":
        # kept as it would travel: its running statistics are never read (training runs
        # BatchNorm on batch statistics, and the sub-network is never scored)
        context.state[SUB_STATE] = ArrayRecord(shared_state(sub, statistics_travel(c)))
    else:
        out.update({f"sub.{k}": v for k, v in shared_state(sub, statistics_travel(c)).items()})
    out = faults.nan_state(out, fault)
    metrics = {
        NUM_EXAMPLES: len(data.y_train),
        TRAIN_LOSS: stats["mse"],
        CD_LOSS: stats["cd"],
        FIT_S: fit_s,
        HOLDS_PARTITION: pid,  # as every driving reply (a large FedAvg-style run reads it)
    }
    for key in ("cd_grad_ratio", "pb_entropy"):  # measured only once a sub-network exists
        if math.isfinite(stats[key]):
            metrics[key.replace("_", "-")] = stats[key]
    return Message(
        RecordDict({"arrays": ArrayRecord(out), "metrics": MetricRecord(metrics)}), reply_to=msg
    )
