"""FedVLN's privacy-utility frontier (experiments/privacy/fedvln_frontier.py): the single-house
floor covers every seen house once and averages within a seed, and "beats the floor" is read
from intervals paired by seed."""

from __future__ import annotations

import math

import pandas as pd
import pytest


def _runs(fed: dict[tuple[str, float], list[float]], floor: list[list[float]]) -> pd.DataFrame:
    """Synthetic per-run rows: each federated setting's val_unseen SR per seed (epsilon grows as
    the knob's noise shrinks), each seed's single-house SRs (one per house), the last checkpoint
    5 points below the best."""
    rows = []
    for ck, shift in (("best", 0.0), ("last", -5.0)):
        for (mode, knob), by_seed in fed.items():
            eps = math.inf if mode == "none" else (1.0 / knob if mode == "central" else knob * 10)
            for seed, sr in enumerate(by_seed):
                # no DP rises late: within the DP runs' 30 rounds it is 6 points lower
                done = 60 if mode == "none" else 30
                curve = f"30:{sr - 6 if mode == 'none' else sr};60:{sr}"
                rows.append({"mode": mode, "knob": knob, "seed": seed, "checkpoint": ck,
                             "sr": sr + shift, "episodes": 360.0, "spl": sr, "epsilon": eps,
                             "stopped": False, "rounds_done": done, "curve": curve})  # fmt: skip
        for seed, houses in enumerate(floor):
            for h, sr in enumerate(houses):
                rows.append({"mode": "single house", "knob": float("nan"), "seed": seed,
                             "house": f"house{h:03d}", "checkpoint": ck, "sr": sr + shift,
                             "episodes": 360.0, "spl": sr, "epsilon": 0.0, "stopped": False,
                             "rounds_done": 40, "curve": f"40:{sr}"})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_study_file_floors_distinct_seen_houses_and_its_fields_are_checked():
    """The committed study's cells pass their checks, its floor trains a different seen house
    for each seed, and a misspelt setting or a floor without (or beyond) the seen houses is
    refused naming the field, before anything runs."""
    from experiments import function_runs
    from experiments.privacy.fedvln_frontier import check
    from experiments.simulate import ROOT
    from experiments.study import cells, load

    study = load(ROOT / "experiments/studies/fedvln_frontier.toml")
    runs = cells(study, function_runs.crossed(study))
    for cell in runs:
        function_runs.check(cell, "f")
        check(cell, "f")
    floors = {c["seed"]: c["houses"] for c in runs if c["setting"] == "single-house"}
    assert sorted(floors) == [0, 1, 2]
    assert len({h for hs in floors.values() for h in hs}) == 3
    ok = {"seed": 0, "setting": "none", "rounds": 3, "clip": 1.0, "work": "w", "run-config": {}}
    for bad, field in (
        ({"setting": "central-0"}, "grid.setting"),
        ({"setting": "centrl-0.1"}, "grid.setting"),
        ({"setting": "single-house"}, "grid.houses"),
        ({"setting": "single-house", "houses": ["house012"]}, "grid.houses"),
        ({"houses": ["house000"]}, "grid.houses"),
        ({"rounds": 0}, "grid.rounds"),
    ):
        with pytest.raises(ValueError, match=field):
            check(ok | bad, "f")


def test_the_floor_is_a_seeds_house_mean_and_beating_it_is_paired_by_seed():
    from experiments.privacy.fedvln_frontier import crossing, markdown, summarize

    # seeds differ a lot in level, and every federated setting follows its seed's floor: paired
    # by seed, no DP and the small-noise setting beat it steadily; unpaired they would not
    floor = [[10.0, 14.0], [20.0, 24.0], [30.0, 34.0]]  # seed means 12, 22, 32
    runs = _runs(
        {
            ("none", 0.0): [20.0, 30.0, 40.0],
            ("central", 0.002): [18.0, 28.1, 37.9],
            ("central", 0.2): [11.0, 25.0, 30.0],
            ("local", 1000.0): [6.0, 11.0, 21.0],
        },
        floor,
    )
    t = summarize(runs)
    best = t[t.checkpoint == "best"].set_index(["mode", "knob"], drop=False)
    fl = best[best["mode"] == "single house"].iloc[0]
    assert fl.sr_mean == pytest.approx(22.0) and fl.seeds == 3  # houses averaged within a seed
    none = best.loc[("none", 0.0)]
    assert none.vs_floor == pytest.approx(8.0) and none.beats_floor
    small = best.loc[("central", 0.002)]
    assert small.beats_floor and small.vs_no_dp == pytest.approx(-2.0, abs=0.01)
    # against no DP's best within the 30 rounds the DP run trained, it is ahead
    assert small.vs_no_dp_same_rounds == pytest.approx(4.0, abs=0.01)
    assert not best.loc[("central", 0.2)].beats_floor  # 0 on average, within noise
    assert best.loc[("local", 1000.0)].vs_floor_high < 0  # below the floor by more than noise
    c = crossing(t)
    assert c["smallest_epsilon"] == pytest.approx(500.0) and "z = 0.002" in c["setting"]
    assert [n for n, _ in c["not"]] == ["central DP z = 0.2", "local DP ε = 1000 a release"]
    last = t[(t.checkpoint == "last") & (t["mode"] == "none")].iloc[0]
    assert last.sr_mean == pytest.approx(25.0)  # the last checkpoint is its own row
    md = markdown(t)
    assert "each seen house alone (floor)" in md and "z = 0.002" in md
    assert md.count("| best |") == md.count("| last |") == 5


def test_a_csv_read_back_renders_the_same_table(tmp_path):
    from experiments.privacy.fedvln_frontier import markdown, summarize

    runs = _runs({("none", 0.0): [20.0, 30.0, 40.0], ("local", 1e4): [19.0, 31.0, 38.0]},
                 [[10.0], [20.0], [30.0]])  # fmt: skip
    t = summarize(runs)
    t.to_csv(tmp_path / "t.csv", index=False)
    assert markdown(pd.read_csv(tmp_path / "t.csv")) == markdown(t)


def test_only_house_names_the_flag_when_the_house_is_not_a_seen_one(tmp_path, capsys):
    from experiments.fedvln import centralized

    out = tmp_path / "run"
    code = centralized.main(["--stages", "agent", "--only-house", "house012", "--iters", "1",
                             "--out", str(out), "--results-dir", str(out)])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "--only-house 'house012' is not a seen house" in err and "house000" in err
    assert not (out / "agent_log.csv").exists()
