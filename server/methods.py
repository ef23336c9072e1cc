"""The methods this app runs: name -> (one-line description, server runner, client handler).

The single place where a method is registered; the launcher's --help, the ServerApp and the
ClientApp all read it. Runners and handlers are imported lazily so listing methods is cheap.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    server: str  # "module:function(grid, cfg, method_name)"
    client: str  # module with train(msg, ctx), evaluate(msg, ctx), query(msg, ctx)
    domain: str  # which data the method runs on ("driving", ...)


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("fedavg", "FedAvg of a ResNet-8 steering regressor over non-IID driving silos",
           "server.driving:run", "clients.driving", "driving"),
    Method("fedprox", "FedProx (proximal term mu on the client) on the same driving silos",
           "server.driving:run", "clients.driving", "driving"),
]}


def get(name: str) -> Method:
    if name not in METHODS:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return METHODS[name]


def server_runner(name: str):
    module, fn = get(name).server.split(":")
    return getattr(importlib.import_module(module), fn)


def client_handler(name: str):
    return importlib.import_module(get(name).client)
