"""What a method provides, typed: the contract every entry of the registry
(config/methods.py) meets, checked for each by tests/test_contract.py.

A method is
- settings: the run-config sections it reads (`Method.settings`, classes in config/), with
  `check_config(c)` on its runner for what needs more than one key or a file;
- a federation: which parties it needs (`Method.domain`, a `DomainWiring` module in
  domains/: one node per silo, FedRL's two parties alpha and beta, one node per FedVLN house)
  and what leaves each (`Method.releases`, the DP modes it supports: `Method.dp_modes`);
- a server runner (`ServerRunner`, a module in server/) and a client handler
  (`ClientHandler`, a module in clients/), imported lazily by name.

A fourth method is its own runner and handler files, its settings class if it has new keys,
and one `Method(...)` entry, every field named, in the registry; a new kind of data is one
more module in domains/ and its line in the registry's `DOMAINS`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from flwr.app import Context, Message

RELEASES = ("weights", "peer-weights", "q")  # what leaves a party (clients/dp.py, policy)


@runtime_checkable
class ServerRunner(Protocol):
    """server/<method>_run.py: the whole run on Flower's grid, and its config checks."""

    def run(self, grid: Any, c: Any, name: str) -> None: ...

    def check_config(self, c: Any) -> Any: ...


@runtime_checkable
class DomainWiring(Protocol):
    """domains/<domain>.py: what a kind of data fixes about a run. The launcher calls
    `parties`, `check_data` and `check_policy` before anything starts (ConfigError naming the
    flag or key), and `after_run` once the run has finished; the ServerApp calls `fit` and
    `partitions`."""

    FLAGS: tuple[str, ...]  # the launcher's domain flags it accepts (FedVLN: stage, variant)
    FRACTION_KEY: str  # the run-config key --fraction sets

    def parties(self, c: Any, asked: int | None) -> int | None: ...  # None: `num-clients`

    def check_data(self, c: Any) -> None: ...

    # the nodes' policy (clients/policy.Policy) refuses nothing the run asks: ConfigError
    # naming both keys, before anything starts (each node enforces it again at each message)
    def check_policy(self, c: Any, policy: Any) -> None: ...

    def fit(self, grid: Any, c: Any) -> Any: ...  # the Config fitted to the nodes it meets

    def partitions(self, c: Any) -> int: ...  # how many partitions the nodes must cover

    def after_run(self, out: Any) -> Any: ...  # a file written from the finished run, or None


@runtime_checkable
class ClientHandler(Protocol):
    """clients/<method>_client.py: one reply per message, under the node's policy
    (clients/app.py calls it; `privacy(context)` is optional, for the audit log)."""

    def train(self, msg: Message, context: Context) -> Message: ...

    def evaluate(self, msg: Message, context: Context) -> Message: ...


def problems(method) -> list[str]:
    """What a registry entry lacks to meet the contract ([] when it meets it)."""
    import importlib

    from config import SECTIONS
    from config.dp import MODES
    from config.methods import DOMAINS

    out = []
    for kind, module, proto in (("server", method.server, ServerRunner),
                                ("client", method.client, ClientHandler)):  # fmt: skip
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            out.append(f"{method.name}: {kind} module {module} does not import ({e})")
            continue
        if not isinstance(mod, proto):
            out.append(f"{method.name}: {module} is not a {proto.__name__}")
    out += [f"{method.name}: unknown settings section {s!r}" for s in method.settings
            if s not in SECTIONS]  # fmt: skip
    if method.domain not in DOMAINS:
        out.append(f"{method.name}: domain {method.domain!r} not one of {tuple(DOMAINS)}")
    elif not isinstance(importlib.import_module(DOMAINS[method.domain]), DomainWiring):
        out.append(f"{method.name}: {DOMAINS[method.domain]} is not a DomainWiring")
    if method.releases not in RELEASES:
        out.append(f"{method.name}: releases {method.releases!r} not one of {RELEASES}")
    if any(m not in MODES for m in method.dp_modes) or "none" not in method.dp_modes:
        out.append(f"{method.name}: dp_modes {method.dp_modes} must include 'none', of {MODES}")
    if len(method.dp_modes) > 1 and "dp" not in method.settings:
        out.append(f"{method.name}: supports DP but does not read the 'dp' section")
    return out
