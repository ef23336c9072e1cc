"""`flower-simulation` (launch/flower_simulation.py): the classic flags become the launcher's."""

import argparse

import pytest

from launch import flower_simulation as fs
from tests.conftest import ROOT


def _ns(**kw):
    base = {"app": ".", "num_supernodes": None, "run_config": "", "backend_config": ""}
    return argparse.Namespace(**{**base, **kw})


def test_classic_flags_become_the_launchers():
    args = fs.translate(
        _ns(
            num_supernodes=3,
            run_config="method='fedrl' num-server-rounds=4 fedrl.sigma=2.0",
            backend_config='{"client_resources": {"num_cpus": 2, "num_gpus": 0.5}}',
        ),
        fs.default_method(ROOT),
    )
    assert args == ["fedrl", "--rounds", "4", "--num-clients", "3", "--num-cpus", "2",
                    "--num-gpus", "0.5", "--run-config", "fedrl.sigma=2.0"]  # fmt: skip
    assert fs.translate(_ns(), fs.default_method(ROOT)) == ["fedavg"]  # the default job


@pytest.mark.parametrize(
    "kw, named",
    [
        ({"num_supernodes": 0}, "--num-supernodes"),
        ({"backend_config": "{nope"}, "--backend-config"),
    ],
)
def test_bad_flags_are_named(kw, named):
    with pytest.raises(ValueError, match=named):
        fs.translate(_ns(**kw), "fedavg")


def test_an_app_that_is_not_this_project_is_refused_saying_what_flower_has(tmp_path, capsys):
    assert fs.main(["--app", str(tmp_path), "--num-supernodes", "2"]) == 2
    err = capsys.readouterr().err
    assert "not a checkout of this project" in err and "flwr run" in err
