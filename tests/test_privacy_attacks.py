"""The privacy attacks of issue 44 item 4 read what they claim to read: each beats chance on an
undefended case and does not on a defended one (experiments/privacy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def test_neighbours_blocked_reads_alpha_s_current_window():
    from experiments.privacy.fedrl_attack import neighbours_blocked

    obs = np.ones((1, 2, 3, 3), np.uint8)
    obs[0, -1, 0, 1] = 0  # up blocked now
    obs[0, 0, 1, 2] = 0  # right blocked only in the older window of the history
    assert neighbours_blocked(obs).tolist() == [[True, False, False, False]]


@pytest.fixture(scope="module")
def alpha_and_settings():
    import torch

    from config import parse
    from config.schema import merged
    from training.fedrl_party import Alpha
    from training.fedrl_setup import Settings

    torch.set_num_threads(1)

    def make(sigma: float):
        cfg = {"method": "fedrl", "seed": 0, "fedrl.sigma": sigma}
        if sigma == 0:
            cfg["fedrl.insecure-no-noise"] = True
        s = Settings.of(parse(merged(cfg)))
        return Alpha(s), s

    return make


def test_fedrl_attack_reads_alpha_s_view_without_noise_and_not_under_heavy_noise(
    alpha_and_settings,
):
    """Alpha's Q-network (untrained: a fixed function of its window) released without noise
    lets beta's reader tell blocked neighbours apart far above chance; at sigma = 64 (clip C,
    far beyond the Q outputs' spread) it cannot, and the shuffled-label floor sits at 0.5."""
    from experiments.privacy.fedrl_attack import attack_auc, released_pairs

    alpha, s = alpha_and_settings(0.0)
    open_ = attack_auc(*released_pairs(alpha, s, steps=20, seed=0), seed=0)
    assert open_["auc"] > 0.6, open_
    assert abs(open_["auc_shuffled"] - 0.5) < 0.05, open_
    alpha, s = alpha_and_settings(64.0)
    noised = attack_auc(*released_pairs(alpha, s, steps=20, seed=0), seed=0)
    assert abs(noised["auc"] - 0.5) < 0.05, noised


def test_membership_attack_finds_the_images_a_model_memorised_and_not_others():
    """Loss-threshold membership inference (experiments/privacy/driving_membership.py): a
    ResNet-8 fitted hard to 40 images of a silo tells them from 40 unseen images of the same
    silo (AUC well above 0.5); a model fitted the same way to 40 *other* images of that silo
    (the members withheld: the defended case) does not."""
    import torch

    from envs.driving_silos import make_silo
    from experiments.privacy.driving_membership import membership_auc, per_sample_loss
    from models.resnet8 import ResNet8
    from training.steering import LocalOptimizer, train_steering

    torch.set_num_threads(1)
    s = make_silo(0, seed=0, n_train=80, n_test=40, image_size=16)
    members, others = slice(0, 40), slice(40, 80)
    rng = np.random.default_rng(0)

    def auc_of_model_fitted_to(rows):
        torch.manual_seed(0)
        m = ResNet8(16, 1)
        train_steering(m, s.x_train[rows], s.y_train[rows], epochs=100,
                       optim=LocalOptimizer(name="adam", lr=2e-3), batch_size=8, seed=0)  # fmt: skip
        return membership_auc(
            per_sample_loss(m, s.x_train[members], s.y_train[members]),
            per_sample_loss(m, s.x_test, s.y_test),
            rng,
        )

    open_, shuffled = auc_of_model_fitted_to(members)
    withheld, _ = auc_of_model_fitted_to(others)
    assert open_ > 0.7, open_
    assert abs(withheld - 0.5) < 0.15 and open_ - withheld > 0.15, (open_, withheld)
    assert abs(shuffled - 0.5) < 0.2, shuffled


def test_the_membership_study_attacks_each_frontier_run_it_names_and_nothing_else(tmp_path):
    """experiments/privacy/driving_membership.py as a function study: its settings are the
    FedAvg frontier's rows (dp_frontier.toml) and `silo-alone`; a run's row carries the RMSE, ε
    and `stopped` of the very run it attacked (not another draw's CSV), attacked at its last
    finite checkpoint; a missing run names the frontier's study; a run that kept its batch-norm
    statistics local is refused."""
    import json
    import tomllib

    import torch

    from config.schema import merged
    from experiments.privacy.driving_membership import attack
    from models.resnet8 import ResNet8

    studies = Path(__file__).resolve().parents[1] / "experiments" / "studies"
    frontier = tomllib.loads((studies / "dp_frontier.toml").read_text())
    membership = tomllib.loads((studies / "driving_membership.toml").read_text())
    labels = [arm["label"] for arm in frontier["grid"]["arms"]]
    assert membership["grid"]["setting"] == [*labels, "silo-alone"]
    assert membership["grid"]["work"] == frontier["grid"]["work"]

    cfg = merged({}) | {"num-clients": 2, "num-server-rounds": 2, "driving.image-size": 16,
                        "driving.train-per-silo": 16, "driving.test-per-silo": 8,
                        "driving.local-epochs": 1, "dp.mode": "local", "dp.local-epsilon": 100.0}  # fmt: skip
    run = tmp_path / "local-100-s0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(cfg))
    torch.manual_seed(0)
    state = ResNet8(16, 1).state_dict()
    torch.save(state, run / "checkpoints" / "round_1.pt")
    wrecked = {k: v.clone() for k, v in state.items()}
    wrecked["stem.weight"] = wrecked["stem.weight"].fill_(float("nan"))
    torch.save(wrecked, run / "checkpoints" / "round_2.pt")
    pd.DataFrame({"round": [1, 2], "rmse": [0.3, 9.0], "dp_epsilon": [310.0, 566.0]}).to_csv(
        run / "rounds.csv", index=False
    )
    (run / "stopped.txt").write_text("NaN model")
    row = attack("local-100", 0, tmp_path)
    assert (row["mode"], row["knob"], row["epsilon"], row["rmse"]) == ("local", 100.0, 566.0, 9.0)
    assert row["stopped"] and row["attacked_round"] == 1
    assert 0.0 <= row["auc"] <= 1.0 and 0.0 <= row["auc_shuffled"] <= 1.0
    with pytest.raises(FileNotFoundError, match="studies/dp_frontier.toml"):
        attack("central-0.1", 0, tmp_path)
    with pytest.raises(FileNotFoundError, match="studies/dp_frontier.toml"):
        attack("silo-alone", 0, tmp_path)  # its silos are the no-DP run's
    (tmp_path / "none-s0").mkdir()
    (tmp_path / "none-s0" / "config.json").write_text(json.dumps(cfg | {"dp.mode": "none"}))
    alone = attack("silo-alone", 0, tmp_path)
    assert (alone["mode"], alone["epsilon"]) == ("silo alone (not released)", 0.0)
    assert 0.0 <= alone["auc"] <= 1.0
    (run / "config.json").write_text(json.dumps(cfg | {"driving.batchnorm-statistics": "local"}))
    with pytest.raises(ValueError, match="batchnorm-statistics"):
        attack("local-100", 0, tmp_path)


def test_the_property_study_refuses_what_its_attack_cannot_use():
    """experiments/studies/fedvln_property.toml is checked before anything trains: too few
    houses for 5 folds, no local step, a negative noise std each name the field (the
    runner calls the analysis's `check` on every cell before any run)."""
    from experiments import function_runs
    from experiments.study import analysis_of, cells, load

    study = load(Path(__file__).resolve().parents[1] / "experiments/studies/fedvln_property.toml")
    check = analysis_of(study).check
    cell = cells(study, function_runs.crossed(study))[0]
    check(cell, "p.toml")
    for field, bad in (("houses", 6), ("steps", 0), ("noise", [0.0, -0.01]), ("noise", 0.01)):
        with pytest.raises(ValueError, match=f"p.toml: grid.{field}"):
            check(cell | {field: bad}, "p.toml")


def test_property_attack_reads_a_house_s_rooms_from_its_language_encoder_update():
    """Property inference on FedVLN releases (experiments/privacy/fedvln_property.py): 30
    generated houses each adapt an untrained follower 3 steps on their own routes; from the
    language-encoder update alone (fed-lan's release) a reader tells which room types a house
    has well above chance; with noise far above the update's size on every released number
    (the defended case) it cannot."""
    import torch

    from envs.vln_houses import HouseSpec
    from experiments.privacy.fedvln_property import attack, features, releases, room_types
    from models.envdrop import Follower, FollowerSize
    from training.vln_house import house_names, open_setup

    torch.set_num_threads(1)
    setup = open_setup("", "", HouseSpec(train_houses=30, unseen_houses=1, seed=7_100))
    names = house_names(setup)[0]
    torch.manual_seed(0)
    follower = Follower(FollowerSize(len(setup.vocab), setup.world.feature_dim, 32, 64))
    ups = releases(follower, setup.vocab, setup, names, steps=3, seed=0)
    rooms = [room_types(setup, n) for n in names]
    codes = sorted({c for r in rooms for c in r})
    props = [c for c in codes if 0.2 <= np.mean([c in r for r in rooms]) <= 0.8]
    labels = np.array([[c in r for c in props] for r in rooms], dtype=int)
    x = np.stack([features(ups[n], "lang_encoder.", len(setup.vocab), 0) for n in names])
    open_ = attack(x, labels, seed=0)
    rng = np.random.default_rng(1)
    noised = {n: {k: v + rng.normal(0, 1.0, v.shape) for k, v in ups[n].items()} for n in names}
    xd = np.stack([features(noised[n], "lang_encoder.", len(setup.vocab), 0) for n in names])
    defended = attack(xd, labels, seed=0)
    assert open_["auc"] > 0.65, open_
    assert abs(defended["auc"] - 0.5) < 0.15 and open_["auc"] - defended["auc"] > 0.15, (
        open_,
        defended,
    )


def _relayed_alpha_releases(reproducible: bool, monkeypatch):
    """A short FedRL run (3 rounds, an evaluation) seen as beta and the server see it: every
    C_alpha that alpha sent, in order; and, for the referee only, alpha's un-noised clipped
    output behind each (spied on the release, never available to the attacker)."""
    import torch

    import training.fedrl_party as party_mod
    from config import parse
    from config.schema import merged
    from contracts.fedrl import PLAY
    from training.fedrl_protocol import DirectTransport
    from training.fedrl_setup import Settings

    torch.set_num_threads(1)
    truth: dict[bytes, np.ndarray] = {}
    real = party_mod.release

    def spy(q, clip, sigma, noise=None):
        out = real(q, clip, sigma, noise)
        truth[out.detach().numpy().tobytes()] = real(q, clip, 0.0).detach().numpy()
        return out

    monkeypatch.setattr(party_mod, "release", spy)
    cfg = {
        "method": "fedrl",
        "seed": 3,
        "fedrl.sigma": 16.0,
        "fedrl.envs": 32,
        "fedrl.updates": 2,
        "fedrl.batch-size": 8,
        "fedrl.warmup": 32,
        "fedrl.eval-episodes": 32,
        "fedrl.reproducible-noise": reproducible,
    }
    s = Settings.of(parse(merged(cfg)))
    runner = DirectTransport(s)
    seen = []
    send = runner.proto._send

    plays: dict[int, list] = {}  # an evaluation's releases, per play (`c-alpha#<play>`)

    def relay(role, step, data=None, theta_g=None, evaluation=False, **conf):
        out = send(role, step, data, theta_g=theta_g, evaluation=evaluation, **conf)
        if role == "alpha" and out[0].get("c-alpha") is not None:
            seen.append(np.array(out[0]["c-alpha"]))
        for k, v in out[0].items() if role == "alpha" else ():
            if k.startswith(f"c-alpha{PLAY}") and v is not None:
                plays.setdefault(int(k.split(PLAY)[1]), []).append(np.array(v))
        return out

    runner.proto._send = relay
    for rnd in range(1, 4):
        runner.round(rnd == 3)
    runner.evaluate("valid")
    # the adversary read the code: the plays of a chain draw from consecutive blocks of
    # counts, in play order (training/fedrl_party.start_plays), so it orders them that way
    for i in sorted(plays):
        seen.extend(plays[i])
    return s, seen, [truth[c.tobytes()] for c in seen]


@pytest.mark.parametrize("reproducible", [True, False])
def test_the_adversary_who_read_the_code_regenerates_alphas_noise_only_in_study_mode(
    reproducible, monkeypatch
):
    """Kerckhoffs (issue 61): the attacker has the code, the run config (its seed) and every
    C_alpha relayed, in order. It regenerates the study mode's noise for candidate message
    counts (the first is the run's first message; each next within 4 of the last) and keeps
    the candidate that leaves the least energy. In study mode it recovers alpha's un-noised
    outputs to float32 rounding; in a default run (alpha's own secret key) it recovers
    nothing: what it is left with is as far from alpha's outputs as the noise itself."""
    from experiments.privacy.fedrl_derandomize import derandomize

    s, seen, truth = _relayed_alpha_releases(reproducible, monkeypatch)
    assert len(seen) > 50  # training and evaluation releases both
    rest, _ = derandomize(seen, s.sigma, s.seed, guess=1, window=0, clip=s.clip_bound, joint=1)
    err = np.array([np.abs(r - t).max() for r, t in zip(rest, truth)])
    if reproducible:
        assert (err < 1e-3).all(), np.quantile(err, [0.5, 0.9, 1])
    else:
        assert (err > 1.0).all(), np.quantile(err, [0, 0.5])  # sigma 16: noise left everywhere
        rms = np.sqrt(np.mean([np.square(r - t).mean() for r, t in zip(rest, truth)]))
        assert rms > s.sigma  # worse than not subtracting at all (rms sigma)
