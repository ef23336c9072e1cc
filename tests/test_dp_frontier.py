"""experiments/privacy/dp_frontier.py with `--batchnorm local`: every row runs with statistics
kept on the silo, and the floors are scored by the same rule as the runs."""

import argparse
import math

import numpy as np
import pandas as pd
import pytest
import torch

from envs.driving_silos import SiloData
from experiments.privacy import dp_frontier
from models.resnet8 import ResNet8
from training.steering import estimate_statistics, evaluate_steering


def _args(batchnorm: str) -> argparse.Namespace:
    return argparse.Namespace(
        method="cdl", clip=2.0, z=[0.1], local_eps=[1000.0], batchnorm=batchnorm
    )


def test_local_statistics_reach_every_row_and_a_separate_result_name():
    rows = dp_frontier.settings(_args("local"))
    assert [r[0] for r in rows] == ["none", "local"]  # CDL: no central row
    assert all('driving.batchnorm-statistics="local"' in r[2] for r in rows)
    assert not any("batchnorm" in r[2] for r in dp_frontier.settings(_args("shared")))
    assert dp_frontier.name_of("cdl", "local") == "dp_frontier_cdl_bnlocal"
    assert dp_frontier.name_of("cdl") == "dp_frontier_cdl"  # the papers' runs keep their folder
    assert dp_frontier.name_of("cdl", "local", 0.25) == "dp_frontier_cdl_bnlocal"  # calibrated C
    assert dp_frontier.name_of("cdl", "local", 2.0) == "dp_frontier_cdl_bnlocal_clip2"  # control


def test_a_floor_with_local_statistics_is_scored_as_each_silo_would_score_it():
    """Two silos whose images differ in brightness: with statistics kept local, each silo
    normalises the model with its own images' statistics, so the pooled error is the
    example-weighted mean of the per-silo errors under those statistics, not the error
    under the model's trained statistics."""
    rng = np.random.default_rng(0)

    def silo(scale: float, n_test: int) -> SiloData:
        x = lambda n: (scale * rng.random((n, 1, 16, 16))).astype(np.float32)  # noqa: E731
        return SiloData(x(40), rng.random(40).astype(np.float32), x(n_test),
                        rng.random(n_test).astype(np.float32))  # fmt: skip

    silos = [silo(1.0, 10), silo(5.0, 30)]
    torch.manual_seed(0)
    model = ResNet8(16, 1)
    estimate_statistics(model, silos[0].x_train)  # "trained" on silo 0's images
    shared = dp_frontier.pooled_rmse(model, silos)
    local = dp_frontier.pooled_rmse(model, silos, "local")
    torch.manual_seed(0)
    fresh = ResNet8(16, 1)  # the same weights: statistics are the only difference
    mse = [
        evaluate_steering(estimate_statistics(fresh, s.x_train), s.x_test, s.y_test)[0]
        for s in silos
    ]
    assert local == pytest.approx(math.sqrt((10 * mse[0] + 30 * mse[1]) / 40), rel=1e-5)
    assert abs(local - shared) > 1e-3


def test_the_table_says_when_its_statistics_stayed_local():
    table = pd.DataFrame(
        [
            {"method": "cdl", "batchnorm": "local", "mode": "none", "knob": 0.0, "clip": 2.0,
             "rounds": 10, "silos": 10, "epsilon": np.inf, "rmse": 0.25, "rmse_sd": 0.01,
             "best_rmse": 0.24, "seeds": 3, "stopped": 0},
        ]
    )  # fmt: skip
    assert "CDL, no DP (statistics local)" in dp_frontier.markdown(table)
    assert "(the papers')" in dp_frontier.markdown(table.drop(columns="batchnorm"))


@pytest.mark.parametrize("size,n", [(24, 33), (64, 33), (32, 65), (64, 300)])
def test_estimated_statistics_are_the_mean_over_every_image_whatever_the_last_batch(size, n):
    """The first block's BatchNorm sees the stem's output, which no other statistic changes:
    its estimated running mean must be that output's mean over all n images, each image
    counted once, even when n leaves a remainder of one image (a 1x1 feature map at 24 px)."""
    torch.manual_seed(0)
    x = torch.rand(n, 1, size, size)
    model = ResNet8(size, 1)
    estimate_statistics(model, x.numpy())
    with torch.no_grad():
        h = model.pool(model.stem(x))
    assert torch.allclose(model.blocks[0].bn1.running_mean, h.mean(dim=(0, 2, 3)), atol=1e-5)
    assert model.blocks[0].bn1.momentum == 0.1  # the training momentum is put back
    with pytest.raises(ValueError, match="no BatchNorm named 'blocks.0.bn9'"):
        estimate_statistics(model, x.numpy(), only="blocks.0.bn9")


def test_settings_are_compared_with_each_silo_alone_and_no_dp_seed_by_seed():
    """A setting 0.01 better than each silo alone in every seed, while the seeds themselves
    spread by 0.1: paired, the interval excludes 0; and the table prints it."""
    runs = pd.DataFrame(
        [{"mode": m, "knob": k, "seed": s, "rmse": base + d}
         for s, base in enumerate([0.2, 0.3, 0.4])
         for m, k, d in (("none", 0.0, -0.02), ("local", 1000.0, -0.01))]
    )  # fmt: skip
    floors = pd.DataFrame({"seed": [0, 1, 2], "local_only_rmse": [0.2, 0.3, 0.4]})
    vs = dp_frontier.versus(runs, floors).set_index("mode")
    assert vs.loc["local", "vs_local_only"] == pytest.approx(-0.01)
    assert vs.loc["local", "vs_local_only_high"] < 0  # paired: the seeds' spread cancels
    assert vs.loc["local", "vs_no_dp"] == pytest.approx(0.01)
    assert np.isnan(vs.loc["none"].get("vs_no_dp", np.nan))
    table = pd.DataFrame(
        [{"method": "cdl", "mode": "local", "knob": 1000.0, "clip": 0.25, "rounds": 10,
          "silos": 10, "epsilon": 2e5, "rmse": 0.29, "rmse_sd": 0.1, "best_rmse": 0.28,
          "seeds": 3, "stopped": 0, **vs.loc["local"].to_dict()}]
    )  # fmt: skip
    assert "| -0.010 [" in dp_frontier.markdown(table)


def test_a_floor_is_computed_once_per_runs_folder_and_recomputed_when_its_settings_differ(
    tmp_path, monkeypatch
):
    calls = []
    monkeypatch.setattr(
        dp_frontier, "local_only", lambda a, s: calls.append(s) or {"seed": s, "x": len(calls)}
    )
    args = argparse.Namespace(rounds=10, num_clients=10, batchnorm="local")
    first = dp_frontier.kept_floor(args, tmp_path, 0)
    assert dp_frontier.kept_floor(args, tmp_path, 0) == first and calls == [0]  # a control
    args.rounds = 5
    assert dp_frontier.kept_floor(args, tmp_path, 0) != first and calls == [0, 0]


def test_adaptive_clipping_rows_are_central_only_below_two_sigma_b_under_their_own_name():
    args = argparse.Namespace(method="fedavg", clip=2.0, z=[0.1, 0.3, 1.0], local_eps=[1000.0],
                              batchnorm="shared", clipping="adaptive", clip_lr=0.2,
                              num_clients=10)  # fmt: skip
    rows = dp_frontier.settings(args)
    assert [(r[0], r[1]) for r in rows] == [("none", 0.0), ("central", 0.1), ("central", 0.3)]
    assert all('dp.clipping="adaptive"' in r[2] for r in rows[1:])
    assert "adaptive" not in rows[0][2]  # the same no-DP runs as the fixed-C study
    assert dp_frontier.name_of("fedavg", clipping="adaptive") == "dp_frontier_adaptive"
    assert (
        dp_frontier.name_of("fedavg", clipping="adaptive", clip_lr=1.0)
        == "dp_frontier_adaptive_lr1"
    )
    with pytest.raises(SystemExit, match="--clipping adaptive is central DP's"):
        dp_frontier.main(["--method", "cdl", "--clipping", "adaptive"])


def test_adaptive_rows_are_paired_with_the_fixed_c_runs_of_the_same_z_and_seed():
    runs = pd.DataFrame({"mode": ["central"] * 3 + ["none"], "knob": [0.1] * 3 + [0.0],
                         "seed": [0, 1, 2, 0], "rmse": [0.30, 0.26, 0.28, 0.2]})  # fmt: skip
    fixed = pd.DataFrame({"mode": ["central"] * 4, "knob": [0.1, 0.1, 0.1, 0.3],
                          "seed": [0, 1, 2, 0], "rmse": [0.25, 0.25, 0.25, 9.0]})  # fmt: skip
    t = dp_frontier.versus_fixed(runs, fixed)
    assert len(t) == 1 and t["knob"].iloc[0] == 0.1
    assert t["vs_fixed"].iloc[0] == pytest.approx(np.mean([0.05, 0.01, 0.03]))
    assert t["vs_fixed_low"].iloc[0] < t["vs_fixed"].iloc[0] < t["vs_fixed_high"].iloc[0]
