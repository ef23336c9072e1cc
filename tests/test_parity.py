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


def test_message_cost_study_refuses_what_it_cannot_measure_and_plots_each_part(
    tmp_path, monkeypatch
):
    """Issue 66: experiments/studies/message_cost.toml. A method without a job, an unknown or
    empty list of deployed variants, no rounds, or the Text2Action job without its data are
    refused by field before anything starts; that job runs FedRL; the table shows whose polls
    a deployed row ran with, and the figure stacks a message's parts to its measured wall time."""
    import pandas as pd

    from experiments.bench import message_cost
    from experiments.bench.message_cost import check, markdown, method_of, plot
    from experiments.figures import command_of

    ok = {"method": "fedrl", "variants": ["flower", "warm"], "rounds": 2}
    check(ok, "f.toml")
    t2a = ok | {"method": "fedrl-text2action"}
    check(t2a, "f.toml")
    assert method_of("fedrl-text2action") == "fedrl" and method_of("cdl") == "cdl"
    assert 'fedrl.domain="text2action"' in message_cost.JOBS["fedrl-text2action"]
    # our imports are timed after what the process has already imported (Flower's entry and
    # torch; a warm child: its parent's preload), which costs nothing again
    assert (
        message_cost.import_seconds(["email.mime.text"], after=("email.mime.text",), repeats=1)
        < 0.01
    )
    assert {"torch", "dp_accounting"} <= set(message_cost.warm_preload())
    monkeypatch.setattr(message_cost, "T2A_DATA", tmp_path / "absent")
    with pytest.raises(ValueError, match="grid.method.*absent: not there"):
        check(t2a, "f.toml")
    for bad, field in (({"method": "gossip"}, "grid.method"), ({"variants": ["fast"]}, "grid.variants"),
                       ({"variants": []}, "grid.variants"), ({"rounds": 0}, "grid.rounds")):  # fmt: skip
        with pytest.raises(ValueError, match=field):
            check(ok | bad, "f.toml")
    runs = pd.DataFrame(
        {
            "method": ["fedrl"] * 2,
            "engine": ["simulation", "deployment"],
            "polls": [None, "quick"],
            "messages_per_round": [16.0, 16.0],
            "message_s": [0.3, 4.0],
            "process_age_s": [None, 2.5],
            "handler_s": [0.02, 0.8],
            "transport_s": [0.28, 0.7],
        }
    )
    rows = markdown(runs).splitlines()
    assert rows[2].startswith("| fedrl | simulation |  |")
    assert rows[3].startswith("| fedrl | deployment | quick |")
    png = tmp_path / "m.png"
    plot(runs, png, "python -m experiments.study experiments/studies/message_cost.toml")
    assert command_of(png).endswith("message_cost.toml")


def test_fedrl_deployed_study_says_when_the_engines_disagree(tmp_path):
    """Issue 66: experiments/studies/fedrl_deployed.toml. The summary's `same_succ_rates` is
    False as soon as one engine's test SuccRate differs; a map folder without the size's maps
    is refused by field before anything starts; the figure keeps its command."""
    import pandas as pd

    from experiments.bench.fedrl_deployed import SCORES, check, plot, references, summarize
    from experiments.figures import command_of

    runs = pd.DataFrame([{"engine": e, "wall_s": w, **dict.fromkeys(SCORES, 0.93)}
                         for e, w in (("simulation", 370.0), ("deployment (x)", 3300.0))])  # fmt: skip
    assert summarize(runs)["same_succ_rates"].all()
    runs.loc[1, SCORES[2]] = 0.92
    assert not summarize(runs)["same_succ_rates"].any()
    cell = {"map-dir": "../shared/data/gridworld", "size": 8, "rounds": 2, "eval-every": 1}
    check(cell, "f.toml")
    with pytest.raises(ValueError, match="grid.map-dir"):
        check(cell | {"map-dir": str(tmp_path)}, "f.toml")
    with pytest.raises(ValueError, match="grid.rounds"):
        check(cell | {"rounds": 0}, "f.toml")
    command = "python -m experiments.study experiments/studies/fedrl_deployed.toml --jobs 1"
    plot(runs, tmp_path / "d.png", command)
    assert command_of(tmp_path / "d.png") == command
    # the SuccRates are drawn against the random policy on the same maps and seed (Table 1's
    # run, 8x8 paper rules, seed 0, as the study file says) and the paper's FedRL-1 / -2
    floor, paper = references(command)
    assert 0.5 < floor < 0.9 and paper == pytest.approx({"on": 0.9252, "off": 0.9506})
