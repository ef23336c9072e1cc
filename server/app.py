"""The ServerApp (`flwr run .` and simulation.py both run this): dispatch on run config `method`."""
from __future__ import annotations

from logging import INFO

from flwr.app import Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from server import methods
from server.config import ConfigError, check_faults, check_ranges, merged
from strategies.timeouts import AdaptiveTimeout

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = merged(dict(context.run_config))
    name = str(cfg["method"])
    log(INFO, "[fedembodied] method %s, %s rounds", name, cfg["num-server-rounds"])
    if bool(cfg["resume"]) and name not in methods.RESUMABLE:
        raise ConfigError(f"run config 'resume': {name} cannot resume yet (only "
                          f"{', '.join(methods.RESUMABLE)})")
    check_ranges(cfg)
    check_faults(cfg, 2 if methods.get(name).domain == "gridworld" else int(cfg["num-clients"]))
    grid = AdaptiveTimeout(grid, float(cfg["timeout-factor"]), float(cfg["timeout-floor"]))
    methods.server_module(name).run(grid, cfg, name)
