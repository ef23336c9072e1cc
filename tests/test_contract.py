"""Every registered method meets the typed contract (contracts/method.py), and the places
that must not keep their own list of methods read the registry (issue 45 item 1)."""

from __future__ import annotations

import ast
import types

import pytest

from config.methods import DOMAINS, METHODS, Method
from contracts.method import ClientHandler, DomainWiring, problems
from tests.conftest import ROOT


@pytest.mark.parametrize("name", list(METHODS))
def test_every_registered_method_meets_the_contract(name):
    assert problems(METHODS[name]) == []


def test_the_contract_catches_what_a_method_lacks():
    bad = Method(name="toy", description="a toy", server="json", client="clients.policy",
                 domain="moon", settings=("nope",), releases="secrets", dp_modes=("central",))  # fmt: skip
    with pytest.raises(TypeError):  # every field is named at its registry line (issue 66)
        Method("toy", "a toy", "json", "clients.policy", "moon", ("nope",), "secrets")
    said = "\n".join(problems(bad))
    assert "domain 'moon' not one of ('driving', 'gridworld', 'vln')" in said
    for why in ("json is not a ServerRunner", "clients.policy is not a ClientHandler",
                "unknown settings section 'nope'", "domain 'moon'", "releases 'secrets'",
                "must include 'none'"):  # fmt: skip
        assert why in said
    assert isinstance(types.SimpleNamespace(train=id, evaluate=id), ClientHandler)


# what a reader must take from the registry: method names, domains, runner and handler modules
NAMES = (
    {*METHODS, *DOMAINS}
    | {m.server for m in METHODS.values()}
    | {m.client for m in METHODS.values()}
)
READERS = ["simulation.py", "server/app.py", "clients/app.py", "clients/policy.py",
           "config/run.py", "launch/flower_simulation.py"]  # fmt: skip


@pytest.mark.parametrize("path", READERS)
def test_the_launcher_server_app_checks_and_policy_name_no_method(path):
    """They read config/methods.py; a method, a domain or a runner's module named in their code
    (not a docstring or a help text) would be a second list to keep in step (issue 66 item 5:
    a new domain is its own module in domains/ and its registry lines)."""
    tree = ast.parse((ROOT / path).read_text())
    tables = {  # the policy's per-method sections: what each may release, not a method list
        id(k) for n in ast.walk(tree) if isinstance(n, ast.Assign)
        and any(getattr(t, "id", "") == "_SECTIONS" for t in n.targets)
        for k in n.value.keys
    }  # fmt: skip
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef) and n.body
            and isinstance(n.body[0], ast.Expr)}  # fmt: skip
    named = [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and n.value in NAMES and id(n) not in docs | tables
    ]
    assert not named, f"{path} names methods: {named}"


def test_the_policy_sections_are_registered_methods():
    from clients import policy

    assert set(policy._SECTIONS) - {"dp"} <= set(METHODS)
    assert policy.METHODS == tuple(METHODS)


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_every_domain_module_is_a_wiring_and_a_module_without_one_is_not(domain):
    """Each registry domain names a module with parties, check_data, check_policy, fit,
    partitions and after_run; a module lacking one of them fails the contract."""
    import importlib

    assert isinstance(importlib.import_module(DOMAINS[domain]), DomainWiring)
    lacks = types.SimpleNamespace(FLAGS=(), FRACTION_KEY="fraction-train", parties=id)
    assert not isinstance(lacks, DomainWiring)


def test_the_server_app_asks_the_domain_what_the_federation_fixes(tmp_path):
    """FedRL's faults are checked against its two parties whatever num-clients says, and a
    driving run's num-clients follows the nodes that connect (server/app.py through domains/)."""
    from config import parse
    from config.methods import domain_of
    from config.schema import merged

    c = parse(merged({"method": "fedrl", "num-clients": 7}))
    assert domain_of("fedrl").partitions(c) == 2 and domain_of("fedrl").parties(c, None) == 2
    with pytest.raises(Exception, match="exactly two parties"):
        domain_of("fedrl").parties(c, 3)
    c = parse(merged({"method": "fedavg", "num-clients": 7}))
    assert domain_of("fedavg").parties(c, None) is None and domain_of("fedavg").partitions(c) == 7

    from clients.app import app
    from tests.conftest import InProcessGrid

    cfg = merged({"method": "fedavg", "num-clients": 7, "driving.image-size": 16})
    fitted = domain_of("fedavg").fit(InProcessGrid(app, cfg, 3), parse(cfg))  # 3 nodes came
    assert fitted.run.num_clients == 3
