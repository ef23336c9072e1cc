import subprocess

import pandas as pd

from experiments.plot import plot_runs
from tests.conftest import PYTHON, ROOT


def _run_dir(path, method, rmse):
    path.mkdir()
    (path / "config.json").write_text(f'{{"method": "{method}"}}')
    pd.DataFrame(
        {
            "round": [1, 2],
            "stage": ["train"] * 2,
            "wall_s": [1.0, 0.5],
            "bytes_up": [10, 10],
            "n_clients": [3, 3],
            "val_unseen_n": [40, 40],
            "rmse": rmse,
            "status_note": ["a", "b"],
        }
    ).to_csv(path / "rounds.csv", index=False)
    return path


def test_one_png_per_metric_overlaying_runs_and_none_for_bookkeeping(tmp_path):
    a = _run_dir(tmp_path / "a", "fedavg", [0.3, 0.2])
    b = _run_dir(tmp_path / "b", "fedprox", [0.25, 0.15])
    written = plot_runs([a, b], tmp_path / "plots")
    assert sorted(p.name for p in written) == ["rmse.png"]  # not wall time, bytes or counts
    assert all(p.stat().st_size > 1000 for p in written)


def test_cli_reports_missing_run(tmp_path):
    res = subprocess.run(
        [PYTHON, "-m", "experiments.plot", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 2 and "rounds.csv: not found" in res.stderr
