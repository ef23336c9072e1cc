"""experiments/tables.py: the numbers every results table prints."""

import numpy as np
import pytest

from experiments.tables import mean_sd, paired_interval, pipe_table, refuse_overwrite


def test_mean_sd_prints_sample_sd_and_a_lone_run_alone():
    assert mean_sd([1.0, 2.0, 3.0]) == "2.0 ± 1.0"
    assert mean_sd([0.5], digits=2) == "0.50"
    assert mean_sd([]) == ""


def test_paired_interval_is_the_t_interval_of_the_differences():
    a, b = np.array([3.0, 5.0, 4.0, 6.0]), np.array([1.0, 2.0, 2.0, 3.0])
    mean, lo, hi = paired_interval(a, b)
    d = a - b  # 2, 3, 2, 3: mean 2.5, sd 0.577, t(0.975, 3) = 3.182
    assert mean == pytest.approx(2.5)
    assert hi - mean == pytest.approx(3.1824 * d.std(ddof=1) / 2, rel=1e-3)
    assert lo > 0  # not within noise
    _, lo, hi = paired_interval([1.0, 2.0, 3.0], [2.0, 1.0, 3.0])
    assert lo < 0 < hi  # within noise
    assert np.isnan(paired_interval([1.0], [0.0])[1])


def test_pipe_table_and_refuse_overwrite(tmp_path):
    assert pipe_table(["a", "b"], [[1, "x"]]).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| 1 | x |",
    ]
    f = tmp_path / "t.csv"
    refuse_overwrite([f], force=False)  # nothing there yet
    f.write_text("kept")
    with pytest.raises(ValueError, match="--force"):
        refuse_overwrite([f], force=False)
    refuse_overwrite([f], force=True)


def test_a_known_measurement_noise_floors_the_interval_when_seeds_agree_by_chance():
    """Two seeds whose scores both move by +0.6 have a sample sd of 0 and a zero-width
    interval; with the binomial sd of one difference as a floor, the interval is as wide as
    that noise allows (a known sd: the normal quantile) and the 0.6 is within noise."""
    mean, lo, hi = paired_interval([30.6, 28.3], [30.0, 27.7])
    assert lo == pytest.approx(hi) == pytest.approx(mean)  # the degenerate interval
    mean, lo, hi = paired_interval([30.6, 28.3], [30.0, 27.7], sd_floor=3.4)
    assert mean == pytest.approx(0.6) and lo < 0 < hi
    assert hi - mean == pytest.approx(1.96 * 3.4 / np.sqrt(2), rel=1e-3)  # a known sd: z
    _, lo, _ = paired_interval([3.0, 5.0, 4.0, 6.0], [1.0, 2.0, 2.0, 3.0], sd_floor=0.1)
    assert lo > 0  # a floor below the seeds' own spread changes nothing
