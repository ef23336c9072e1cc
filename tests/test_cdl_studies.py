"""The CDL study files (experiments/studies/cdl_*.toml) and their analysis
(experiments/cdl/driving_table.py): each run is named in the tables as before, the runs two
studies share are one launch, and the signal study refuses a strongest cell the sweep does not
pick."""

from __future__ import annotations

import pandas as pd
import pytest

from experiments import simulation_runs
from experiments.cdl import driving_table as dt
from experiments.simulate import ROOT
from experiments.study import analysis_of, cells, load

STUDIES = ("cdl_driving_table", "cdl_signal", "cdl_official", "cdl_noniid")


def _jobs(name: str) -> list[dict]:
    study = load(ROOT / "experiments" / "studies" / f"{name}.toml")
    found = cells(study, simulation_runs.crossed(study))
    for cell in found:
        simulation_runs.check(cell, name)
        analysis_of(study).check(cell, name)
    return simulation_runs.jobs(found, None)


def test_every_run_keeps_its_table_name_and_shared_runs_are_one_launch():
    jobs = {name: _jobs(name) for name in STUDIES}
    keys = {name: {dt.key_of(pd.Series(j)) for j in js} for name, js in jobs.items()}
    assert keys["cdl_driving_table"] == {
        "gossip gaia-ring", "cdl gaia-ring", "gossip amazon_us-ring", "cdl amazon_us-ring",
        "fedavg", "cdl-sfl", "fedprox",
    }  # fmt: skip
    assert "beta=0.9 T=0.2 clip=1.0" in keys["cdl_signal"]
    assert "beta=0.1 T=1.0" in keys["cdl_signal"] and "gossip clip=1.0" in keys["cdl_signal"]
    assert len(keys["cdl_signal"]) == 12  # 9 cells, the unclipped limit, the clipped, gossip
    # a folder two studies share holds one launch: same method, topology, clients, run config
    launches = {}
    for js in jobs.values():
        for j in js:
            launch = (j["method"], j["topology"], j["num-clients"], j["rounds"],
                      simulation_runs.overrides(j["run-config"]))  # fmt: skip
            assert launches.setdefault(j["run_dir"], launch) == launch, j["run_dir"]
    noniid_dirs = {j["run_dir"] for j in jobs["cdl_noniid"]}
    table_dirs = {j["run_dir"] for j in jobs["cdl_driving_table"]}
    assert len(noniid_dirs & table_dirs) == 10  # non-iid 1.0: the defaults' Gaia runs, reused


def _runs(rmse: dict[str, list[float]], ratio: dict[str, float], diverged=()) -> pd.DataFrame:
    rows = []
    for key, values in rmse.items():
        for seed, v in enumerate(values):
            rows.append({"key": key, "method": "gossip" if key.startswith("gossip") else "cdl",
                         "seed": seed, "avg_model_rmse": v, "local_model_rmse": v + 0.01,
                         "consensus": 1e-7, "cd_grad_ratio": ratio.get(key, float("nan")),
                         "pb_entropy": 6.0, "diverged": key in diverged})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_signal_study_refuses_a_strongest_cell_the_sweep_does_not_pick(tmp_path):
    runs = _runs(
        {
            "beta=0.5 T=1.0": [0.20],
            "beta=0.9 T=0.2": [0.30],  # the largest signal, but diverged
            "beta=0.9 T=0.3": [0.20, 0.21, 0.22],  # the strongest stable cell
            "gossip clip=1.0": [0.19, 0.20, 0.20],
        },
        {"beta=0.5 T=1.0": 0.1, "beta=0.9 T=0.2": 6.0, "beta=0.9 T=0.3": 1.5},
        diverged={"beta=0.9 T=0.2"},
    )
    study = {"file": "cdl_signal.toml", "report": {"strongest": "beta=0.5 T=1.0"}}
    with pytest.raises(ValueError, match="strongest stable cell is 'beta=0.9 T=0.3'"):
        dt.signal_tables(runs, study)
    study["report"]["strongest"] = "beta=0.9 T=0.3"
    got = dt.signal_tables(runs, study)
    sweep = got["cdl_signal_sweep.csv"]
    assert list(sweep.key) == ["beta=0.5 T=1.0", "beta=0.9 T=0.2", "beta=0.9 T=0.3"]
    assert (sweep.seeds == 1).all()  # the sweep is the first seed's
    pair = got["cdl_signal_strongest.csv"].set_index("metric").loc["avg_model_rmse"]
    assert pair.seeds == 3 and pair.diff_mean == pytest.approx(0.0133, abs=1e-3)


def test_noniid_pairs_cdl_with_gossip_at_each_level_by_seed():
    rows = []
    for k, shift in ((0.0, 0.0), (1.0, 0.01)):
        for seed in range(3):
            for method, extra in (("gossip", 0.0), ("cdl", shift)):
                rows.append({"method": method, "seed": seed, "non_iid": k,
                             "avg_model_rmse": 0.1 * (seed + 1) + extra,
                             "local_model_rmse": 0.1, "consensus": 1e-7})  # fmt: skip
    t = dt.noniid_comparisons(pd.DataFrame(rows))
    rmse = t[t.metric == "avg_model_rmse"].set_index("non_iid")
    assert rmse.loc[0.0].verdict == "within noise" and rmse.loc[0.0].diff_mean == 0
    # seeds differ by 0.1 each, the paired difference is 0.01 on every seed: clearly higher
    assert rmse.loc[1.0].verdict == "a higher"
    assert rmse.loc[1.0].a == "cdl non-iid=1.0" and rmse.loc[1.0].seeds == 3
