"""The ServerApp (`flwr run .` and simulation.py both run this): dispatch on run config `method`."""

from __future__ import annotations

from logging import INFO
from pathlib import Path

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from server import methods
from server.config import ConfigError, check_faults, check_ranges, merged
from server.recorder import out_dir
from strategies.nodes import fit_to_federation
from strategies.timeouts import AdaptiveTimeout

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = merged(dict(context.run_config))
    name = str(cfg["method"])
    log(INFO, "[fedembodied] method %s, %s rounds", name, cfg["num-server-rounds"])
    check_ranges(cfg)
    if bool(cfg["resume"]):
        check_resume_round(cfg)
    graph = methods.get(name).server == "server.decentralized" and str(cfg["topology"]) not in (
        "ring",
        "complete",
    )  # a GML graph fixes the silos itself
    if methods.get(name).domain == "driving" and not graph:
        cfg["num-clients"] = fit_to_federation(
            grid, int(cfg["num-clients"]), float(cfg["node-wait-timeout"])
        )
    check_faults(cfg, 2 if methods.get(name).domain == "gridworld" else int(cfg["num-clients"]))
    grid = AdaptiveTimeout(grid, float(cfg["timeout-factor"]), float(cfg["timeout-floor"]))
    methods.server_module(name).run(grid, cfg, name)
    # every result is written: simulation.py may now stop client calls still running (a hung one)
    log(INFO, "[fedembodied] done: %s", out_dir(cfg, name))


def check_resume_round(cfg: dict) -> None:
    """Clients reload their state as of run config `resume-round`; it must be the round the
    results folder ends at, or server and clients would continue from different rounds."""
    import pandas as pd

    path = Path(str(cfg["out-dir"])) / "rounds.csv"
    done = int(pd.read_csv(path)["round"].max()) if path.is_file() else 0
    if int(cfg["resume-round"]) != done:
        raise ConfigError(
            f"run config 'resume-round' is {cfg['resume-round']}, but {path} ends "
            f"at round {done}: set resume-round={done}"
        )
