"""Fault injection (clients/faults.py) for every method, whole runs on the in-process grid:
a partition that raises or sends NaN is recorded and never aggregated; the run goes on (FedRL,
whose two parties cannot lose one, stops and names the party)."""
import numpy as np
import pandas as pd
import pytest

from server.config import merged
from tests.conftest import InProcessGrid

DRIVING = {"driving.image-size": 24, "driving.train-per-silo": 16, "driving.test-per-silo": 8,
           "driving.local-epochs": 1, "driving.batch-size": 8, "num-server-rounds": 2,
           "num-clients": 3, "topology": "ring"}
FEDVLN = {"method": "fedvln", "num-clients": 5, "num-server-rounds": 2,
          "fedvln.train-houses": 3, "fedvln.unseen-houses": 2, "fedvln.embedding": 16,
          "fedvln.hidden": 32, "fedvln.batch-size": 8, "fedvln.max-local-steps": 2,
          "fedvln.seen-rate": 1.0}
FAULTS = {"faults.raise-partition": 1, "faults.nan-partition": 2}


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "cdl", "gossip", "fedvln"])
def test_a_raising_and_a_nan_partition_are_recorded_and_never_aggregated(tmp_path, method):
    from clients.app import app
    from server.methods import server_module

    base = FEDVLN if method == "fedvln" else {**DRIVING, "method": method}
    cfg = merged({**base, **FAULTS, "out-dir": str(tmp_path)})
    grid = InProcessGrid(app, cfg, int(cfg["num-clients"]))
    server_module(method).run(grid, cfg, method)
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    rounds = rounds[rounds["round"] > 0]
    assert len(rounds) == 2 and (rounds["n_accepted"] == 1).all()   # only partition 0
    rows = pd.read_csv(tmp_path / "clients.csv")
    rows = rows[rows["round"] > 0]
    raised = rows[rows.partition == 1].status
    nan = rows[rows.partition == 2].status
    assert len(raised) == 2 and raised.str.match(r"failed: .*InjectedFault: injected fault").all()
    assert "\n" not in "".join(raised)                                 # one line per cell
    assert len(nan) == 2 and nan.str.contains("NaN").all()
    assert (rows[rows.partition == 0].status == "ok").all()


def test_fedrl_stops_naming_the_party_that_raised(tmp_path):
    from clients.app import app
    from server import fedrl as server

    cfg = merged({"method": "fedrl", "num-server-rounds": 2, "fedrl.warmup": 32,
                  "fedrl.envs": 8, "fedrl.act-steps": 2, "fedrl.updates": 3,
                  "fedrl.batch-size": 8, "fedrl.eval-episodes": 6, "fedrl.max-steps": 6,
                  "faults.raise-partition": 1, "out-dir": str(tmp_path)})
    with pytest.raises(server.FederationError, match="beta failed in 'act'.*InjectedFault"):
        server.run(InProcessGrid(app, cfg, 2), cfg, "fedrl")


def test_nan_fault_marks_the_first_float_array_only():
    import torch

    from clients.faults import nan_state

    cfg = merged({"faults.nan-partition": 3})
    state = {"ids": np.arange(4), "q": np.ones(3), "w": torch.ones(2)}
    out = nan_state(dict(state), 3, cfg)
    assert np.isnan(out["q"]).all() and (out["ids"] == np.arange(4)).all()
    assert torch.equal(out["w"], torch.ones(2))
    assert nan_state(dict(state), 2, cfg)["q"].sum() == 3
