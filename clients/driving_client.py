"""Client side of the driving methods (fedavg, fedprox): local SGD on this silo's data.

The silo's data is built on the node from its identity (embedded procedural silos) or read from
its data folder; it never travels in a message. A small per-process cache avoids re-rendering
the same silo every round; it is keyed by everything that determines the data, so it cannot mix
up nodes that share a process.
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from clients import costs, faults
from config import Config, parse
from contracts.messages import (
    FIT_S,
    HOLDS_PARTITION,
    LABEL_MEAN,
    LABEL_SQ_MEAN,
    NUM_EXAMPLES,
    TRAIN_LOSS,
    round_of,
)
from envs.driving_logs import load_silo
from envs.driving_silos import SiloData, make_silo
from models.resnet8 import ResNet8
from models.rng import owned, stream_seed
from models.state import load_shared_state, shared_state
from training.steering import (
    LocalOptimizer,
    estimate_statistics,
    evaluate_steering,
    train_steering,
)

OPTIMIZER_STATE = "driving-optimizer"  # + "-<network>": kept here when optimizer-state = silo
LOCAL_STEPS = "driving-local-steps"  # this silo's updates so far (the sqrt decay's clock)


@lru_cache(maxsize=128)
def _silo_data(
    data_dir: str,
    silo: int,
    num_silos: int,
    seed: int,
    n_train: int,
    n_test: int,
    image_size: int,
    channels: int,
    non_iid: float,
) -> SiloData:
    if data_dir:
        return load_silo(data_dir, silo, num_silos, image_size, channels)
    return make_silo(silo, seed, n_train, n_test, image_size, channels, non_iid)


def silo_data(context: Context) -> SiloData:
    c = parse(context.run_config)
    nc = context.node_config
    silo, num = int(nc["partition-id"]), int(nc["num-partitions"])
    data_dir = c.driving.data_dir
    if nc.get("data-dir"):  # a deployed silo with its own data folder is the only silo in it
        data_dir, silo, num = str(nc["data-dir"]), 0, 1
    return _silo_data(
        data_dir,
        silo,
        num,
        c.run.seed,
        c.driving.train_per_silo,
        c.driving.test_per_silo,
        c.driving.image_size,
        c.driving.channels,
        c.driving.non_iid,
    )


def local_optimizer(c: Config) -> LocalOptimizer:
    return LocalOptimizer(
        c.driving.optimizer,
        c.driving.lr,
        c.driving.weight_decay,
        c.driving.lr_decay,
        c.driving.grad_clip,
    )


def kept_optimizers(c: Config, context: Context) -> tuple[dict, int]:
    """(optimizer states to resume, local steps made so far) from this silo's context; the
    states only when `driving.optimizer-state = silo`."""
    steps = int(context.state[LOCAL_STEPS]["n"]) if LOCAL_STEPS in context.state else 0
    resume = {}
    if c.driving.optimizer_state == "silo":
        prefix = OPTIMIZER_STATE + "-"
        resume = {
            k[len(prefix) :]: v.to_torch_state_dict()
            for k, v in context.state.array_records.items()
            if k.startswith(prefix)
        }
    return resume, steps


def keep_optimizers(c: Config, context: Context, stats: dict, steps_before: int) -> None:
    """Store what kept_optimizers reads back next round (never sent)."""
    context.state[LOCAL_STEPS] = ConfigRecord({"n": steps_before + int(stats["steps"])})
    if c.driving.optimizer_state == "silo":
        for name, arrays in stats["optimizers"].items():
            context.state[f"{OPTIMIZER_STATE}-{name}"] = ArrayRecord(arrays)


def statistics_travel(c: Config) -> bool:
    """Whether BatchNorm running statistics travel with the weights (models/state.py)."""
    return c.driving.statistics_travel


def build_model(c: Config, state: dict | None = None) -> ResNet8:
    """A ResNet-8 for this run's input size, loaded with `state` (keys of other networks, such
    as a CDL sub-network's `sub.*`, are ignored)."""
    model = ResNet8(c.driving.image_size, c.driving.channels)
    if state is not None:
        load_shared_state(
            model,
            {k: v for k, v in state.items() if not k.startswith("sub.")},
            statistics_travel(c),
        )
    return model


def scored(c: Config, state: dict, data: SiloData) -> ResNet8:
    """The model as this silo scores it: with the statistics it carries, or (statistics kept
    local) with statistics re-estimated on this silo's training images."""
    model = build_model(c, state)
    return model if statistics_travel(c) else estimate_statistics(model, data.x_train)


def models_in(arrays: ArrayRecord) -> list[dict]:
    """The state dicts a message carries: one, or several named `m<k>/<array>` in k order."""
    state = arrays.to_torch_state_dict()
    if not any("/" in k for k in state):
        return [state]
    groups: dict[int, dict] = {}
    for key, value in state.items():
        prefix, name = key.split("/", 1)
        groups.setdefault(int(prefix[1:]), {})[name] = value
    return [groups[k] for k in sorted(groups)]


def train(msg: Message, context: Context) -> Message:
    c = parse(context.run_config)
    pid = int(context.node_config["partition-id"])
    rnd = round_of(msg)
    torch.set_num_threads(c.run.client_threads)
    fault = faults.before_training(c, pid, rnd, "training")
    with costs.phase("rebuild"):  # the silo's data (rendered per process) and its optimizers
        data = silo_data(context)
        resume, step0 = kept_optimizers(c, context)
    t0 = time.perf_counter()
    with owned(stream_seed(c.run.seed, pid, rnd)), costs.phase("work"):  # models/rng
        model = build_model(c, msg.content["arrays"].to_torch_state_dict())
        stats = train_steering(
            model,
            data.x_train,
            data.y_train,
            epochs=c.driving.local_epochs,
            optim=local_optimizer(c),
            batch_size=c.driving.batch_size,
            max_steps=c.driving.local_steps,
            seed=c.run.seed + 1000 * rnd + pid,
            resume=resume,
            step0=step0,
            proximal_mu=float(msg.content["config"].get("proximal-mu", 0.0)),
        )
    fit_s = time.perf_counter() - t0
    keep_optimizers(c, context, stats, step0)
    state = faults.nan_state(shared_state(model, statistics_travel(c)), fault)
    return Message(
        RecordDict(
            {
                "arrays": ArrayRecord(state),
                "metrics": MetricRecord(
                    {
                        NUM_EXAMPLES: len(data.y_train),
                        TRAIN_LOSS: stats["mse"],
                        FIT_S: fit_s,
                        HOLDS_PARTITION: pid,
                    }
                ),
            }
        ),
        reply_to=msg,
    )


def evaluate(msg: Message, context: Context) -> Message:
    """Errors of the model (or of each of several models) on this silo's test split."""
    c = parse(context.run_config)
    torch.set_num_threads(c.run.client_threads)
    with costs.phase("rebuild"):
        data = silo_data(context)
    states = models_in(msg.content["arrays"])
    with costs.phase("work"):
        errors = [evaluate_steering(scored(c, s, data), data.x_test, data.y_test) for s in states]
    if len(states) == 1:
        metrics = {"mse": errors[0][0], "mae": errors[0][1]}
    else:
        metrics = {"mse": [e[0] for e in errors], "mae": [e[1] for e in errors]}
    # the test labels' first two moments: the server's floor, the best constant (strategies/floors.py)
    y = np.asarray(data.y_test, dtype=np.float64)
    metrics.update({LABEL_MEAN: float(y.mean()), LABEL_SQ_MEAN: float((y**2).mean())})
    metrics[HOLDS_PARTITION] = int(context.node_config["partition-id"])
    return Message(
        RecordDict({"metrics": MetricRecord({NUM_EXAMPLES: len(data.y_test), **metrics})}),
        reply_to=msg,
    )
