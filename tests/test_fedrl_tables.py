"""The committed FedRL tables are what the shipped code computes (issue 61): one committed
Table 1 run is trained again, in the study mode the table scripts use, and must give its CSV
rows to the digit. A change that moves a table fails here instead of drifting silently (the
last drift went unnoticed for three days: docs/fedrl.md names its cause). In the lane: one
FedRL run of Table 1's 8x8 recipe is a few minutes on 2 cores."""

import json
import subprocess
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.conftest import PYTHON, ROOT, SHARED_DATA

MAPS = SHARED_DATA / "gridworld" / "gridworld_o_8.mat"


@pytest.mark.lane
@pytest.mark.skipif(not MAPS.is_file(), reason="needs ../shared/data/gridworld")
def test_a_committed_table1_run_is_what_the_shipped_code_computes(tmp_path):
    from experiments.fedrl.table1 import fingerprint, splits_for

    runs = pd.read_csv(ROOT / "experiments" / "results" / "fedrl_table1_runs.csv")
    mine = runs.query("method == 'fedrl' and rules == 'paper' and size == 8 and seed == 0")
    assert len(mine) == 4  # best and last, test_noise on and off
    job = {
        "method": "fedrl",
        "rules": "paper",
        "size": 8,
        "seed": 0,
        "rounds": int(mine["rounds"].iloc[0]),
        "eval_every": 10,
        "map_file": str(MAPS.resolve()),
        "ranges": splits_for(
            str(MAPS.resolve()), SimpleNamespace(train_maps="", valid_maps="", test_maps="")
        ),
        "extra": {},
        "work": str(tmp_path),
    }
    # the committed rows were made with exactly these settings, defaults, map bytes and
    # floating-point kernels (experiments/fedrl.numerics)
    assert mine["fingerprint"].iloc[0] == fingerprint(job)
    # trained in a fresh process: the kernels are pinned before anything computes
    code = (
        "import json, sys; from experiments.fedrl.table1 import one_run; "
        "print(json.dumps(one_run(json.loads(sys.argv[1]))))"
    )
    res = subprocess.run(
        [PYTHON, "-c", code, json.dumps(job)], cwd=ROOT, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-2000:]
    got = pd.DataFrame(json.loads(res.stdout.strip().splitlines()[-1])).fillna({"test_noise": ""})
    want = mine.fillna({"test_noise": ""})
    keys = ["checkpoint", "test_noise"]
    got, want = got.set_index(keys).sort_index(), want.set_index(keys).sort_index()
    for col in ("succ_rate", "avg_reward", "best_round", "eps_alpha", "eps_beta"):
        assert got[col].tolist() == pytest.approx(want[col].tolist(), rel=1e-9, abs=1e-12), col
