"""A house's own look added to the semantic view features (envs/vln_appearance.py, issue 41)."""

from __future__ import annotations

import numpy as np
import pytest

from config import parse
from config.schema import ConfigError, merged
from envs.vln_appearance import APPEARANCE_DIM
from envs.vln_data import VLNData
from envs.vln_env import NavBatch, World
from envs.vln_features import ANGLE_DIM, VIEW_DIM, view_rooms
from envs.vln_houses import HouseSpec, embedded_dataset


@pytest.fixture(scope="module")
def houses(tmp_path_factory) -> VLNData:
    spec = HouseSpec(train_houses=3, unseen_houses=2, train_paths=6, val_seen_paths=2, seed=5)
    return VLNData(embedded_dataset(spec, tmp_path_factory.mktemp("cache")))


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_off_leaves_the_features_as_they_were_and_on_appends_a_look_per_house(houses):
    plain, looked = World(houses), World(houses, appearance=1.0)
    assert plain.feature_dim == VIEW_DIM + ANGLE_DIM == World(houses, "", 0.0).feature_dim
    assert looked.feature_dim == VIEW_DIM + APPEARANCE_DIM + ANGLE_DIM
    scans = sorted({e.scan for s in ("train", "val_unseen") for e in houses.episodes(s)})
    for name in scans:
        a, b = plain.features(name), looked.features(name)
        assert b.shape == (*a.shape[:2], VIEW_DIM + APPEARANCE_DIM)
        np.testing.assert_array_equal(b[..., :VIEW_DIM], a)  # the semantic part untouched
        # a property of the house: the same in another process, run or party
        np.testing.assert_array_equal(b, World(houses, appearance=1.0).features(name))
    look = {n: looked.features(n)[..., VIEW_DIM:].reshape(-1, APPEARANCE_DIM) for n in scans}
    room = {n: np.array([str(r) for vp in view_rooms(houses, n) for r in vp]) for n in scans}
    # views of one house share its style; views of one room type share its look in every
    # house (two kitchens look alike); views of two houses and two room types share nothing
    rng = np.random.default_rng(0)
    within, same_kind, across = [], [], []
    for k, n in enumerate(scans):
        m = scans[(k + 1) % len(scans)]
        for _ in range(400):
            i, j = rng.integers(len(look[n]), size=2)
            if i != j and room[n][i] != room[n][j]:
                within.append(_cos(look[n][i], look[n][j]))
            j = rng.integers(len(look[m]))
            (same_kind if room[n][i] == room[m][j] else across).append(_cos(look[n][i], look[m][j]))
    assert len(same_kind) > 50 and len(across) > 50
    assert 0.2 < np.mean(within) < 0.45  # style alone: 1/3
    assert 0.2 < np.mean(same_kind) < 0.45  # room type alone: 1/3
    assert abs(np.mean(across)) < 0.1
    # every view of a place looks different: a follower can tell places apart
    assert len({tuple(np.round(v, 4)) for v in look[scans[0]]}) == len(look[scans[0]])
    # twice the strength, twice the look; the environment hands the model every number
    np.testing.assert_allclose(
        World(houses, appearance=2.0).features(scans[0])[..., VIEW_DIM:],
        2 * looked.features(scans[0])[..., VIEW_DIM:],
        rtol=1e-6,
    )
    nb = NavBatch(looked, houses.episodes("train")[:2])
    assert nb.cand_feat.shape[-1] == looked.feature_dim


def test_appearance_is_refused_on_image_features_and_below_zero():
    rc = {"method": "fedvln", "fedvln.appearance": 1.0}
    assert parse(merged(rc)).fedvln.appearance == 1.0
    with pytest.raises(ConfigError, match="fedvln.appearance"):
        parse(merged({**rc, "fedvln.features-tsv": "/data/resnet.tsv"}))
    with pytest.raises(ConfigError, match="fedvln.appearance"):
        parse(merged({**rc, "fedvln.appearance": -1.0}))
    with pytest.raises(ValueError, match="resnet.tsv"):
        World(None, "/data/resnet.tsv", appearance=1.0)


def test_centralized_refuses_appearance_with_image_features(tmp_path, capsys):
    from experiments.fedvln import centralized

    rc = centralized.main(
        ["--appearance", "1", "--features-tsv", "x.tsv", "--out", str(tmp_path / "run")]
    )
    assert rc == 2 and "--appearance" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_run_made_before_the_flag_resumes_with_it_off():
    """`appearance` 0 is not written into a stage's settings, so runs made before the flag
    existed (their settings have no such key) are reused, not trained again."""
    from experiments.fedvln import centralized

    off = centralized.stage_settings(centralized.parse_args([]), "agent")
    on = centralized.stage_settings(centralized.parse_args(["--appearance", "1"]), "agent")
    assert "appearance" not in off and on["appearance"] == 1.0
    # which look made it (issue 64 changed the formula): a run on another look is retrained
    from envs.vln_appearance import LOOK_VERSION

    assert on["appearance_look"] == LOOK_VERSION and "appearance_look" not in off


def test_a_federated_study_run_on_another_look_is_another_launch():
    from experiments.simulate import _look

    assert _look("fedvln", "fedvln.appearance=1") == 2
    assert _look("fedvln", "") is None and _look("fedavg", "") is None


def test_the_gap_study_pairs_seen_and_unseen_by_seed_and_refuses_bad_fields(tmp_path, capsys):
    import pandas as pd

    from experiments.fedvln import appearance_gap as gap

    rows = [{"strength": s, "seed": k, "checkpoint": "best", "iteration": 1000,
             "val_seen_sr": 40 + d + k, "val_unseen_sr": 40 + k,
             "val_seen_n": 360, "val_unseen_n": 360}
            for s, d in ((0.0, 0.0), (1.0, 8.0)) for k in range(3)]  # fmt: skip
    rows[0]["val_seen_sr"] += 1  # seed 0 of the plain features: +1, the others 0
    t = gap.summarize(pd.DataFrame(rows)).set_index("appearance")
    assert t.loc[0.0, "gap within noise"] and not t.loc[1.0, "gap within noise"]
    assert t.loc[1.0, "gap seen - unseen [95%]"].startswith("+8.0")
    # the interval is at least two 360-episode evaluations' binomial noise, not the seeds'
    # near-zero sd: 1.96 * sqrt(se(48)^2 + se(40)^2) / sqrt(3) = 4.2 points each side
    assert t.loc[1.0, "gap seen - unseen [95%]"] == "+8.0 [+3.8, +12.2]"
    from experiments import study
    from tests.conftest import ROOT

    text = (ROOT / "experiments" / "studies" / "fedvln_appearance.toml").read_text()
    work = tmp_path / "r"
    for old, new, named in (("strength = [0.0, 1.0]", "strength = [-1.0]", "grid.strength"),
                            ("patience = 6", "patience = -1", "grid.patience")):  # fmt: skip
        bad = tmp_path / "bad.toml"
        bad.write_text(text.replace(old, new))
        assert study.main([str(bad), "--work", str(work)]) == 2
        assert named in capsys.readouterr().err
    assert not work.exists()


def test_the_gap_study_trains_a_speaker_beside_the_followers_its_speaker_strengths_name(
    tmp_path, monkeypatch
):
    """The oracle's and Table 5's start models with a look are made by the gap study itself
    (the speaker was a hand-typed command in a study file's comment): a speaker beside the
    follower for the strengths in `speaker-strengths`, with the follower's seed, look,
    evaluation and patience, in the same folder; none for the others."""
    import subprocess
    from pathlib import Path

    import pandas as pd

    from experiments import function_runs, study
    from experiments.fedvln import appearance_gap as gap
    from tests.conftest import ROOT

    launched = []

    def fake_run(cmd, check=False):
        launched.append(cmd[3:])
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{"iteration": 250, "val_seen_sr": 50.0, "val_unseen_sr": 40.0,
                       "val_seen_n": 360, "val_unseen_n": 360}]).to_csv(out / "agent_log.csv")  # fmt: skip
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(gap, "run_child", fake_run)
    monkeypatch.setattr(gap, "untrained", lambda s, k: {"val_seen_sr": 0.0, "val_unseen_sr": 0.0,
                                                        "val_seen_n": 360, "val_unseen_n": 360})  # fmt: skip
    s = study.load(ROOT / "experiments" / "studies" / "fedvln_appearance.toml")
    cells = [c for c in study.cells(s, function_runs.crossed(s)) if c["seed"] == 2]
    function_runs.run_jobs(function_runs.jobs(cells, tmp_path), 1)
    speakers = [c for c in launched if c[1] == "speaker"]
    assert [c[1] for c in launched] == ["agent", "agent", "speaker"], launched
    args = dict(zip(speakers[0][2::2], speakers[0][3::2]))
    assert args == {"--seed": "2", "--appearance": "1.0", "--speaker-iters": "3000",
                    "--eval-every": "250", "--patience": "6", "--out": str(tmp_path / "a1-s2"),
                    "--results-dir": str(tmp_path / "a1-s2")}  # fmt: skip
    # the folder the oracle and Table 5 read their models from is the one it trains in
    for f, field in (("fedvln_oracle_appearance", "models"),
                     ("fedvln_pipeline_appearance", "start_models")):  # fmt: skip
        got = function_runs.fields(ROOT / "experiments" / "studies" / f"{f}.toml")[field]
        assert got.format(seed=2) == "runs/fedvln-appearance/a1-s2/checkpoints"
    assert s["grid"]["work"] == "runs/fedvln-appearance"
