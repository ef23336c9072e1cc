"""FedRL's privacy-utility frontier (experiments/privacy/fedrl_frontier.py): each run's epsilon is
its parties' own ledger, and the crossing with DQN-alpha is read from paired intervals."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest


def _runs(succ: dict[float, list[float]], dqn: list[float]) -> pd.DataFrame:
    """Synthetic table1 rows: FedRL's test SuccRate per sigma and seed, DQN-alpha's per seed."""
    rows = []
    maps = json.dumps({"train": 6400, "valid": 400, "test": 400})
    for ck in ("best", "last"):
        for sigma, by_seed in succ.items():
            for seed, v in enumerate(by_seed):
                for noise, x in (("on", v), ("off", 0.99)):  # off must never be scored
                    rows.append(
                        {
                            "method": "fedrl",
                            "test_noise": noise,
                            "sigma": sigma,
                            "seed": seed,
                            "checkpoint": ck,
                            "split": "test",
                            "maps_used": maps,
                            "succ_rate": x,
                            "eps_alpha": 100.0 / sigma,
                            "eps_beta": 50.0 / sigma,
                        }  # fmt: skip
                    )
        for seed, v in enumerate(dqn):
            rows.append(
                {
                    "method": "dqn-alpha",
                    "test_noise": "",
                    "sigma": 1.0,
                    "seed": seed,
                    "checkpoint": ck,
                    "split": "test",
                    "maps_used": maps,
                    "succ_rate": v,
                    "eps_alpha": 0.0,
                    "eps_beta": 0.0,
                }  # fmt: skip
            )
    return pd.DataFrame(rows)


def test_the_crossing_is_the_largest_sigma_whose_paired_interval_clears_dqn_alpha(tmp_path):
    from experiments.privacy.fedrl_frontier import crossing, markdown, summarize

    runs = _runs(
        {1: [0.95, 0.94, 0.96], 4: [0.92, 0.93, 0.91], 16: [0.79, 0.82, 0.80], 64: [0.70] * 3},
        dqn=[0.80, 0.81, 0.79],
    )
    t = summarize(runs)
    fed = t[(t.method == "fedrl") & (t.checkpoint == "best")].set_index("sigma")
    assert fed.loc[1, "succ_mean"] == pytest.approx(95.0)  # test_noise=on, in percent
    assert fed.loc[1, "epsilon"] == pytest.approx(100.0)  # the larger party's ledger
    assert fed.loc[1, "paper"] == "92.52 / 95.06" and fed.loc[4, "paper"] == ""
    assert list(fed.beats_dqn_alpha) == [True, True, False, False]
    assert crossing(t) == {
        "last_sigma": 4.0,
        "last_epsilon": 25.0,
        "first_not_sigma": 16.0,
        "first_not_epsilon": 100.0 / 16,
    }
    dqn = t[(t.method == "dqn-alpha") & (t.checkpoint == "best")].iloc[0]
    assert dqn.epsilon == 0 and dqn.paper == "88.27"
    assert "up to σ = 4 (ε = 25)" in markdown(t) and "from σ = 16" in markdown(t)
    t.to_csv(tmp_path / "t.csv", index=False)  # the docs render the committed CSV
    assert markdown(pd.read_csv(tmp_path / "t.csv")) == markdown(t)
    # two seeds level with DQN-alpha and one far above: the mean is above, the interval is not
    wide = summarize(_runs({1: [0.80, 0.81, 0.99]}, dqn=[0.80, 0.81, 0.79]))
    assert crossing(wide)["last_sigma"] is None


@pytest.mark.slow
def test_the_study_records_each_party_s_epsilon_and_refuses_sigma_in_run_config(
    tmp_path, monkeypatch, capsys
):
    import experiments.privacy.fedrl_frontier as fr

    monkeypatch.setattr(fr, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(sys, "argv", ["pytest"])
    args = ["--sigmas", "0", "1", "1000", "--seeds", "0", "--rounds", "2", "--eval-every", "1",
            "--jobs", "1", "--work", str(tmp_path / "work"), "--train-maps", "0-199",
            "--valid-maps", "6400-6449", "--test-maps", "7200-7249",
            "--run-config", "fedrl.eval-episodes=10 fedrl.warmup=32 fedrl.envs=8 "
            "fedrl.batch-size=8"]  # fmt: skip
    assert fr.main(args) == 0
    runs = pd.read_csv(tmp_path / "results" / "fedrl_frontier_runs.csv")
    fed = runs[(runs.method == "fedrl") & (runs.checkpoint == "best")]
    eps = fed.groupby("sigma").eps_alpha.max()
    assert math.isinf(eps[0.0]) and 0 < eps[1000.0] < eps[1.0] < np.inf
    assert (fed.eps_beta > 0).all()  # beta releases too, and its ledger says so
    base = runs[runs.method != "fedrl"]
    assert set(base.method) == {"dqn-alpha", "random-both", "random-alpha"}
    assert (base.eps_alpha == 0).all() and (base.eps_beta == 0).all()
    assert len(base[base.method == "dqn-alpha"]) == 2  # once per seed (best, last), not per sigma
    assert (tmp_path / "results" / "fedrl_frontier.png").stat().st_size > 0
    assert "FedRL σ = 1 (paper's)" in capsys.readouterr().out
    bad = args[:-1] + ["fedrl.sigma=2"]
    assert fr.main(bad + ["--force"]) == 2 and "--sigmas" in capsys.readouterr().err
