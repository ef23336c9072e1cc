"""Every registered method meets the typed contract (contracts/method.py), and the places
that must not keep their own list of methods read the registry (issue 45 item 1)."""

from __future__ import annotations

import ast
import types

import pytest

from config.methods import METHODS, Method
from contracts.method import ClientHandler, problems
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
    for why in ("json is not a ServerRunner", "clients.policy is not a ClientHandler",
                "unknown settings section 'nope'", "domain 'moon'", "releases 'secrets'",
                "must include 'none'"):  # fmt: skip
        assert why in said
    assert isinstance(types.SimpleNamespace(train=id, evaluate=id), ClientHandler)


READERS = ["simulation.py", "server/app.py", "clients/app.py", "clients/policy.py",
           "config/run.py", "launch/flower_simulation.py"]  # fmt: skip


@pytest.mark.parametrize("path", READERS)
def test_the_launcher_server_app_checks_and_policy_name_no_method(path):
    """They read config/methods.py; a method named in their code (not a docstring or a help
    text) would be a second list to keep in step."""
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
        if isinstance(n, ast.Constant) and n.value in METHODS and id(n) not in docs | tables
    ]
    assert not named, f"{path} names methods: {named}"


def test_the_policy_sections_are_registered_methods():
    from clients import policy

    assert set(policy._SECTIONS) - {"dp"} <= set(METHODS)
    assert policy.METHODS == tuple(METHODS)
