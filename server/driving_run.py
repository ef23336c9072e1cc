"""Server side of the server-based driving methods: one global model aggregated by screened
FedAvg: `fedavg`, `fedprox`, and `cdl-sfl` (CDL clients under a FedAvg server)."""

from __future__ import annotations

from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import log

from config import Config
from config.schema import ConfigError
from models.resnet8 import ResNet8, count_parameters
from models.state import initial_state
from server.recorder import load_round, recorder_for, trailing_empty_rounds
from server.strategy_args import budget_stops, central_dp, screened_args
from strategies.screened_fedavg import ScreenedFedAvg, ScreenedFedProx


def check_config(c: Config) -> Config:
    """The run's settings (every range and choice is declared in config/ and checked by
    `parse`); central DP needs the plain mean (a median's sensitivity is not C / m)."""
    if c.dp.mode == "central" and c.run.aggregator != "mean":
        raise ConfigError(
            f"run config 'dp.mode' central needs 'aggregator' mean, not {c.run.aggregator!r}: "
            "the noise is calibrated to the mean's sensitivity C / m"
        )
    return c


def run(grid, c: Config, name: str) -> None:
    check_config(c)
    d = c.driving
    rounds, num_clients = c.run.num_server_rounds, c.run.num_clients
    model = ResNet8(d.image_size, d.channels)
    recorder = recorder_for(c, name)
    recorder.write_config(num_parameters=count_parameters(model))
    strategy = _strategy(c, name, recorder)

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
            d.image_size,
            d.channels,
            c.run.seed,
            with_sub=name == "cdl-sfl" and c.cdl.variant == "reference",
            statistics=d.statistics_travel,
        )
    )
    done = recorder.last_round()
    if done:  # resume: the global model of the last finished round, and the empty-round count
        initial = ArrayRecord(load_round(recorder, done))
        strategy.round_offset = done
        strategy.empty_rounds = trailing_empty_rounds(recorder)
        log(INFO, "[fedembodied] resuming %s after round %d of %d", name, done, rounds)
    if c.dp.mode == "central":  # Flower's DP wrapper (strategies/dp.py)
        strategy = central_dp(strategy, c, recorder)
    with budget_stops(recorder):
        strategy.start(
            grid=grid,
            initial_arrays=initial,
            num_rounds=rounds - done,
            timeout=c.run.round_timeout,
            train_config=ConfigRecord(),
            evaluate_fn=end_of_round,
        )


def _strategy(c: Config, name: str, recorder):
    """The screened FedAvg (or FedProx) the run config asks for, recording into `recorder`."""
    common = dict(
        screened_args(c, recorder),
        num_clients=c.run.num_clients,
        fraction_train=c.run.fraction_train,
        aggregator=c.run.aggregator,
        trim=c.run.trim_fraction,
        max_update_norm=c.run.max_update_norm,
    )
    if name == "fedprox":
        return ScreenedFedProx(proximal_mu=c.fedprox.proximal_mu, **common)
    return ScreenedFedAvg(**common)
