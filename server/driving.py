"""Server side of the server-based driving methods: one global model aggregated by screened
FedAvg: `fedavg`, `fedprox`, and `cdl-sfl` (CDL clients under a FedAvg server)."""

from __future__ import annotations

from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import log

from models.resnet8 import ResNet8, count_parameters, feature_map_size
from models.state import initial_state
from server.config import ConfigError, positive
from server.recorder import Recorder, load_round, out_dir, trailing_empty_rounds
from strategies.robust import AGGREGATORS
from strategies.screened_fedavg import ScreenedFedAvg, ScreenedFedProx


def check_config(cfg: dict) -> None:
    """ConfigError naming the key if a driving run cannot start with this config."""
    for key in (
        "num-server-rounds",
        "num-clients",
        "driving.train-per-silo",
        "driving.test-per-silo",
        "driving.local-epochs",
        "driving.batch-size",
    ):
        positive(cfg, key)
    positive(cfg, "driving.lr", float)
    positive(cfg, "eval-every")
    positive(cfg, "max-empty-rounds")
    if int(cfg["driving.local-steps"]) < 0:
        raise ConfigError("run config 'driving.local-steps' must be >= 0")
    if not 0 < float(cfg["fraction-train"]) <= 1:
        raise ConfigError(
            f"run config 'fraction-train' must be in (0, 1], got {cfg['fraction-train']}"
        )
    if int(cfg["driving.channels"]) not in (1, 3):
        raise ConfigError(
            f"run config 'driving.channels' must be 1 or 3, got {cfg['driving.channels']}"
        )
    try:
        feature_map_size(int(cfg["driving.image-size"]))
    except ValueError as e:
        raise ConfigError(f"run config 'driving.image-size': {e}") from None
    if float(cfg["fedprox.proximal-mu"]) < 0:
        raise ConfigError("run config 'fedprox.proximal-mu' must be >= 0")
    if str(cfg["driving.optimizer"]) not in ("sgd", "adam"):
        raise ConfigError(
            f"run config 'driving.optimizer' must be sgd or adam, got {cfg['driving.optimizer']!r}"
        )
    if str(cfg["cdl.variant"]) not in ("paper", "reference"):
        raise ConfigError(
            f"run config 'cdl.variant' must be paper or reference, got {cfg['cdl.variant']!r}"
        )
    if not 0 <= float(cfg["cdl.beta"]) <= 1:
        raise ConfigError(f"run config 'cdl.beta' must be in [0, 1], got {cfg['cdl.beta']}")
    positive(cfg, "cdl.temperature", float)
    if str(cfg["aggregator"]) not in AGGREGATORS:
        raise ConfigError(
            f"run config 'aggregator' must be one of {', '.join(AGGREGATORS)}, "
            f"got {cfg['aggregator']!r}"
        )
    if not 0 <= float(cfg["trim-fraction"]) < 0.5:
        raise ConfigError(
            f"run config 'trim-fraction' must be in [0, 0.5), got {cfg['trim-fraction']}"
        )
    if float(cfg["max-update-norm"]) < 0:
        raise ConfigError(
            f"run config 'max-update-norm' must be >= 0 (0 = off), got {cfg['max-update-norm']}"
        )
    if not 0 <= float(cfg["driving.non-iid"]) <= 1:
        raise ConfigError(
            f"run config 'driving.non-iid' must be in [0, 1], got {cfg['driving.non-iid']}"
        )
    for key, allowed in (
        ("driving.lr-decay", ("none", "sqrt")),
        ("driving.optimizer-state", ("round", "silo")),
    ):
        if str(cfg[key]) not in allowed:
            raise ConfigError(
                f"run config {key!r} must be {' or '.join(allowed)}, got {cfg[key]!r}"
            )
    for key in ("driving.weight-decay", "driving.grad-clip"):
        if float(cfg[key]) < 0:
            raise ConfigError(f"run config {key!r} must be >= 0, got {cfg[key]}")


def run(grid, cfg: dict, name: str) -> None:
    check_config(cfg)
    rounds = int(cfg["num-server-rounds"])
    num_clients = int(cfg["num-clients"])
    fraction = float(cfg["fraction-train"])
    model = ResNet8(int(cfg["driving.image-size"]), int(cfg["driving.channels"]))
    recorder = Recorder(out_dir(cfg, name), cfg)
    recorder.write_config(num_parameters=count_parameters(model))
    common = dict(
        recorder=recorder,
        num_clients=num_clients,
        seed=int(cfg["seed"]),
        node_wait_s=float(cfg["node-wait-timeout"]),
        fraction_train=fraction,
        fraction_evaluate=float(cfg["fraction-evaluate"]),
        max_evaluate_nodes=int(cfg["max-evaluate-clients"]),
        min_train_nodes=1,
        min_evaluate_nodes=1,
        eval_every=int(cfg["eval-every"]),
        num_rounds=rounds,
        max_empty_rounds=positive(cfg, "max-empty-rounds"),
        aggregator=str(cfg["aggregator"]),
        trim=float(cfg["trim-fraction"]),
        max_update_norm=float(cfg["max-update-norm"]),
    )
    if name == "fedprox":
        strategy = ScreenedFedProx(proximal_mu=float(cfg["fedprox.proximal-mu"]), **common)
    else:
        strategy = ScreenedFedAvg(**common)

    def end_of_round(server_round: int, arrays: ArrayRecord):
        if server_round == 0:
            return None
        server_round += strategy.round_offset
        row = recorder.end_round(arrays)
        log(
            INFO,
            "[fedembodied] round %d/%d  rmse=%.4f  mae=%.4f  silo_rmse_mean=%.4f  "
            "train_loss=%.4f  clients=%d  wall=%.2fs",
            server_round,
            rounds,
            row.get("rmse", float("nan")),
            row.get("mae", float("nan")),
            row.get("silo_rmse_mean", float("nan")),
            row.get("train_loss", float("nan")),
            row["n_clients"],
            row["wall_s"],
        )
        return None

    log(
        INFO,
        "[fedembodied] %s: %d silos, ResNet-8 with %d parameters, results in %s",
        name,
        num_clients,
        count_parameters(model),
        recorder.out,
    )
    initial = ArrayRecord(
        initial_state(
            int(cfg["driving.image-size"]),
            int(cfg["driving.channels"]),
            int(cfg["seed"]),
            with_sub=name == "cdl-sfl" and cfg["cdl.variant"] == "reference",
        )
    )
    done = recorder.last_round()
    if done:  # resume: the global model of the last finished round, and the empty-round count
        initial = ArrayRecord(load_round(recorder, done))
        strategy.round_offset = done
        strategy.empty_rounds = trailing_empty_rounds(recorder)
        log(INFO, "[fedembodied] resuming %s after round %d of %d", name, done, rounds)
    strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=rounds - done,
        timeout=float(cfg["round-timeout"]),
        train_config=ConfigRecord(),
        evaluate_fn=end_of_round,
    )
