"""Driving silos (embedded, or DroNet-style logs under `driving.data-dir`): one node per silo.

`flwr run` on a federation follows the nodes that connect (strategies/nodes.fit_to_federation),
except on a peer topology read from a GML graph, whose nodes fix the silos themselves.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from config.schema import ConfigError

FLAGS: tuple[str, ...] = ()  # no launcher flags of its own
FRACTION_KEY = "fraction-train"  # what --fraction sets


def parties(c, asked: int | None) -> int | None:
    """A GML topology's silo count (--num-clients may only agree with it); else None: the run
    config's `num-clients`."""
    from strategies.topology import TopologyError, num_silos_of

    try:
        n = num_silos_of(c.run.topology, c.run.topology_dir or None)
    except TopologyError as e:
        raise ConfigError(f"--topology: {e}") from None
    if n is not None and asked is not None and asked != n:
        raise ConfigError(
            f"--num-clients {asked} contradicts --topology {c.run.topology} ({n} silos)"
        )
    return n


def check_data(c) -> None:
    """The data folder holds a silo for every client (before anything starts)."""
    if not c.driving.data_dir:
        return
    from envs.driving_logs import validate_data_dir
    from envs.errors import DataError

    try:
        validate_data_dir(Path(c.driving.data_dir), c.run.num_clients)
    except DataError as e:
        raise ConfigError(f"driving.data-dir: {e}") from None


def check_policy(c, policy) -> None:
    """The silos' policy keys (cdl.share-sub-network, dp.*) are each silo's to enforce
    at each message; no run config here asks what the secure default refuses by itself."""


def fit(grid, c):
    """The run's `num-clients` fitted to the connected nodes, unless a GML graph fixes them."""
    from config import methods
    from strategies.nodes import fit_to_federation

    graph = c.run.topology not in ("ring", "complete")
    if methods.get(c.run.method).releases == "peer-weights" and graph:
        return c
    n = fit_to_federation(
        grid, c.run.num_clients, c.run.node_wait_timeout, c.run.node_start_timeout
    )
    return dataclasses.replace(c, run=dataclasses.replace(c.run, num_clients=n))


def partitions(c) -> int:
    return c.run.num_clients


def after_run(out: Path) -> Path | None:
    return None
