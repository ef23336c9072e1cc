"""The methods this app runs: the registry, the only list of them.

A method is one `Method` line here plus its own runner (server/) and handler (clients/), which
meet the typed contract in contracts/method.py (tests/test_contract.py checks every entry).
The launcher's --help and checks, the ServerApp, the ClientApp, the run-config checks and the
node policy all read this registry. Runners and handlers are imported lazily so listing
methods is cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.fedvln_recipe import DEFAULT_ROUNDS, stage_rounds


@dataclass(frozen=True, kw_only=True)
class Method:
    """One method, every field named at its registry line (a positional list of eight is
    unreadable, issue 66)."""

    name: str
    description: str
    server: str  # module with run(grid, c: Config, method_name) and check_config(c)
    client: str  # module with train(msg, ctx), evaluate(msg, ctx), query(msg, ctx)
    domain: str  # which data the method runs on: a key of DOMAINS below
    settings: tuple[str, ...]  # the config sections it reads besides `run` and `faults`
    releases: str  # what leaves a party: "weights" (through the server), "peer-weights", "q"
    dp_modes: tuple[str, ...] = ("none",)  # the `dp.mode`s it supports (config/dp.py)
    eval_every: int = 1  # run config `eval-every = 0` means this (FedRL: scoring is costly)
    # run config `num-server-rounds = 0` means this: a number, or one from the parsed config
    rounds: int | Callable[[Any], int] = DEFAULT_ROUNDS


METHODS: dict[str, Method] = {
    m.name: m
    for m in [
        Method(
            name="fedavg",
            description="FedAvg of a ResNet-8 steering regressor over non-IID driving silos",
            server="server.driving_run",
            client="clients.driving_client",
            domain="driving",
            settings=("driving", "dp"),
            releases="weights",
            dp_modes=("none", "central", "local"),
        ),
        Method(
            name="fedprox",
            description="FedProx (proximal term mu on the client) on the same driving silos",
            server="server.driving_run",
            client="clients.driving_client",
            domain="driving",
            settings=("driving", "fedprox", "dp"),
            releases="weights",
            dp_modes=("none", "central", "local"),
        ),
        Method(
            name="gossip",
            description="decentralized ResNet-8 on a peer topology, server as relay (DroNet DFL)",
            server="server.decentralized_run",
            client="clients.driving_client",
            domain="driving",
            settings=("driving", "dp"),
            releases="peer-weights",
            dp_modes=("none", "local"),
        ),
        Method(
            name="cdl",
            description="CDL: Siamese backbone/sub-network, contrastive-divergence loss, peer topology",
            server="server.decentralized_run",
            client="clients.cdl_client",
            domain="driving",
            settings=("driving", "cdl", "dp"),
            releases="peer-weights",
            dp_modes=("none", "local"),
        ),
        Method(
            name="cdl-sfl",
            description="CDL clients under a FedAvg server (CDL SFL)",
            server="server.driving_run",
            client="clients.cdl_client",
            domain="driving",
            settings=("driving", "cdl", "dp"),
            releases="weights",
            dp_modes=("none", "central", "local"),
        ),
        Method(
            name="fedrl",
            description="FedRL: two parties (alpha with rewards, beta without) exchanging noised Q "
            "outputs through a shared MLP, Grid-World",
            server="server.fedrl_run",
            client="clients.fedrl_client",
            domain="gridworld",
            settings=("fedrl",),
            releases="q",
            eval_every=10,  # scoring the valid maps is most of a round's time (docs/fedrl.md)
        ),
        Method(
            name="fedvln",
            description="FedVLN: one client per house; federated follower, speaker, augmentation "
            "and pre-exploration (--stage, --variant)",
            server="server.fedvln_run",
            client="clients.fedvln_client",
            domain="vln",
            settings=("fedvln", "dp"),
            releases="weights",
            dp_modes=("none", "central", "local"),
            rounds=lambda c: stage_rounds(c.fedvln),  # the speaker grounds at 180 (recipe)
        ),
    ]
}


# which data a method runs on, and the module that says what that data fixes about a run
# (parties, data checks, fitting to the federation: contracts/method.py `DomainWiring`)
DOMAINS = {
    "driving": "domains.driving",  # one node per silo; a GML graph fixes the silos
    "gridworld": "domains.gridworld",  # FedRL's two parties, alpha and beta
    "vln": "domains.vln",  # one client per FedVLN house
}


def get(name: str) -> Method:
    if name not in METHODS:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return METHODS[name]


def default_rounds(c) -> int:
    """What `num-server-rounds = 0` means for the parsed config `c`'s method."""
    rounds = get(c.run.method).rounds
    return rounds(c) if callable(rounds) else rounds


def server_module(name: str):
    """The module with `run(grid, c, name)` and `check_config(c)` (c: the parsed Config)."""
    return importlib.import_module(get(name).server)


def domain_of(name: str):
    """The module of method `name`'s domain (domains/): parties, check_data, fit, ..."""
    return importlib.import_module(DOMAINS[get(name).domain])


def client_handler(name: str):
    return importlib.import_module(get(name).client)


_NO_DP = {
    "peer-weights": "a peer topology has no server aggregate for Flower's central-DP wrapper to "
    "noise: each silo's model goes to its neighbours as it is, so only party-side (local) DP "
    "protects it",
    "q": "FedRL noises its released Q outputs itself (fedrl.sigma, fedrl.clip)",
}


def check_dp(c) -> None:
    """The run's `dp.mode` is one its method supports; ConfigError saying why not."""
    m = get(c.run.method)
    if c.dp.mode not in m.dp_modes:
        from config.schema import ConfigError

        raise ConfigError(
            f"run config 'dp.mode' {c.dp.mode!r}: method {m.name} supports "
            f"{', '.join(m.dp_modes)} ({_NO_DP.get(m.releases, '')})"
        )
