"""experiments/privacy/dp_frontier.py, the driving frontiers' analysis, and their study files: with
statistics local every row keeps them on the silo, and the floors are scored by the same rule as
the runs."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from envs.driving_silos import SiloData
from experiments.privacy import dp_frontier
from models.resnet8 import ResNet8
from tests.conftest import ROOT
from training.steering import estimate_statistics, evaluate_steering

STUDIES = ROOT / "experiments" / "studies"


def _cells(name: str) -> list[dict]:
    from experiments import simulation_runs, study

    s = study.load(STUDIES / f"{name}.toml")
    return study.cells(s, simulation_runs.crossed(s))


def test_local_statistics_reach_every_row_and_the_shared_frontier_keeps_them_nowhere():
    local, shared = _cells("dp_frontier_bnlocal"), _cells("dp_frontier")
    assert len(local) == 3 * 12 and len(shared) == 3 * 10  # seeds x rows
    assert all(c["run-config"]["driving.batchnorm-statistics"] == "local" for c in local)
    assert not any("driving.batchnorm-statistics" in c["run-config"] for c in shared)
    assert {c["run-config"].get("dp.clip") for c in local} == {None, 0.25}  # calibrated C
    assert {c["run-config"].get("dp.clip") for c in shared} == {None, 2.0}


def test_a_frontier_row_that_cannot_be_scored_is_refused_naming_the_study():
    """Adaptive C at z >= 2 sigma_b, adaptive C on a local row, a DP row without C, and a
    frontier that does not keep its stopped runs are refused before anything runs."""
    cell = {"method": "fedavg", "seed": 0, "rounds": 5, "num-clients": 10, "may-stop": True}
    adaptive = {"dp.mode": "central", "dp.clip": 2.0, "dp.clipping": "adaptive"}
    for rc, match in (
        (adaptive | {"dp.noise-multiplier": 1.0}, "below 2 sigma_b = 1"),
        ({"dp.mode": "local", "dp.local-epsilon": 10.0, "dp.clip": 2.0, "dp.clipping": "adaptive"},
         "adaptive clipping is central"),
        ({"dp.mode": "central", "dp.noise-multiplier": 0.1}, "sets dp.noise-multiplier and dp.clip"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            dp_frontier.check(cell | {"run-config": rc}, "s.toml")
    dp_frontier.check(cell | {"run-config": adaptive | {"dp.noise-multiplier": 0.3}}, "s.toml")
    with pytest.raises(ValueError, match="s.toml: grid.may-stop = true"):
        dp_frontier.check(cell | {"may-stop": False, "run-config": {}}, "s.toml")


def test_the_adaptive_frontiers_share_the_fixed_studys_no_dp_runs_and_pair_with_it():
    """Adaptive C's rows are central only, z below 2 sigma_b; its no-DP runs are the very
    launches (folder and run config) of dp_frontier.toml, so they are trained once."""
    from experiments import study
    from experiments.simulation_runs import jobs, overrides

    fixed = {j["run_dir"]: overrides(j["run-config"]) for j in jobs(_cells("dp_frontier"), None)}
    for name, lr in (("dp_frontier_adaptive", 0.2), ("dp_frontier_adaptive_lr1", 1.0)):
        cells = jobs(_cells(name), None)
        none = [c for c in cells if "dp.mode" not in c["run-config"]]
        assert len(none) == 3 and all(
            fixed[c["run_dir"]] == overrides(c["run-config"]) for c in none
        )
        rest = [c["run-config"] for c in cells if c not in none]
        assert {(r["dp.mode"], r["dp.clipping"], r["dp.clip-lr"]) for r in rest} == {
            ("central", "adaptive", lr)
        }
        assert max(r["dp.noise-multiplier"] for r in rest) < 1.0
        assert study.load(STUDIES / f"{name}.toml")["report"]["fixed"] == "dp_frontier"


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
        dp_frontier,
        "local_only",
        lambda r, n, b, s: calls.append(s) or {"seed": s, "x": len(calls)},
    )
    first = dp_frontier.kept_floor(tmp_path, 10, 10, "local", 0)
    assert dp_frontier.kept_floor(tmp_path, 10, 10, "local", 0) == first and calls == [0]
    assert dp_frontier.kept_floor(tmp_path, 5, 10, "local", 0) != first and calls == [0, 0]


def test_the_report_scores_each_run_at_its_last_round_beside_the_floors(tmp_path, monkeypatch):
    """From finished run folders: a row per setting (mean over seeds of the last round, epsilon
    as the run recorded it), a stopped run counted, the floors below, the three files written
    and the setting every row shares; runs that differ in C are refused."""
    monkeypatch.setattr(dp_frontier, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(
        dp_frontier, "local_only",
        lambda r, n, b, s: {"seed": s, "local_only_rmse": 0.30 + s / 100, "constant_rmse": 0.23},
    )  # fmt: skip
    runs = []
    for seed in (0, 1, 2):
        for tag, rc, rmse, eps in (
            ("none", {}, [0.25, 0.20], None),
            ("local-100", {"dp.mode": "local", "dp.local-epsilon": 100.0, "dp.clip": 2.0},
             [0.3, 50.0 + seed], [155.0, 310.0]),
        ):  # fmt: skip
            run = tmp_path / "work" / f"{tag}-s{seed}"
            run.mkdir(parents=True)
            rounds = pd.DataFrame({"round": [1, 2], "rmse": rmse})
            if eps:
                rounds["dp_epsilon"] = eps
            rounds.to_csv(run / "rounds.csv", index=False)
            runs.append({"method": "fedavg", "seed": seed, "rounds": 2, "num-clients": 10,
                         "run-config": rc, "run_dir": str(run), "stopped": tag != "none"})  # fmt: skip
    runs = pd.DataFrame(runs)
    study = {"name": "f", "file": "f.toml"}
    text = dp_frontier.report(runs, study, "python -m experiments.study f.toml")
    table = pd.read_csv(tmp_path / "results" / "f.csv").set_index("mode")
    assert table.loc["none", "rmse"] == pytest.approx(0.20)
    assert table.loc["local", "rmse"] == pytest.approx(51.0) and table.loc["local", "stopped"] == 3
    assert table.loc["local", "epsilon"] == 310.0
    assert table.loc["local-only (no release)", "rmse"] == pytest.approx(0.31)
    assert set(table["clip"]) == {2.0} and set(table["silos"]) == {10}
    assert (tmp_path / "results" / "f.png").is_file() and (
        tmp_path / "results" / "f_runs.csv"
    ).is_file()
    assert "3 of 3 stopped" in text and "FedAvg, no DP (the papers')" in text
    other_c = {"dp.mode": "local", "dp.local-epsilon": 100.0, "dp.clip": 0.5}
    runs["run-config"] = [other_c if i == 1 else rc for i, rc in enumerate(runs["run-config"])]
    with pytest.raises(ValueError, match=r"f.toml: the frontier's rows differ in clip"):
        dp_frontier.report(runs, study, "x")


def test_cdls_control_at_c2_shares_the_bnlocal_studys_no_dp_runs_and_changes_only_c():
    """CDL's frontiers are party-side DP only (a peer topology has no aggregate), statistics
    local in the bnlocal pair; the C = 2 control's no-DP runs are the very launches (folder and
    run config) of dp_frontier_cdl_bnlocal.toml, so they are trained once and its floors shared."""
    from experiments.simulation_runs import jobs, overrides

    shared, local = _cells("dp_frontier_cdl"), _cells("dp_frontier_cdl_bnlocal")
    control = jobs(_cells("dp_frontier_cdl_bnlocal_clip2"), None)
    for cells, clip in ((shared, 2.0), (local, 0.25)):
        assert {c["method"] for c in cells} == {"cdl"} and {c["rounds"] for c in cells} == {10}
        dp = [c["run-config"] for c in cells if "dp.mode" in c["run-config"]]
        assert {(r["dp.mode"], r["dp.clip"]) for r in dp} == {("local", clip)}
    base = {j["run_dir"]: overrides(j["run-config"]) for j in jobs(local, None)}
    none = [c for c in control if "dp.mode" not in c["run-config"]]
    assert len(none) == 3 and all(base[c["run_dir"]] == overrides(c["run-config"]) for c in none)
    dp = [c for c in control if c not in none]
    assert {c["run-config"]["dp.clip"] for c in dp} == {2.0}
    assert not {c["run_dir"] for c in dp} & set(base)  # its own folders beside the study's
    assert all(c["run-config"]["driving.batchnorm-statistics"] == "local" for c in control)


def test_the_cdl_diagnosis_writes_one_table_per_kind_of_row_and_names_what_is_missing(
    tmp_path, monkeypatch
):
    """experiments/privacy/cdl_dp_diagnosis.py as a study's analysis: a call's silo rows and
    round rows go to their own CSVs, each with only its own columns; a run without its released
    models names the frontier's study command."""
    from experiments.privacy import cdl_dp_diagnosis as diag

    monkeypatch.setattr(diag, "RESULTS", tmp_path)
    silo = {"run": "none-s0", "seed": 0, "silo": 0, "as_released": 0.25, "block0_bn1_own": 0.24,
            "block0_bn1_floored_only": 0.25, "every_bn_own": 0.24, "every_bn_pooled": 0.23,
            "vars_at_floor": 0, "broken": False, "table": "silos"}  # fmt: skip
    rnd = {"run": "none-s0", "round": 1, "bn1_var_median": 0.12, "bn1_var_min": 0.1,
           "table": "rounds"}  # fmt: skip
    runs = pd.DataFrame([silo, silo | {"silo": 1, "as_released": 0.5, "broken": True}, rnd])
    text = diag.report(runs, {"name": "bn"}, "python -m experiments.study bn.toml")
    silos, rounds = pd.read_csv(tmp_path / "bn.csv"), pd.read_csv(tmp_path / "bn_rounds.csv")
    assert len(silos) == 2 and len(rounds) == 1
    assert "round" not in silos and "silo" not in rounds and "table" not in silos
    assert set(silos["command"]) == {"python -m experiments.study bn.toml"}
    assert "none" in text and "0.5" in text
    (tmp_path / "local-1000-s0" / "checkpoints").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="studies/dp_frontier_cdl.toml"):
        diag.diagnose_run("local-1000", 0, tmp_path)
