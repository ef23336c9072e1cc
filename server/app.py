"""The ServerApp (`flwr run .` and simulation.py both run this): dispatch on run config `method`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from logging import INFO
from pathlib import Path

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from config import methods, parse
from config.schema import ConfigError
from server import run_lock
from server.plots import plot_runs
from server.recorder import finished_rounds, out_dir
from strategies.timeouts import AdaptiveTimeout

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    c = parse(context.run_config)
    methods.check_dp(c)
    run, name = c.run, c.run.method
    out = out_dir(run.out_dir, name)  # fixed once: "" names a new folder at each call
    c = dataclasses.replace(c, run=dataclasses.replace(run, out_dir=str(out)))
    log(INFO, "[fedembodied] method %s, %s rounds", name, run.num_server_rounds)
    if run.resume:
        check_resume_round(run.out_dir, run.resume_round)
    domain = methods.domain_of(name)  # what the method's data fixes (domains/)
    c = domain.fit(grid, c)
    c.faults.check_partitions(domain.partitions(c))
    grid = AdaptiveTimeout(grid, c.run.timeout_factor, c.run.timeout_floor)
    with run_lock.holding(out, int(context.run_id)), server_log(out):
        methods.server_module(name).run(grid, c, name)
        if c.run.plots:
            written = plot_runs([out], out / "plots")
            log(
                INFO,
                "[fedembodied] plots: %s (%d PNGs, summary.png first)",
                out / "plots",
                len(written),
            )
    # every result is written: simulation.py may now stop client calls still running (a hung one)
    log(INFO, "[fedembodied] done: %s", out)


@contextlib.contextmanager
def server_log(out: Path):
    """What the ServerApp logs, also in out-dir/server.log: plain `flwr run .` leaves its log in
    the SuperLink's stream only (`flwr log RUN_ID`); simulation.py also keeps the whole stream,
    ClientApps included, in flower.log."""
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "server.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        yield
    except BaseException as e:  # what ended the run, in the run's own log too
        logger.exception("[fedembodied] the ServerApp stopped: %s: %s", type(e).__name__, e)
        raise
    finally:
        logger.removeHandler(handler)
        handler.close()


def check_resume_round(folder: str, resume_round: int) -> None:
    """Clients reload their state as of run config `resume-round`; it must be the round the
    results folder ends at, or server and clients would continue from different rounds."""
    path = Path(folder) / "rounds.csv"
    done = finished_rounds(path) if path.is_file() else 0
    if resume_round != done:
        raise ConfigError(
            f"run config 'resume-round' is {resume_round}, but {path} ends "
            f"at round {done}: set resume-round={done}"
        )
