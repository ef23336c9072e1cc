"""Engine parity (issue 43 item 4): one small job of FedAvg, CDL, FedRL and FedVLN (three houses),
one seed, simulated and deployed (loopback, TLS, node authentication, the edge) gives the same
rounds.csv and clients.csv in every column but times and node ids (experiments/bench/parity.py
says why those differ)."""

from __future__ import annotations

import pytest

from experiments.bench.parity import differences
from tests.deployment import NEEDS_EDGE


def test_differences_sees_a_changed_metric_and_ignores_times_and_node_ids(tmp_path):
    import pandas as pd

    for name, rmse, node, wall in (
        ("a", 0.25, 11, 1.0),
        ("b", 0.25, 12, 9.0),
        ("c", 0.26, 11, 1.0),
    ):
        (tmp_path / name).mkdir()
        pd.DataFrame({"round": [1], "rmse": [rmse], "wall_s": [wall]}).to_csv(
            tmp_path / name / "rounds.csv", index=False
        )
        pd.DataFrame({"round": [1], "node": [node], "status": ["ok"], "fit_s": [wall]}).to_csv(
            tmp_path / name / "clients.csv", index=False
        )
    assert differences(tmp_path / "a", tmp_path / "b") == []
    assert differences(tmp_path / "a", tmp_path / "c") == [
        "rounds.csv column 'rmse': [0.25] / [0.26]"
    ]


@pytest.mark.slow
@pytest.mark.lane
@NEEDS_EDGE
@pytest.mark.parametrize("method", ["fedavg", "cdl", "fedrl", "fedvln"])
def test_simulation_and_deployment_compute_the_same_run(tmp_path, method):
    from experiments.bench.message_cost import deployed, simulated

    sim = simulated(method, 2, tmp_path)
    dep = deployed(method, 2, tmp_path) / "out"
    assert differences(sim, dep) == []
    if method == "fedrl":  # one ledger (issue 44 item 1): the server's figure is each party's log
        from experiments.bench.parity import ledger_differences

        assert ledger_differences(sim, sim) == []
        assert ledger_differences(dep.parent, dep) == []


@pytest.mark.slow
@pytest.mark.lane
@NEEDS_EDGE
def test_a_deployed_run_killed_and_resumed_computes_the_same_run(tmp_path):
    """SuperLink and one SuperNode SIGKILLed after round 1, started again, the run resumed:
    the same rounds.csv and clients.csv as the uninterrupted simulated run."""
    from experiments.bench.message_cost import simulated
    from experiments.bench.parity import deployed_killed

    sim = simulated("fedavg", 3, tmp_path)
    assert differences(sim, deployed_killed("fedavg", 3, tmp_path)) == []


def test_message_cost_names_whose_polls_a_deployed_row_ran_with(capsys):
    """Issue 63: a deployed row says whether it ran with Flower's own poll intervals or
    deploy/quick_poll.py's (rows measured before the launcher are Flower's, at the SuperExec
    poll they name), and an unknown variant is refused by name before anything starts."""
    import pandas as pd

    from experiments.bench.message_cost import main, markdown

    old = pd.DataFrame(
        {
            "method": ["fedrl"] * 4,
            "engine": ["simulation", "deployment", "deployment", "deployment"],
            "round_s": [6, 245, 230, 60],
            "superexec_poll_s": [None, 1.0, 0.05, None],
            "polls": [None, None, None, "quick"],
        }
    )
    rows = markdown(old).splitlines()
    assert "polls" in rows[0]
    assert rows[2].startswith("| fedrl | simulation |  |")
    assert rows[3].startswith("| fedrl | deployment | flower |")
    assert rows[4].startswith("| fedrl | deployment | flower, SuperExec 0.05 s |")
    assert rows[5].startswith("| fedrl | deployment | quick |")
    with pytest.raises(SystemExit):
        main(["--variants", "fast"])
    assert "--variants" in capsys.readouterr().err


def test_message_cost_run_for_one_method_keeps_the_other_methods_rows(tmp_path):
    """Measuring one method again replaces its rows and keeps the others' (each method's ratio
    is within its own invocation), so a partial rerun loses nothing already measured."""
    import pandas as pd

    from experiments.bench.message_cost import _with_other_methods

    csv = tmp_path / "message_cost.csv"
    old = pd.DataFrame({"method": ["fedrl", "fedrl", "cdl"], "message_s": [0.25, 7.0, 9.0]})
    new = pd.DataFrame({"method": ["cdl", "fedvln"], "message_s": [1.0, 2.0]})
    assert _with_other_methods(new, csv).equals(new)  # nothing committed yet
    old.to_csv(csv, index=False)
    merged = _with_other_methods(new, csv)
    assert list(merged["method"]) == ["fedrl", "fedrl", "cdl", "fedvln"]  # committed order
    assert list(merged["message_s"]) == [0.25, 7.0, 1.0, 2.0]  # the old cdl row is replaced
