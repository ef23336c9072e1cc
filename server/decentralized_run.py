"""Server side of the decentralized driving methods: `gossip` (DroNet DFL: plain ResNet-8 local
training) and `cdl` (CDL DFL: contrastive-divergence clients). The server only relays."""

from __future__ import annotations

from collections import OrderedDict
from logging import INFO

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.common import log

from config import Config
from config.schema import ConfigError
from models.resnet8 import ResNet8, count_parameters
from models.state import initial_state
from server.recorder import (
    Recorder,
    load_by_parity,
    recorder_for,
    save_by_parity,
    trailing_empty_rounds,
)
from strategies.decentralized import TopologyRelay
from strategies.dp import LocalDPLedger
from strategies.floors import headline_rmse
from strategies.screened_fedavg import evaluates
from strategies.topology import TopologyError, build


def topology_of(c: Config):
    try:
        return build(c.run.topology, c.run.num_clients, c.run.topology_dir or None)
    except TopologyError as e:
        raise ConfigError(f"run config 'topology': {e}") from None


def check_config(c: Config) -> Config:
    """The run's settings, or ConfigError naming the key (the topology included)."""
    topology_of(c)
    return c


def initial_arrays(c: Config, name: str) -> OrderedDict:
    d = c.driving
    return initial_state(
        d.image_size,
        d.channels,
        c.run.seed,
        with_sub=name.startswith("cdl") and c.cdl.variant == "reference",
        statistics=c.driving.statistics_travel,
    )


def save_silos(recorder: Recorder, rnd: int, models: list[dict]) -> None:
    """Every silo's model after round `rnd` (checkpoints/silos_{0,1}.pt)."""
    save_by_parity(
        recorder,
        "silos",
        rnd,
        {
            "models": [
                {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in m.items()} for m in models
            ]
        },
    )


def load_silos(recorder: Recorder, rnd: int) -> list[dict]:
    return [
        {k: v.numpy() for k, v in m.items()}
        for m in load_by_parity(recorder, "silos", rnd)["models"]
    ]


def run(grid, c: Config, name: str) -> None:
    check_config(c)
    topology = topology_of(c)
    rounds = c.run.num_server_rounds
    recorder = recorder_for(c, name)
    n_params = count_parameters(ResNet8(c.driving.image_size, c.driving.channels))
    recorder.write_config(
        num_parameters=n_params,
        topology_labels=list(topology.labels),
        mixing_matrix=topology.mixing.round(6).tolist(),
    )
    cross = topology.num_silos <= c.run.cross_eval_max_silos
    relay = TopologyRelay(
        topology,
        recorder,
        node_wait_s=c.run.node_wait_timeout,
        node_start_s=c.run.node_start_timeout,
        node_return_s=c.run.node_return_timeout,
        timeout_s=c.run.round_timeout,
        cross_eval=cross,
        max_empty_rounds=c.run.max_empty_rounds,
        eval_fraction=c.run.fraction_evaluate,
        eval_cap=c.run.max_evaluate_clients,
        seed=c.run.seed,
        dp_local=LocalDPLedger(c, recorder.out) if c.dp.mode == "local" else None,
    )
    log(
        INFO,
        "[fedembodied] %s on topology %s: %d silos, ResNet-8 with %d parameters, results in %s",
        name,
        topology.name,
        topology.num_silos,
        n_params,
        recorder.out,
    )
    relay.connect(grid)
    models = [{k: v.numpy() for k, v in initial_arrays(c, name).items()}] * topology.num_silos
    done = recorder.last_round()
    if done:
        models = load_silos(recorder, done)
        relay.empty_rounds = trailing_empty_rounds(recorder)
        log(
            INFO,
            "[fedembodied] resuming %s after round %d of %d (silo models of round %d; "
            "a silo's own state, such as a CDL sub-network, starts again)",
            name,
            done,
            rounds,
            done,
        )
    for rnd in range(done + 1, rounds + 1):
        recorder.start_round(rnd)
        models = relay.train_round(grid, rnd, models)
        save_silos(recorder, rnd, models)
        if evaluates(rnd, c.run.eval_period, rounds):
            recorder.add_silo_rows(relay.evaluate_round(grid, rnd, models))
        average = {
            k: np.mean([m[k] for m in models], axis=0).astype(models[0][k].dtype) for k in models[0]
        }
        row = recorder.end_round(
            ArrayRecord(OrderedDict((k, torch.from_numpy(v)) for k, v in average.items()))
        )
        log(
            INFO,
            "[fedembodied] round %d/%d  silo_rmse=%.4f  avg_rmse=%.4f  consensus=%.3g  "
            "train_loss=%.4f  silos=%d  wall=%.2fs",
            rnd,
            rounds,
            row.get(headline_rmse(row), np.nan),  # each silo's model, mean over silos
            row.get("avg_rmse", np.nan),
            row.get("consensus", np.nan),
            row.get("train_loss", np.nan),
            row["n_clients"],
            row["wall_s"],
        )
    for i, m in enumerate(models):
        torch.save(
            {k: torch.from_numpy(v) for k, v in m.items()},
            recorder.out / "checkpoints" / f"final_silo_{i:03d}.pt",
        )
