"""Server side of the decentralized driving methods: `gossip` (DroNet DFL: plain ResNet-8 local
training) and `cdl` (CDL DFL: contrastive-divergence clients). The server only relays."""

from __future__ import annotations

from collections import OrderedDict
from logging import INFO

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.common import log

from models.resnet8 import ResNet8, count_parameters
from models.state import initial_state
from server.config import ConfigError, positive
from server.driving import check_config as check_driving_config
from server.recorder import Recorder, load_by_parity, out_dir, save_by_parity, trailing_empty_rounds
from strategies.decentralized import TopologyRelay
from strategies.screened_fedavg import evaluates
from strategies.topology import TopologyError, build


def topology_of(cfg: dict):
    try:
        return build(
            str(cfg["topology"]), int(cfg["num-clients"]), str(cfg["topology-dir"]) or None
        )
    except TopologyError as e:
        raise ConfigError(f"run config 'topology': {e}") from None


def check_config(cfg: dict) -> None:
    check_driving_config(cfg)
    topology_of(cfg)


def initial_arrays(cfg: dict, name: str) -> OrderedDict:
    return initial_state(
        int(cfg["driving.image-size"]),
        int(cfg["driving.channels"]),
        int(cfg["seed"]),
        with_sub=name.startswith("cdl") and cfg["cdl.variant"] == "reference",
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


def run(grid, cfg: dict, name: str) -> None:
    check_config(cfg)
    topology = topology_of(cfg)
    rounds = int(cfg["num-server-rounds"])
    recorder = Recorder(out_dir(cfg, name), cfg)
    n_params = count_parameters(
        ResNet8(int(cfg["driving.image-size"]), int(cfg["driving.channels"]))
    )
    recorder.write_config(
        num_parameters=n_params,
        topology_labels=list(topology.labels),
        mixing_matrix=topology.mixing.round(6).tolist(),
    )
    cross = topology.num_silos <= int(cfg["cross-eval-max-silos"])
    relay = TopologyRelay(
        topology,
        recorder,
        node_wait_s=float(cfg["node-wait-timeout"]),
        timeout_s=float(cfg["round-timeout"]),
        cross_eval=cross,
        max_empty_rounds=positive(cfg, "max-empty-rounds"),
        eval_fraction=float(cfg["fraction-evaluate"]),
        eval_cap=int(cfg["max-evaluate-clients"]),
        seed=int(cfg["seed"]),
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
    models = [{k: v.numpy() for k, v in initial_arrays(cfg, name).items()}] * topology.num_silos
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
        if evaluates(rnd, int(cfg["eval-every"]), rounds):
            recorder.add_silo_rows(relay.evaluate_round(grid, rnd, models))
        average = {
            k: np.mean([m[k] for m in models], axis=0).astype(models[0][k].dtype) for k in models[0]
        }
        row = recorder.end_round(
            ArrayRecord(OrderedDict((k, torch.from_numpy(v)) for k, v in average.items()))
        )
        log(
            INFO,
            "[fedembodied] round %d/%d  rmse=%.4f  avg_rmse=%.4f  consensus=%.3g  "
            "train_loss=%.4f  silos=%d  wall=%.2fs",
            rnd,
            rounds,
            row.get("rmse", np.nan),
            row.get("avg_rmse", np.nan),
            row.get("consensus_distance", np.nan),
            row.get("train_loss", np.nan),
            row["n_clients"],
            row["wall_s"],
        )
    for i, m in enumerate(models):
        torch.save(
            {k: torch.from_numpy(v) for k, v in m.items()},
            recorder.out / "checkpoints" / f"final_silo_{i:03d}.pt",
        )
