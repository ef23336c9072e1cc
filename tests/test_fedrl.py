"""FedRL: the noise mechanism, the accountant, what each party sends, and protocol parity."""

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

import training.fedrl_party as party_mod
from clients import policy
from clients.app import app
from clients.audit import read
from config import parse
from config.schema import ConfigError, merged
from contracts.fedrl import PLAY, SENDS
from models.fedrl_nets import SharedMLP
from server import fedrl_run as fedrl_server
from tests.conftest import RESEARCH, InProcessGrid, assert_logged_as_sent
from tests.fedrl_parity import assert_flower_equals_local
from training.fedrl_party import Alpha, Beta
from training.fedrl_privacy import Ledger, SecretNoise, SeededNoise, epsilon, new_key, release
from training.fedrl_protocol import DirectTransport, Protocol
from training.fedrl_setup import Settings

SMALL = {
    "method": "fedrl",
    "num-server-rounds": 4,
    "fedrl.warmup": 32,
    "fedrl.envs": 8,
    "fedrl.act-steps": 2,
    "fedrl.updates": 3,
    "fedrl.batch-size": 8,
    "fedrl.eval-episodes": 6,
    "fedrl.max-steps": 6,
    "fedrl.target-update": 2,
    "eval-every": 2,
}


def test_release_bounds_then_noises_and_keeps_the_ranking():
    q = torch.tensor([[30.0, -40.0, 0.0, 0.0], [0.3, 0.1, -0.2, 0.0]])
    clipped = release(q, clip=10.0, sigma=0.0)
    assert clipped[0].norm() == pytest.approx(10.0) and torch.equal(clipped[1], q[1])
    assert clipped.argmax(1).tolist() == q.argmax(1).tolist()
    base = release(q.repeat(5000, 1), clip=10.0, sigma=0.0)
    key = new_key()
    for source in (SecretNoise(key, 1), SeededNoise(0, 0, 1)):  # default, study mode
        noise = release(q.repeat(5000, 1), clip=10.0, sigma=2.0, noise=source) - base
        assert noise.std().item() == pytest.approx(2.0, rel=0.03)
        assert abs(noise.mean().item()) < 0.05
        assert abs(stats.kurtosis(noise.ravel().numpy())) < 0.2  # Gaussian, not uniform
    # the same key, message and draw: the same noise (a resume continues); any other: not
    a, b = SecretNoise(key, 1), SecretNoise(key, 1)
    assert torch.equal(a.normal((3, 4)), b.normal((3, 4)))
    assert not torch.equal(a.normal((3, 4)), SecretNoise(key, 2).normal((3, 4)))
    assert not torch.equal(
        SecretNoise(new_key(), 1).normal((3, 4)), SecretNoise(key, 1).normal((3, 4))
    )


def test_epsilon_grows_with_releases_and_shrinks_with_noise():
    e1, e10 = epsilon(1, 1.0, 0.5, 1e-5), epsilon(10, 1.0, 0.5, 1e-5)
    assert 0 < e1 < e10
    assert epsilon(10, 4.0, 0.5, 1e-5) < e10
    assert epsilon(0, 1.0, 0.5, 1e-5) == 0.0
    led = Ledger(4)
    led.add(np.array([0, 1, 1, 5]))  # id 5 is slot 1 of the ring
    assert led.max_releases() == 3
    led.reset_slots(np.array([1]))
    assert led.counts[1] == 0 and led.max_releases() == 3  # a retired record still counts


@pytest.mark.parametrize(
    "override, key",
    [
        ({"fedrl.windows": "3,4"}, "fedrl.windows"),
        ({"fedrl.action-mode": "both"}, "fedrl.action-mode"),
        ({"fedrl.train-maps": "9-2"}, "fedrl.train-maps"),
        ({"fedrl.test-maps": "7000-9000"}, "fedrl.test-maps"),
        ({"fedrl.envs": 0}, "fedrl.envs"),
    ],
)
def test_bad_fedrl_config_names_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        fedrl_server.check_config(parse(merged({"method": "fedrl", **override})))


def _spy_release(monkeypatch):
    """Record every noised output `release` produces inside the parties."""
    produced = []

    def spy(q, clip, sigma, generator=None):
        out = release(q, clip, sigma, generator)
        if sigma > 0:
            produced.append(out.detach().numpy().copy())
        return out

    monkeypatch.setattr(party_mod, "release", spy)
    return produced


def _contains(haystack: list, arr: np.ndarray) -> bool:
    rows = arr.reshape(-1, arr.shape[-1])
    pool = np.concatenate([p.reshape(-1, p.shape[-1]) for p in haystack])
    return all((np.abs(pool - r).max(1) == 0).any() for r in rows)


@pytest.mark.slow
def test_parties_send_only_noised_q_outputs_targets_theta_g_and_ids(monkeypatch, tmp_path):
    produced = _spy_release(monkeypatch)
    cfg = merged({**SMALL, "out-dir": str(tmp_path)})
    grid = InProcessGrid(app, cfg, 2)
    fedrl_server.run(grid, parse(cfg), "fedrl")
    assert assert_logged_as_sent(grid) == len(grid.replies)  # each party's own log agrees
    logged = [
        r for r in read(policy.Policy().state_root() / "audit" / "partition-0.jsonl") if r["step"]
    ]
    released = [r for r in logged if any(a["name"].startswith("c-") for a in r["arrays"])]
    assert released and all(r["sigma"] == 1.0 and r["clip"] == 10.0 for r in released)
    spent = [r["epsilon"] for r in released]  # the privacy spent by each release, as it grew
    assert spent[-1] > 0 and spent == sorted(spent)
    # one ledger: the server's figures are the party's own, every round from the first
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    assert (
        rounds["alpha-privacy-epsilon"].notna().all()
        and (rounds["alpha-privacy-epsilon"] > 0).all()
    )
    assert rounds["alpha-privacy-epsilon"].iloc[-1] == pytest.approx(spent[-1])
    # what each message cost the node (clients/costs.py), for experiments/bench/message_cost.py
    cost = [r["cost"] for r in logged]
    assert all(c["process_age_s"] > 0 and c["handler_s"] >= c["work_s"] for c in cost)
    assert max(c["work_s"] for c in cost) > 0
    assert all({"rebuild_s", "save_s", "state_s"} <= set(c) for c in cost)
    mlp_keys = set(SharedMLP(8, 2, 4).state_dict())
    role = {5000: "alpha", 5001: "beta"}
    seen, sent_names = set(), {}
    for sent, rep in zip(grid.sent, grid.replies):
        if sent.metadata.message_type == "query":
            continue
        who, step = role[sent.metadata.dst_node_id], str(sent.content["config"]["step"])
        seen.add((who, step))
        assert set(rep.content.array_records) <= {"data", "theta-g"}
        # an evaluation's arrays are named `name#play` (contracts/fedrl.play_key)
        data = {k.split(PLAY)[0]: v.numpy() for k, v in rep.content["data"].items()}
        assert set(data) <= SENDS[(who, step)]
        sent_names.setdefault((who, step), set()).update(data)
        for name, arr in data.items():
            if name.startswith("c-"):  # a Q output: it went through the noise, as sent
                assert _contains(produced, arr), f"{who} sent an un-noised {name} in {step}"
            elif name in ("a-alpha", "a-beta"):  # action ids
                assert arr.dtype.kind == "i" and arr.min() >= -1 and arr.max() < 4
            else:
                assert name == "y" and who == "alpha"  # the targets, only from alpha
        if "theta-g" in rep.content:
            assert set(rep.content["theta-g"]) == mlp_keys  # the shared MLP and nothing else
        assert set(rep.content.config_records) == set()
        if (
            "metrics" in rep.content
        ):  # scalars only: losses, privacy, training and evaluation scores
            assert all(isinstance(v, float) for v in rep.content["metrics"].values())
    assert seen == set(SENDS)  # every step of the protocol ran, every allowed array was sent
    assert sent_names == SENDS
    # the server keeps only theta_g: its checkpoints hold the MLP's keys, no Q-network
    ckpt = torch.load(tmp_path / "checkpoints" / "round_0004.pt")
    assert set(ckpt) == mlp_keys
    conf = json.loads((tmp_path / "config.json").read_text())
    assert (
        conf["privacy"]["alpha-privacy-epsilon"] > 0 and conf["privacy"]["beta-privacy-epsilon"] > 0
    )
    assert conf["maps"]["valid"]["used"] == 800 and conf["rules"] == "paper"
    assert conf["privacy"]["delta"] == 1e-5


@pytest.mark.slow
@pytest.mark.slow
def test_a_party_computes_on_pinned_kernels_whatever_its_launcher_set(tmp_path):
    """Issue 63: a deployed Table-1 run and the same run simulated disagreed (test SuccRate
    82.6 vs 83.6) because one launcher pinned the floating-point kernels in its environment and
    the other did not. The party pins them itself (training/numerics.py), so a fresh process
    launched without the pin computes what one launched with it does, to the last bit (the
    losses differ in the 8th digit by round 3 when it does not)."""
    import os
    import subprocess

    from training.numerics import PINNED

    runs = []
    for name, extra in (("bare", {}), ("pinned", PINNED)):
        env = {k: v for k, v in os.environ.items() if k not in PINNED}
        out = tmp_path / name
        code = (
            f"from tests.fedrl_parity import flower_rounds_here; flower_rounds_here({str(out)!r})"
        )
        subprocess.run([sys.executable, "-c", code], env={**env, **extra}, check=True)
        runs.append(pd.read_csv(out / "rounds.csv"))
    losses = [c for c in runs[0].columns if c.startswith("loss-")]
    assert losses and runs[0][losses].notna().any().all()
    pd.testing.assert_frame_equal(runs[0][losses], runs[1][losses], check_exact=True)


def test_flower_exchange_equals_the_single_process_run(tmp_path):
    """Same config, same seeds: the Flower app and experiments/fedrl/local compute the same."""
    flower, _ = assert_flower_equals_local(merged({**SMALL, "out-dir": str(tmp_path)}), tmp_path)
    # warm-up 32 transitions, 16 per round, ids drawn from those held before a round's last
    # step: updates in rounds 3 and 4, K x batch each
    assert flower["train-samples"].iloc[-1] == 2 * 3 * 8
    assert flower["updates"].iloc[-1] == 2 * 3
    assert (flower["bytes_up"] > 0).all()


def test_state_survives_serialisation_and_targets_really_update():
    s = Settings.of(parse(merged({**SMALL})))
    alpha, beta = Alpha(s), Beta(s)
    local = DirectTransport(s)
    local.alpha, local.beta = alpha, beta
    for _ in range(4):
        local.round()
    assert alpha.counters["updates"] == 6  # 2 update rounds (3 and 4) x K=3
    # target-update=2: after 6 updates the targets equal the online networks
    for a, b in zip(alpha.q.parameters(), alpha.q_target.parameters()):
        assert torch.equal(a, b)
    c2 = Alpha(s, restoring=True)
    c2.load_arrays(alpha.state_arrays())
    assert c2.counters == alpha.counters
    # the secret noise key comes back with the party's state (a resume continues its noise);
    # another party, or the same party created afresh, draws its own
    assert c2.noise_key == alpha.noise_key and len(alpha.noise_key) == 32
    assert Alpha(s).noise_key != alpha.noise_key != beta.noise_key
    assert np.array_equal(c2.replay.get(np.arange(48))["r"], alpha.replay.get(np.arange(48))["r"])
    assert np.array_equal(c2.world.pos, alpha.world.pos)
    ids = np.arange(8).reshape(1, 8)
    c, c_next = beta.q_outputs(ids)
    y1, *_ = alpha.update(ids, c, c_next, None)
    y2, *_ = c2.update(ids, c, c_next, None)
    assert np.allclose(y1, y2)
    assert alpha.counters["updates"] == 7  # odd: the online network moved past its target
    assert not all(
        torch.equal(a, b) for a, b in zip(alpha.q.parameters(), alpha.q_target.parameters())
    )


def test_joint_action_mode_moves_both_agents_from_alphas_mlp(tmp_path):
    cfg = merged(
        {
            **SMALL,
            "fedrl.action-mode": "joint-action",
            "fedrl.windows": "5,3",
            "out-dir": str(tmp_path),
        }
    )
    s = Settings.of(parse(cfg))
    local = DirectTransport(s)
    for _ in range(3):
        local.round()
    assert s.n_actions == 16 and local.alpha.mlp.heads[0].out_features == 16
    n = local.beta.counters["transitions"]  # beta stores a step when alpha's actions reach it
    assert n == local.alpha.counters["transitions"] - s.envs
    a_alpha = local.alpha.replay.get(np.arange(n))["a"]
    a_beta = local.beta.replay.get(np.arange(n))["a"]
    assert np.array_equal(a_alpha, a_beta) and a_alpha.max() >= 4  # beta stores joint actions
    assert local.alpha.world.obs_alpha.shape[-1] == 5  # the reference's swapped windows


@pytest.mark.slow
def test_a_party_sending_nan_stops_the_run_with_its_name(monkeypatch, tmp_path):
    """A non-finite Q output is not relayed to the other party: the run fails, naming who."""
    real_act = Beta.act

    def nan_act(self, prev, c_alpha=None):
        c, a = real_act(self, prev, c_alpha)
        c[0, 0] = np.nan
        return c, a

    monkeypatch.setattr(Beta, "act", nan_act)
    cfg = merged({**SMALL, "out-dir": str(tmp_path)})
    with pytest.raises(
        fedrl_server.FederationError,
        match="beta sent non-finite values in 'act' in round 1: c-beta",
    ):
        fedrl_server.run(InProcessGrid(app, cfg, 2), parse(cfg), "fedrl")


def test_in_paper_mode_beta_acts_on_its_federated_q_with_alphas_c():
    """Sec. 4's testing procedure: beta's greedy move is the argmax of Q_f^beta([C_alpha | Q_hat_beta])."""
    s = Settings.of(parse(merged({**SMALL, "fedrl.sigma": 1.0})))
    local = DirectTransport(s)
    for _ in range(3):
        local.round()
    beta, alpha = local.beta, local.alpha
    beta.start_plays({0: ("valid", "last")})
    alpha.start_plays({0: ("valid", "last")})
    with alpha.playing(0):
        c_alpha = alpha.observe(alpha.eval_world)
    with beta.playing(0):
        _, a_beta = beta.eval_act(None, c_alpha, test_noise=False)
        with torch.no_grad():
            own = release(beta.q(torch.as_tensor(beta.eval_world.obs_beta)), s.clip_bound, 0.0)
            want = beta.mlp(torch.as_tensor(c_alpha), own, 1).argmax(1).numpy()
        assert np.array_equal(a_beta, want)
        with pytest.raises(ValueError, match="needs C_alpha"):
            beta.eval_act(None, None)
    # in training too, beta's moves are not the argmax of its basic Q_beta alone
    n = beta.counters["transitions"]
    assert n > 0 and len(set(beta.replay.get(np.arange(n))["a"].tolist())) == 4


@pytest.mark.parametrize("method", ["dqn-alpha", "fcn-alpha", "dqn-full", "random-both"])
def test_baselines_move_beta_like_fedrl_does(method):
    """Like for like: beta moves in every method that FedRL's beta moves in (paper mode)."""
    from training.fedrl_baselines import make, play

    s = Settings.of(parse(merged({**SMALL})))
    runner = make(method, s)
    for _ in range(3):
        runner.round()
    moved = []
    policy = runner.policy(runner.net) if hasattr(runner, "net") else None
    w = s.world("valid")
    start = w.pos[:, 1].copy()
    for t in range(3):
        w.step(*(policy(w, t) if policy else (np.zeros(w.B, int), np.zeros(w.B, int))))
    moved = (w.pos[:, 1] != start).any(1)
    assert moved.any(), f"{method}: beta never moved"
    out = play(s, "valid", policy) if policy else runner.evaluate("valid")
    assert 0.0 <= list(out.values())[0] <= 1.0


def test_floors_and_model_selection_report_best_and_last(tmp_path):
    from training.fedrl_baselines import train

    s = Settings.of(parse(merged({**SMALL})))
    rows = train("dqn-alpha", s, 6, eval_every=2, log=None)
    last = rows[-1]
    assert {"test-succ-rate", "best-test-succ-rate", "best-valid-succ-rate", "best-round"} <= set(
        last
    )
    evals = [r["valid-succ-rate"] for r in rows if "valid-succ-rate" in r]
    assert last["best-valid-succ-rate"] == max(evals)
    assert rows[last["best-round"] - 1]["valid-succ-rate"] == max(evals)
    floor = train("random-alpha", s, 6, log=None)
    assert len(floor) == 1 and 0 <= floor[0]["best-test-succ-rate"] <= 1


def test_a_partly_random_policy_is_scored_over_several_evaluation_streams():
    """Issue 66: one stream of DQN-alpha's random beta per seed made three networks score the
    same by chance (sd 0.0). The score is the mean over EVAL_STREAMS streams, the first being
    the one stream of before; a greedy play (DQN-full) has one stream and no `-streams` key."""
    from experiments.fedrl.table_runs import streams_of
    from training.fedrl_baselines import EVAL_STREAMS, eval_streams, make, play

    s = Settings.of(parse(merged({**SMALL})))
    runner = make("dqn-alpha", s)
    for _ in range(3):
        runner.round()
    out = runner.evaluate("valid")
    streams = out["valid-succ-rate-streams"]
    assert len(streams) == EVAL_STREAMS >= 3 and eval_streams("dqn-alpha", s) == EVAL_STREAMS
    assert out["valid-succ-rate"] == pytest.approx(np.mean(streams))
    assert streams[0] == play(s, "valid", runner.policy(runner.net))["succ-rate"]  # as before
    assert len(set(out["valid-avg-reward-streams"])) > 1  # the streams move the score
    full = make("dqn-full", s)
    full.round()
    assert "valid-succ-rate-streams" not in full.evaluate("valid")
    assert eval_streams("dqn-full", s) == eval_streams("fedrl", s) == 1
    floor = make("random-alpha", s).evaluate("valid")
    assert len(floor["valid-succ-rate-streams"]) == EVAL_STREAMS
    # the fingerprint names the streams only where there are several (FedRL's cache holds)
    assert streams_of("fedrl", s) == {} and streams_of("dqn-alpha", s)
    # no stream is another stream shifted by some steps (numpy ignores trailing zero words)
    from training.fedrl_baselines import stream_ids

    ids = stream_ids(5, EVAL_STREAMS)
    draws = {
        (st, t): tuple(np.random.default_rng([0, *st, t]).integers(0, 4, 32))
        for st in ids
        for t in range(40)
    }
    assert len(set(draws.values())) == len(draws)


STUDY_FILE = """
name = "fedrl_table1"
runs = "fedrl-gridworld"
analysis = "experiments.fedrl.table1"
[grid]
sizes = [8]
rules = ["paper"]
seeds = [0, 1]
methods = ["random-both", "dqn-alpha"]
rounds = 3
eval-every = 1
run-config = { "fedrl.eval-episodes" = 10, "fedrl.warmup" = 32, "fedrl.envs" = 8, "fedrl.batch-size" = 8 }
"""


@pytest.mark.slow
def test_a_study_file_runs_resumes_refuses_overwrite_and_names_bad_fields(
    tmp_path, monkeypatch, capsys
):
    """experiments/study.py on a Table 1 study file: it writes the runs, the table with the
    paper's values and the figure under its own command, refuses to overwrite them, resumes
    every finished run, and names the file and field of a mistake (exit 2, nothing run)."""
    import experiments.fedrl.table1 as t1
    from experiments import study

    monkeypatch.setattr(t1, "RESULTS", tmp_path / "results")
    toml = tmp_path / "t1.toml"
    toml.write_text(STUDY_FILE)
    args = [str(toml), "--jobs", "1", "--work", str(tmp_path / "work")]
    # called as from a notebook or a venv elsewhere: sys.argv[0] is not in the project
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "elsewhere" / "bin" / "pytest"), "-q"])
    assert study.main(args) == 0
    assert f"python -m experiments.study {toml}" in capsys.readouterr().out
    runs = pd.read_csv(tmp_path / "results" / "fedrl_table1_runs.csv")
    assert set(runs.checkpoint) == {"best", "last"} and runs.seed.nunique() == 2
    assert set(runs.split) == {"test"}  # generated maps hold the paper's test split
    assert set(runs.command) == {
        f"python -m experiments.study {toml} --jobs 1 --work {tmp_path / 'work'}"
    }
    table = pd.read_csv(tmp_path / "results" / "fedrl_table1.csv")
    dqn = table[(table.method == "DQN-alpha") & (table.metric == "SuccRate %")].iloc[0]
    assert str(dqn["8x8 paper"]) == "88.27" and "±" in dqn["8x8 ours best"]
    assert (tmp_path / "results" / "fedrl_table1_paper.png").stat().st_size > 0
    assert study.main(args) == 2 and "--force" in capsys.readouterr().err  # no silent overwrite

    def retrain(job):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(t1, "one_run", retrain)
    assert study.main(args + ["--force"]) == 0  # every run resumed from --work
    for bad, named in (
        (STUDY_FILE + 'map-dir = "no/such/dir"\n', "grid.map-dir"),
        (STUDY_FILE.replace('"dqn-alpha"', '"dqn-alfa"'), "grid.methods"),
        (STUDY_FILE.replace("rounds = 3", "rounds = 0"), "grid.rounds"),
        (STUDY_FILE.replace("fedrl.warmup", "fedrl.warm-up"), "grid.run-config"),
        (STUDY_FILE.replace("[grid]", "[grids]"), "grids"),
        (STUDY_FILE.replace('runs = "fedrl-gridworld"', 'runs = "gridworld"'), "runs ="),
    ):
        toml.write_text(bad)
        assert study.main(args + ["--force"]) == 2
        err = capsys.readouterr().err
        assert str(toml) in err and named in err, (named, err)


@pytest.mark.slow
def test_the_server_relays_only_well_formed_arrays(monkeypatch, tmp_path):
    """Action ids out of range or an extra array are not relayed to the other party."""
    real_act = Beta.act

    def bad_act(self, prev, c_alpha=None):
        c, a = real_act(self, prev, c_alpha)
        return c, a + 100

    monkeypatch.setattr(Beta, "act", bad_act)
    cfg = merged({**SMALL, "out-dir": str(tmp_path)})
    with pytest.raises(fedrl_server.FederationError, match="beta sent a-beta that are not action"):
        fedrl_server.run(InProcessGrid(app, cfg, 2), parse(cfg), "fedrl")
    ex = fedrl_server.Exchange.__new__(fedrl_server.Exchange)
    with pytest.raises(fedrl_server.FederationError, match=r"arrays \['secret'\]"):
        ex.check_relayed(
            "alpha", "act", {"a-alpha": np.zeros(2, np.int64), "secret": np.zeros(1)}, None
        )


@pytest.mark.slow
def test_no_noise_needs_the_insecure_flag_and_says_so(tmp_path):
    with pytest.raises(ConfigError, match="insecure-no-noise"):
        fedrl_server.check_config(parse(merged({**SMALL, "fedrl.sigma": 0.0})))
    cfg = merged(
        {
            **SMALL,
            "num-server-rounds": 1,
            "fedrl.sigma": 0.0,
            "fedrl.insecure-no-noise": True,
            "out-dir": str(tmp_path),
        }
    )
    # only parties whose operator allows un-noised release (the research policy) take part
    fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH), parse(cfg), "fedrl")
    privacy = json.loads((tmp_path / "config.json").read_text())["privacy"]
    assert privacy["insecure_no_noise"] is True and privacy["sigma"] == 0


@pytest.mark.parametrize(
    "asks, policy, key",
    [
        # no policy file at all: the paper's protection (sigma >= 1, never un-noised)
        ({"fedrl.sigma": 0.5}, None, "fedrl.min-sigma"),
        ({"fedrl.sigma": 0.0, "fedrl.insecure-no-noise": True}, None, "fedrl.allow-no-noise"),
        ({"fedrl.clip": 50.0}, None, "fedrl.max-clip"),
        # an operator stricter than the paper: sigma 1 is not enough here
        ({"fedrl.sigma": 1.0}, "[fedrl]\nmin-sigma = 2.0\n", "fedrl.min-sigma"),
        ({}, 'methods = ["cdl"]\n', "methods"),
    ],
)
@pytest.mark.slow
def test_a_party_refuses_what_its_operator_does_not_allow(tmp_path, asks, policy, key):
    """Hostile run: whatever the run config asks, each party's own policy bounds what it
    releases; it refuses naming the policy key, the run stops naming the party, and nothing
    it would have released left it (its audit log records the refusal)."""
    from clients.audit import read

    cfg = merged({**SMALL, "num-server-rounds": 1, **asks, "out-dir": str(tmp_path / "out")})
    node = {"policy": str(tmp_path / "policy.toml")} if policy else {}
    state = tmp_path / "state"
    (tmp_path / "policy.toml").write_text(f'state-dir = "{state}"\n{policy or ""}')
    grid = InProcessGrid(app, cfg, 2, node_config_extra=node)
    with pytest.raises(fedrl_server.FederationError, match=rf"Refused: .*policy key '{key}'"):
        fedrl_server.run(grid, parse(cfg), "fedrl")
    status = pd.read_csv(tmp_path / "out" / "clients.csv").status  # named there too
    assert status.str.contains(f"Refused: .*policy key '{key}'").any(), status
    assert not any("data" in r.content for r in grid.replies if not r.has_error())
    if policy:
        log = read(state / "audit" / "partition-0.jsonl")
        assert log[-1]["status"] == "refused" and key in log[-1]["reason"]
        assert all(r["bytes"] == 0 for r in log)  # nothing but identities left this party


@pytest.mark.slow
def test_a_research_policy_lets_a_study_ask_less_noise(tmp_path):
    """The researcher who operates both parties may sweep sigma below the paper's."""
    cfg = merged({**SMALL, "num-server-rounds": 1, "fedrl.sigma": 0.5, "out-dir": str(tmp_path)})
    fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH), parse(cfg), "fedrl")
    assert len(pd.read_csv(tmp_path / "rounds.csv").query("round > 0")) == 1


def _hostile(role: str, step: str, change):
    """The ClientApp, except that party `role` rewrites its reply to `step` with `change`."""
    from flwr.app import Array, ArrayRecord, MetricRecord

    def app_(msg, ctx):
        rep = app(msg, ctx)
        mine = str(ctx.node_config.get("role", "")) or (
            "alpha" if int(ctx.node_config["partition-id"]) == 0 else "beta"
        )
        conf = msg.content["config"]
        if (
            mine == role
            and not rep.has_error()
            and conf.get("step") == step
            and int(conf.get("server-round", 0)) >= 4
        ):  # honest first rounds (an update), then a lie
            data = {k: v.numpy() for k, v in rep.content["data"].items()}
            metrics = dict(rep.content["metrics"]) if "metrics" in rep.content else {}
            theta = rep.content.get("theta-g")
            data, metrics, theta = change(data, metrics, theta)
            rep.content["data"] = ArrayRecord({k: Array(v) for k, v in data.items()})
            if metrics:
                rep.content["metrics"] = MetricRecord(metrics)
            if theta is not None:
                rep.content["theta-g"] = theta
        return rep

    return app_


def _wrong_theta(data, metrics, theta):
    from flwr.app import Array, ArrayRecord

    if theta is None:  # alpha's acts before the round's last step carry no theta_g
        return data, metrics, theta
    return data, metrics, ArrayRecord({k: Array(np.zeros((3, 3), np.float32)) for k in theta})


@pytest.mark.parametrize(
    "role, step, change, culprit",
    [
        (
            "beta",
            "act",
            lambda d, m, t: ({**d, "a-beta": np.full_like(d["a-beta"], 99)}, m, t),
            "a-beta that are not action ids",
        ),
        (
            "beta",
            "act",
            lambda d, m, t: ({**d, "leak": np.ones(3, np.float32)}, m, t),
            r"arrays \['leak'\]",
        ),
        ("alpha", "act", _wrong_theta, "theta_g of other names or shapes"),
    ],
)
@pytest.mark.slow
def test_a_hostile_party_is_stopped_before_its_reply_reaches_the_other(
    tmp_path, role, step, change, culprit
):
    """What the server relays is checked: action ids in range, only the protocol's arrays,
    theta_g of the first round's names and shapes (a wrong one from the start fails in the
    receiving party, which loads it into its own network)."""
    cfg = merged({**SMALL, "num-server-rounds": 4, "eval-every": 4, "out-dir": str(tmp_path)})
    grid = InProcessGrid(_hostile(role, step, change), cfg, 2)
    with pytest.raises(fedrl_server.FederationError, match=culprit):
        fedrl_server.run(grid, parse(cfg), "fedrl")
    if "leak" in culprit:
        assert not any("leak" in m.content.get("data", {}) for m in grid.sent)


def test_evaluation_ends_after_t_m_steps_whatever_alpha_says():
    """An alpha that never reports its episodes over cannot keep the server looping."""
    s = fedrl_server.check_config(parse(merged(SMALL)))
    calls = []

    def send(role, step, data=None, theta_g=None, evaluation=False, **conf):
        calls.append(step)
        return (
            {
                "c-alpha#0": np.zeros(1),
                "c-beta#0": np.zeros(1),
                "a-beta#0": np.zeros(1, np.int64),
                "a-alpha#0": np.zeros(1, np.int64),
            },
            None,
            {"active#0": 1},
        )

    with pytest.raises(fedrl_server.FederationError, match="did not end"):
        Protocol(s, send).play([("valid", "last", True)])
    assert calls.count("eval-act") <= 2 * (s.max_steps + 1)


def test_a_cached_table_run_is_retrained_when_anything_that_decides_it_changes(
    tmp_path, monkeypatch
):
    """The table studies' run cache (experiments/fedrl/table_runs.cached_rows): a run is reused
    only under the same fingerprint; the map file's bytes, its ranges, the rules, any setting,
    a default, the rounds or the exchange version each retrain it (issue 31: a run scored on
    one test range was reported for another)."""
    import experiments.fedrl.table1 as t1
    from experiments.fedrl import table_runs

    maps = tmp_path / "maps.mat"
    maps.write_bytes(b"first maps")
    job = {
        "method": "fedrl", "rules": "paper", "size": 8, "seed": 0, "rounds": 3,
        "eval_every": 1, "map_file": str(maps), "work": str(tmp_path / "work"),
        "ranges": {"train": "0-6399", "valid": "6400-7199", "test": "7200-7999"}, "extra": {},
    }  # fmt: skip
    (tmp_path / "work").mkdir()
    trained = []

    def one_run(j):
        trained.append(j)
        return [{"fingerprint": t1.fingerprint(j), "checkpoint": "best", "test_noise": "",
                 "succ_rate": 0.5, "best_round": 1, "wall_s": 0.0}]  # fmt: skip

    monkeypatch.setattr(t1, "one_run", one_run)
    t1.cached_run(job)
    t1.cached_run(job)
    assert len(trained) == 1  # the same job: reused
    elsewhere = tmp_path / "a clean clone" / "maps.mat"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(maps.read_bytes())
    t1.cached_run({**job, "map_file": str(elsewhere)})
    assert len(trained) == 1  # the same bytes in another folder (CI's checkout): reused
    changes = [
        lambda j: maps.write_bytes(b"other maps"),  # same path, other bytes
        lambda j: j["ranges"].update(test="6800-7199"),
        lambda j: j.update(rules="reference"),
        lambda j: j["extra"].update({"fedrl.lr": 0.0005}),
        lambda j: j.update(rounds=4),
        lambda j: monkeypatch.setattr(table_runs, "EXCHANGE", table_runs.EXCHANGE + 1),
    ]
    for k, change in enumerate(changes, start=2):
        change(job)
        t1.cached_run(job)
        assert len(trained) == k, f"change {k - 1} did not retrain"
        t1.cached_run(job)
        assert len(trained) == k  # and then it is reused


def _fake_simulations(monkeypatch, sim, also=None) -> list:
    """simulation.py replaced by a run that writes 2 finished rounds (and `also(out)`);
    returns the list of commands launched."""
    launched = []

    def fake_run(cmd, check=False):
        launched.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "rounds.csv").write_text("round\n1\n2\n")
        if also:
            also(out)

    monkeypatch.setattr(sim, "run_child", fake_run)
    return launched


def test_a_cached_simulation_is_rerun_when_its_launch_changed(tmp_path, monkeypatch):
    """experiments/simulate.simulate, the cache of the scripts that launch simulation.py: a
    finished run is reused only for the same arguments, defaults and policy."""
    import experiments.simulate as sim

    launched = _fake_simulations(monkeypatch, sim)
    run = tmp_path / "run"
    sim.simulate("fedavg", run, rounds=2, seed=0)
    sim.simulate("fedavg", run, rounds=2, seed=0)
    assert len(launched) == 1
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 2
    policy = tmp_path / "p.toml"
    policy.write_text("[fedrl]\nmin-sigma = 1.0\n")
    sim.simulate("fedavg", run, rounds=2, seed=0, policy=policy)
    sim.simulate("fedavg", run, rounds=2, seed=0, policy=policy)
    assert len(launched) == 3
    policy.write_text("[fedrl]\nmin-sigma = 0.5\n")  # same path, other policy
    sim.simulate("fedavg", run, rounds=2, seed=0, policy=policy)
    assert len(launched) == 4
    # a changed default retrains a run that uses it, not one whose run config sets it
    real = sim.defaults()
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 5
    monkeypatch.setattr(sim, "defaults", lambda: {**real, "driving.lr": 0.5})
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 5
    monkeypatch.setattr(
        sim, "defaults", lambda: {**real, "driving.lr": 0.5, "driving.weight-decay": 9.0}
    )
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 6
    # a key added since the run was made, or removed, is no change (its default keeps the old
    # behaviour); another value of a key both know still is
    mu9 = {**real, "driving.lr": 0.5, "driving.weight-decay": 9.0}
    monkeypatch.setattr(sim, "defaults", lambda: {**mu9, "driving.new-knob": 1})
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 6
    monkeypatch.setattr(sim, "defaults", lambda: {k: v for k, v in mu9.items() if k != "seed"})
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 6
    monkeypatch.setattr(sim, "defaults", lambda: {**mu9, "driving.weight-decay": 1.0})
    sim.simulate("fedavg", run, rounds=2, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 7
    # a run that starts from a checkpoint is another launch once that file holds another one
    monkeypatch.setattr(sim, "defaults", lambda: real)
    start = tmp_path / "best.pt"
    start.write_bytes(b"speaker 1")
    rc = f'fedvln.stage="augment" fedvln.speaker-init="{start}"'
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 8
    start.write_bytes(b"speaker 2")  # the speaker stage was trained again
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 9


def test_a_runs_folder_moved_to_another_checkout_is_reused_not_retrained(tmp_path, monkeypatch):
    """study.json records absolute paths (--out, --policy); a runs folder copied to another
    checkout, or made from a clone, is the same launch: its folder and its policy's bytes
    decide, not where they were. Another policy under the same name still retrains."""
    import json
    import shutil

    import experiments.simulate as sim

    launched = _fake_simulations(monkeypatch, sim)
    policy = tmp_path / "a" / "p.toml"
    policy.parent.mkdir()
    policy.write_text("[fedrl]\nmin-sigma = 1.0\n")
    sim.simulate("fedavg", tmp_path / "a" / "runs" / "r", rounds=2, seed=0, policy=policy)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = tmp_path / "b" / "runs" / "r"
    assert str(tmp_path / "a") in (moved / "study.json").read_text()  # it names the old place
    sim.simulate("fedavg", moved, rounds=2, seed=0, policy=tmp_path / "b" / "p.toml")
    assert len(launched) == 1 and json.loads((moved / "study.json").read_text())["finished"]
    sim.simulate("fedavg", moved, rounds=2, seed=1, policy=tmp_path / "b" / "p.toml")
    assert len(launched) == 2  # another seed is another launch
    (tmp_path / "b" / "p.toml").write_text("[fedrl]\nmin-sigma = 0.5\n")
    sim.simulate("fedavg", moved, rounds=2, seed=1, policy=tmp_path / "b" / "p.toml")
    assert len(launched) == 3


def test_a_finished_run_given_a_higher_cap_goes_on_unless_it_converged(tmp_path, monkeypatch):
    """Raising a study's round cap resumes a run that used up its old cap from its last round
    (no retraining) when that cap was on the evaluation schedule; a run that stopped by its
    convergence rule is reused; a lower cap or another run config is another launch."""
    import json

    import experiments.simulate as sim

    launched = []

    def fake_run(cmd, check=False):
        launched.append(cmd)
        out = Path(cmd[cmd.index("--resume" if "--resume" in cmd else "--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        cap = int(cmd[cmd.index("--rounds") + 1])
        stop = cap if "stop" not in out.name else 2  # "stop": converged after round 2
        (out / "rounds.csv").write_text("round\n" + "".join(f"{r}\n" for r in range(1, stop + 1)))
        conv = {"stopped_early": stop < cap}
        (out / "config.json").write_text(json.dumps({"convergence": conv, "eval-every": 2}))

    monkeypatch.setattr(sim, "run_child", fake_run)
    run = tmp_path / "run"
    sim.simulate("fedavg", run, rounds=2, seed=0)
    (run / "kept.txt").write_text("not retrained")
    sim.simulate("fedavg", run, rounds=4, seed=0)
    assert "--resume" in launched[-1] and launched[-1][launched[-1].index("--rounds") + 1] == "4"
    assert (run / "kept.txt").is_file() and len(pd.read_csv(run / "rounds.csv")) == 4
    sim.simulate("fedavg", run, rounds=4, seed=0)
    assert len(launched) == 2  # the longer run is now this launch
    sim.simulate("fedavg", run, rounds=3, seed=0)  # a lower cap: trained again
    assert len(launched) == 3 and "--resume" not in launched[-1]
    assert not (run / "kept.txt").exists()
    sim.simulate("fedavg", run, rounds=5, seed=0, run_config="driving.lr=0.05")
    assert len(launched) == 4 and "--resume" not in launched[-1]
    stop = tmp_path / "stop"  # converged before its cap of 5: a higher cap changes nothing
    sim.simulate("fedavg", stop, rounds=5, seed=0)
    sim.simulate("fedavg", stop, rounds=8, seed=0)
    assert len(launched) == 5
    # a cap off the evaluation schedule (every 2) evaluated its last round, which the longer
    # run would not: that run is trained again, not extended
    odd = tmp_path / "odd"
    sim.simulate("fedavg", odd, rounds=3, seed=0)
    sim.simulate("fedavg", odd, rounds=6, seed=0)
    assert len(launched) == 7 and "--resume" not in launched[-1]


def test_a_failed_raise_of_the_cap_keeps_the_finished_shorter_run(tmp_path, monkeypatch):
    """Issue 41's pre-exploration: raising the cap failed at its start, and the rerun at the
    old cap then deleted the finished run as another launch's. The shorter run now stands."""
    import json
    import subprocess

    import experiments.simulate as sim

    fail = []

    def fake_run(cmd, check=False):
        if fail:
            raise subprocess.CalledProcessError(1, cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "rounds.csv").write_text("round\n1\n2\n")
        (out / "config.json").write_text(json.dumps({"convergence": {}, "eval-every": 2}))

    monkeypatch.setattr(sim, "run_child", fake_run)
    run = tmp_path / "run"
    sim.simulate("fedavg", run, rounds=2, seed=0)
    (run / "kept.txt").write_text("finished")
    fail.append(True)
    with pytest.raises(subprocess.CalledProcessError):
        sim.simulate("fedavg", run, rounds=4, seed=0)  # the extension fails
    fail.clear()
    sim.simulate("fedavg", run, rounds=2, seed=0)  # the old cap: read, not retrained
    assert (run / "kept.txt").is_file()


def test_a_cached_fedvln_run_of_another_recipe_is_rerun(tmp_path, monkeypatch):
    """The recipe is code, not a run-config default: a finished FedVLN run whose config.json
    records another resolved recipe than today's is trained again; the same one is reused."""
    import json

    import experiments.simulate as sim
    from config import parse
    from config.fedvln_recipe import recipe_record
    from config.schema import merged, parse_overrides

    rc = 'fedvln.stage="augment"'
    now = recipe_record(parse(merged(parse_overrides(rc))).fedvln)
    launched = _fake_simulations(
        monkeypatch, sim, lambda out: (out / "config.json").write_text(json.dumps({"recipe": now}))
    )
    run = tmp_path / "run"
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 1
    cfg = json.loads((run / "config.json").read_text())
    cfg["recipe"]["lr"] *= 10  # trained under an older recipe
    (run / "config.json").write_text(json.dumps(cfg))
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 2
    # issue 64: a run made before the recipe held the share of houses (its config.json gives
    # fedvln.seen-rate itself) and before num-server-rounds and fedvln.seen-rate defaulted to
    # 0 is the same launch when it resolves the same; another share is another launch
    old = {k: v for k, v in now.items() if k != "seen_rate"}
    (run / "config.json").write_text(json.dumps({"recipe": old, "fedvln.seen-rate": 0.2}))
    study = json.loads((run / "study.json").read_text())
    study["defaults"] |= {"num-server-rounds": 5, "fedvln.seen-rate": 0.2}
    (run / "study.json").write_text(json.dumps(study))
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 2
    (run / "config.json").write_text(json.dumps({"recipe": old, "fedvln.seen-rate": 0.5}))
    sim.simulate("fedvln", run, rounds=2, seed=0, run_config=rc)
    assert len(launched) == 3


def test_an_interrupted_simulation_goes_on_and_a_converged_one_counts_as_finished(
    tmp_path, monkeypatch
):
    """experiments/simulate.simulate: the same launch killed after round 1 is resumed with
    simulation.py --resume (not refused, not redone); a run that stopped itself by patience
    before its round cap is finished; an unfinished run of another launch is refused."""
    import json

    import experiments.simulate as sim

    launched = []

    def killed_after_round_1(cmd, check=False):
        launched.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        (out / "rounds.csv").write_text("round\n1\n")
        raise sim.subprocess.CalledProcessError(1, cmd)

    def finishes(cmd, check=False):
        launched.append(cmd)
        (Path(cmd[cmd.index("--resume") + 1]) / "rounds.csv").write_text("round\n1\n2\n3\n")

    run = tmp_path / "run"
    monkeypatch.setattr(sim, "run_child", killed_after_round_1)
    with pytest.raises(sim.subprocess.CalledProcessError):
        sim.simulate("fedavg", run, rounds=3, seed=0)
    with pytest.raises(SystemExit, match="unfinished"):  # another launch's leftovers
        sim.simulate("fedavg", run, rounds=3, seed=1)
    monkeypatch.setattr(sim, "run_child", finishes)
    sim.simulate("fedavg", run, rounds=3, seed=0)
    assert launched[-1][launched[-1].index("--resume") + 1] == str(run)
    sim.simulate("fedavg", run, rounds=3, seed=0)
    assert len(launched) == 2  # finished: reused
    # interrupted, then the checkpoint it starts from was retrained: stale, trained again
    start, later = tmp_path / "best.pt", tmp_path / "later"
    start.write_bytes(b"speaker 1")
    rc = f'fedvln.stage="augment" fedvln.speaker-init="{start}"'
    monkeypatch.setattr(sim, "run_child", killed_after_round_1)
    with pytest.raises(sim.subprocess.CalledProcessError):
        sim.simulate("fedvln", later, rounds=3, seed=0, run_config=rc)
    start.write_bytes(b"speaker 2")
    with pytest.raises(sim.subprocess.CalledProcessError):
        sim.simulate("fedvln", later, rounds=3, seed=0, run_config=rc)
    assert "--resume" not in launched[-1]  # started over, not refused, not resumed

    conv = tmp_path / "conv"
    monkeypatch.setattr(sim, "run_child", killed_after_round_1)
    with pytest.raises(sim.subprocess.CalledProcessError):
        sim.simulate("fedvln", conv, rounds=9, seed=0)
    (conv / "rounds.csv").write_text("round\n1\n2\n")
    (conv / "config.json").write_text(json.dumps({"convergence": {"stopped_early": True}}))
    record = json.loads((conv / "study.json").read_text())
    (conv / "study.json").write_text(json.dumps({**record, "finished": True}))
    sim.simulate("fedvln", conv, rounds=9, seed=0)
    assert len(launched) == 5  # stopped by patience at 2 of 9: finished, not resumed
    # the run converged, but the study was killed before it marked study.json finished
    (conv / "study.json").write_text(json.dumps({**record, "finished": False}))
    sim.simulate("fedvln", conv, rounds=9, seed=0)
    assert len(launched) == 5 and (conv / "rounds.csv").is_file()  # kept, not trained again
    assert json.loads((conv / "study.json").read_text())["finished"] is True


def test_the_td_target_and_the_q_loss_are_the_papers():
    """Eq. (6): Y = r + gamma (1 - done) max_a' Q_f(s', a'); Eq. (4)/(5): mean (Y - Q_f(s, a))^2."""
    import torch

    from training.fedrl_party import q_loss, td_target

    q_next = torch.tensor([[1.0, 3.0], [2.0, -1.0]])
    y = td_target(torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0]), q_next, gamma=0.5)
    assert y.tolist() == [2.5, -1.0]  # 1 + 0.5 * 3; a terminal step keeps its reward
    q_f = torch.tensor([[0.0, 2.5], [4.0, 0.0]])
    assert q_loss(q_f, torch.tensor([1, 0]), y).item() == 12.5  # (0^2 + 5^2) / 2


@pytest.mark.slow
def test_a_party_parses_its_run_config_and_builds_its_settings_once(monkeypatch, tmp_path):
    """Settings.of reads the map file and builds the splits (~1 s in a cold process); each
    message built it twice (the handler, then the audit log's privacy line). Per process it
    is built once now: once per message in deployment, once per run in one process."""
    from clients import fedrl_client

    calls = []
    real = Settings.of.__func__
    monkeypatch.setattr(
        Settings, "of", classmethod(lambda cls, c: (calls.append(1), real(cls, c))[1])
    )
    fedrl_client._SETTINGS.clear()
    cfg = merged({**SMALL, "out-dir": str(tmp_path)})
    grid = InProcessGrid(app, cfg, 2)
    fedrl_server.run(grid, parse(cfg), "fedrl")
    # one for the server (server/fedrl_run.py), one for both parties of this process (was 2 per
    # message: 260 here)
    assert len(grid.replies) > 4 and len(calls) == 2


@pytest.mark.slow
def test_two_default_runs_of_one_config_release_different_noise_and_their_logs_show_it(
    tmp_path, monkeypatch
):
    """Same seed, same config, default noise (each party's own secret key): the parties release
    different bytes, as their audit logs record; under the study flag (and a policy allowing
    it) the same two runs release the same bytes. The server counts each party's epsilon itself
    (training/fedrl_privacy.RelayLedger), evaluation releases included, and it equals the
    party's own log and an independent RDP computation."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    def released(name: str, study: bool) -> tuple[list[str], pd.DataFrame, list[dict]]:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / name / "state"))
        cfg = merged({**SMALL, "fedrl.reproducible-noise": study, "out-dir": str(tmp_path / name)})
        extra = RESEARCH if study else {}
        fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=extra), parse(cfg), "fedrl")
        log = read(policy.Policy().state_root() / "audit" / "partition-0.jsonl")
        mine = [
            r
            for r in log
            if r["run"] and any(a["name"].split(PLAY)[0] == "c-alpha" for a in r["arrays"])
        ]
        return (
            [r["payload_sha256"] for r in mine],
            pd.read_csv(tmp_path / name / "rounds.csv"),
            mine,
        )

    a, rounds, log = released("a", False)
    b, _, _ = released("b", False)
    assert len(a) == len(b) > 10 and not set(a) & set(b)  # no release repeated across the runs
    s1, _, _ = released("c", True)
    s2, _, _ = released("d", True)
    assert s1 == s2  # the study flag repeats to the byte (so the check above can fail)
    last = rounds.iloc[-1]  # the last round evaluated: its releases are in the ledger
    k = int(last["alpha-max-releases"])
    assert k > int(rounds.iloc[0]["alpha-max-releases"])
    acc = rdp_privacy_accountant.RdpAccountant()
    z = 1.0 / (2 * 10.0)  # sigma 1, clip 10: multiplier sigma / 2C
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), k))
    independent = acc.get_epsilon(1e-5)
    assert last["alpha-privacy-epsilon"] == pytest.approx(independent, rel=1e-9)
    assert log[-1]["epsilon"] == pytest.approx(independent, rel=1e-9)  # the party's own log
    assert last["alpha-claimed-epsilon"] == pytest.approx(independent, rel=1e-9)


def test_the_relay_counts_every_release_as_the_party_does_evaluation_included():
    """The server's ledger (RelayLedger, from the rows it relayed) and each party's own ledger
    agree record by record, training transitions and evaluation plays alike; the evaluation's
    releases are in both (a valid play releases each slot's first observation once per play)."""
    s = Settings.of(parse(merged({**SMALL, "fedrl.reproducible-noise": True})))
    run = DirectTransport(s)
    for rnd in range(1, 3):
        run.round(rnd == 2)
    for _ in range(3):
        run.evaluate("valid")  # 6 plays: noise on and off
    relay = run.proto.ledger
    for party in (run.alpha, run.beta):
        mine = party.ledger.counts[: run.proto.transitions + s.envs]
        theirs = relay.train[party.role][: len(mine)]
        assert np.array_equal(np.pad(theirs, (0, len(mine) - len(theirs))), mine), party.role
        assert set(party.eval_ledger.counts) == set(relay.eval[party.role].counts) == {"valid"}
        assert np.array_equal(
            party.eval_ledger.counts["valid"], relay.eval[party.role].counts["valid"]
        )
        # each play releases each slot's first observation once (C); alpha's move in the 3
        # noise-on plays is one more release of it; the 3 noise-off plays moved on un-noised Q
        first = party.eval_ledger.counts["valid"][:, 0]
        assert (first == (9 if party.role == "alpha" else 6)).all()
        assert party.eval_ledger.unnoised == relay.eval[party.role].unnoised == {"valid"}
        assert relay.eval_epsilon(party.role) == np.inf
        assert relay.max_releases(party.role) == party.ledger.max_releases()


@pytest.fixture(scope="module")
def honest_fedrl_rounds(tmp_path_factory) -> pd.DataFrame:
    """rounds.csv of an honest study-mode run, made once for the lying parties it is held to."""
    out = tmp_path_factory.mktemp("honest")
    cfg = merged({**SMALL, "fedrl.reproducible-noise": True, "out-dir": str(out)})
    fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH), parse(cfg), "fedrl")
    return pd.read_csv(out / "rounds.csv")


@pytest.mark.parametrize("lie", [float("nan"), -1.0, 1e308, 0.5])
@pytest.mark.slow
def test_a_party_lying_about_its_epsilon_cannot_move_the_servers_figure(
    tmp_path, lie, caplog, honest_fedrl_rounds
):
    """rounds.csv's epsilon is the server's own count; a party's claim is kept beside it only
    when it can be a figure at all (a number in [0, epsilon of every row it sent]), and a
    claim that differs is named in the round line. NaN, negative and absurd claims never
    reach rounds.csv."""
    import logging

    honest = honest_fedrl_rounds

    from flwr.app import MetricRecord

    def lying_alpha(msg, ctx):  # alpha's every reply from round 3 on claims `lie`
        rep = app(msg, ctx)
        conf = msg.content["config"]
        if (
            int(ctx.node_config["partition-id"]) == 0
            and int(conf.get("server-round", 0)) >= 3
            and "metrics" in rep.content
            and "alpha-claimed-epsilon" in rep.content["metrics"]
        ):
            rep.content["metrics"] = MetricRecord(
                {**dict(rep.content["metrics"]), "alpha-claimed-epsilon": lie}
            )
        return rep

    cfg = merged({**SMALL, "fedrl.reproducible-noise": True, "out-dir": str(tmp_path / "l")})
    grid = InProcessGrid(lying_alpha, cfg, 2, node_config_extra=RESEARCH)
    with caplog.at_level(logging.INFO):
        fedrl_server.run(grid, parse(cfg), "fedrl")
    lied = pd.read_csv(tmp_path / "l" / "rounds.csv")
    assert lied["alpha-privacy-epsilon"].tolist() == honest["alpha-privacy-epsilon"].tolist()
    last = lied.iloc[-1]
    if lie == 0.5:  # a possible figure, but not the server's: kept beside it, and named
        assert last["alpha-claimed-epsilon"] == 0.5
        assert "CLAIM MISMATCH: alpha claims epsilon 0.5" in caplog.text
    else:
        assert np.isnan(last.get("alpha-claimed-epsilon", np.nan))
        assert "impossible" in caplog.text


def test_a_party_cannot_write_the_other_partys_privacy_figures():
    """Whatever privacy-named metrics a reply carries (its own or the other party's), only the
    relay's count and the sender's own checked claim reach the round's metrics."""
    s = Settings.of(parse(merged({**SMALL, "fedrl.reproducible-noise": True})))
    run = DirectTransport(s)
    honest = run.proto._send

    def forging(role, step, data=None, theta_g=None, evaluation=False, **conf):
        out, theta, metrics = honest(
            role, step, data, theta_g=theta_g, evaluation=evaluation, **conf
        )
        if role == "beta":
            metrics = {**metrics, "alpha-privacy-epsilon": 0.0, "alpha-claimed-epsilon": 0.0,
                       "alpha-max-releases": 0.0}  # fmt: skip
        return out, theta, metrics

    run.proto._send = forging
    rows = [run.round(rnd == 2) for rnd in (1, 2)]
    assert rows[-1]["alpha-privacy-epsilon"] == run.proto.ledger.epsilon("alpha") > 0
    assert rows[-1]["alpha-claimed-epsilon"] == pytest.approx(
        run.alpha.privacy()["alpha-claimed-epsilon"]
    )
    assert rows[-1]["alpha-max-releases"] > 0


def test_a_rewound_party_never_releases_two_inputs_under_one_noise():
    """issue 61 review: a run resumed from round k as often as its submitter likes restores the
    key and the counter; the noise also depends on what is released, so the same input gets
    the same draw (a replay teaches nothing) and another input an independent one (the
    difference of two releases is never noise-free)."""
    s = Settings.of(parse(merged({**SMALL, "fedrl.sigma": 16.0})))
    state = Alpha(s).state_arrays()

    def rewound():
        party = Alpha(s, restoring=True)
        party.load_arrays(state)
        return party

    q_a, q_b = torch.zeros(64, 4), torch.zeros(64, 4)
    q_b[:, 0] = 1.0  # another input, one coordinate apart
    one, two = rewound(), rewound()
    c_a, c_b = one.released(q_a, one._generator()), two.released(q_b, two._generator())
    residual = (c_a - c_b) - (q_a - q_b)  # all noise: sd sigma * sqrt(2)
    assert residual.std().item() == pytest.approx(16.0 * 2**0.5, rel=0.15)
    again = rewound()
    assert torch.equal(again.released(q_a, again._generator()), c_a)  # the same input: the same


@pytest.mark.slow
def test_a_partys_state_stays_on_its_nodes_disk_not_in_the_context(tmp_path, monkeypatch):
    """Issue 63: Flower carries context.state to and from every message's process. A party's
    replay, networks and secret key stay in a file on its node's disk (0600, the run's newest
    few kept), the context holds only their token; a party rebuilt from the file on every
    message (as in deployment, a fresh process each) computes the same run to the digit."""
    from flwr.common.serde import recorddict_to_proto

    from clients import fedrl_client, state_store

    def forgetting(msg, ctx):  # a fresh process per message: nothing of the party in memory
        fedrl_client._LIVE.clear()
        return app(msg, ctx)

    def run(name, client, study=True):
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / name / "state"))
        cfg = merged({**SMALL, "fedrl.reproducible-noise": study, "out-dir": str(tmp_path / name)})
        grid = InProcessGrid(client, cfg, 2, node_config_extra=RESEARCH if study else None)
        fedrl_server.run(grid, parse(cfg), "fedrl")
        return grid, pd.read_csv(tmp_path / name / "rounds.csv")

    _, kept = run("kept", app)
    grid, rebuilt = run("rebuilt", forgetting)
    cols = [c for c in kept.columns if c not in ("wall_s",) and "bytes" not in c]
    assert kept[cols].equals(rebuilt[cols])
    grid, _ = run("default", app, study=False)  # the secret key: only on the node's disk
    for ctx in grid.contexts.values():
        assert len(recorddict_to_proto(ctx.state).SerializeToString()) < 4096
        c = parse(ctx.run_config)
        arrays = state_store.get_arrays(ctx, c, fedrl_client.STATE)
        assert "noise.key" in arrays and any(k.startswith("replay.") for k in arrays)
        files = sorted(state_store.live_folder(ctx, c).glob("fedrl-party-*.npz"))
        assert 1 <= len(files) <= state_store.KEEP_LIVE
        assert all(f.stat().st_mode & 0o077 == 0 for f in files)
    ctx = next(iter(grid.contexts.values()))
    c = parse(ctx.run_config)
    state_store._live_file(
        ctx, c, fedrl_client.STATE, state_store.arrays_token(ctx, fedrl_client.STATE)
    ).unlink()
    with pytest.raises(state_store.StateUnreadable, match="is gone"):
        state_store.get_arrays(ctx, c, fedrl_client.STATE)


@pytest.mark.slow
def test_a_fedrl_run_records_the_random_floor_and_its_plots_draw_it(tmp_path, monkeypatch):
    """Issue 66: every run plot carries its floor. Each evaluating round records the paper's
    random baseline on the same split (both agents at random, Table 1's random-both), the same
    figure experiments/fedrl/local.py's random-both gives; the parties' numbers do not move
    (the server plays it on its own stream), and the valid curves draw it."""
    import matplotlib.pyplot as plt

    from server.plots import _draw, load_rounds
    from training.fedrl_baselines import make

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cfg = merged({**SMALL, "fedrl.reproducible-noise": True, "out-dir": str(tmp_path / "run")})
    fedrl_server.run(InProcessGrid(app, cfg, 2, node_config_extra=RESEARCH), parse(cfg), "fedrl")
    rounds = load_rounds(tmp_path / "run")
    s = Settings.of(parse(cfg))
    floor = make("random-both", s).evaluate("valid")["valid-succ-rate"]
    got = rounds["floor-valid-succ-rate"].dropna()
    assert len(got) >= 1 and (got == floor).all()
    fig, ax = plt.subplots()
    _draw(ax, [("run", rounds, "fedrl")], "best-valid-succ-rate-test_noise=on")
    labels = [line.get_label() for line in ax.get_lines()]
    assert "floor: both agents moving at random" in labels
    plt.close(fig)


class _Reborn(DirectTransport):
    """Each message to a party that is rebuilt from its saved arrays first, as a deployed
    party is (a fresh process per message); counts messages per step name."""

    def __init__(self, s):
        super().__init__(s)
        self.steps: list[str] = []

    def send(self, role, step, data=None, theta_g=None, evaluation=False, **conf):
        self.steps.append(step)
        cls = Alpha if role == "alpha" else Beta
        party = cls(self.s, restoring=True)
        party.load_arrays(getattr(self, role).state_arrays())
        party.noise_key = getattr(self, role).noise_key
        setattr(self, role, party)
        return super().send(role, step, data, theta_g, evaluation, **conf)


@pytest.mark.parametrize("mode", ["paper", "joint-action"])
def test_plays_stepped_together_score_and_train_as_plays_one_by_one(mode):
    """Issue 63 item 1: the evaluation's independent plays (test_noise on and off; the last
    and the kept checkpoint) step together, 2 messages a step for all of them, and give the
    study-mode numbers playing them one by one gave: the same scores, the same epsilon, and
    the same training afterwards (each play draws the noise counts it drew alone). Every
    message goes to a party rebuilt from its saved state, as deployed."""
    cfg = {**SMALL, "fedrl.sigma": 1.0, "fedrl.reproducible-noise": True}
    s = Settings.of(parse(merged({**cfg, "fedrl.action-mode": mode})))
    together, alone = _Reborn(s), _Reborn(s)
    for run in (together, alone):
        for _ in range(3):
            run.round()
        run.proto.flush()
        run.proto.keep_best()
        run.round()
        run.proto.flush()
        run.steps.clear()
    plays = [("test", w, noise) for w in ("last", "best") for noise in (True, False)]
    scores = together.proto.play(plays)
    chained = together.steps.count("eval-act")
    one_by_one = {}
    for p in plays:
        one_by_one.update(alone.proto.play([p]))
    assert scores == one_by_one and len(scores) == 4 * 2
    assert together.proto.privacy() == alone.proto.privacy()
    # one chain of 2 messages a step, where the plays took 2 a step each; every play ran its
    # full length (T_m steps), so a play alone sent what a play sent before the chain
    assert alone.steps.count("eval-act") == 4 * chained == 4 * 2 * s.world("test").longest
    for role in ("alpha", "beta"):  # the count goes on from the draws used, once closed
        for run in (together, alone):
            getattr(run, role).close_plays()
        assert getattr(together, role).counters == getattr(alone, role).counters
    after = [run.round(True) for run in (together, alone)]
    assert after[0] == pytest.approx(after[1], nan_ok=True)
    assert set(scores) >= {"best-test-succ-rate-test_noise=off", "test-succ-rate-test_noise=on"}


def test_an_evaluation_message_naming_a_play_that_was_not_started_is_refused():
    s = Settings.of(parse(merged({**SMALL})))
    local = DirectTransport(s)
    local.round()
    with pytest.raises(ValueError, match="play 3 was not started"):
        local.send("beta", "eval-act", {}, plays="3:valid:last:on")
    with pytest.raises(ValueError, match="malformed evaluation play"):
        local.send("beta", "eval-act", {}, plays="0:valid:newest:on", start=True)
    with pytest.raises(ValueError, match="malformed evaluation play"):  # never the train world
        local.send("beta", "eval-act", {}, plays="0:train:last:on", start=True)


def test_a_play_index_is_allowed_only_on_an_evaluations_arrays():
    """What a party may send (contracts/fedrl.not_allowed), checked by the party and the server:
    `name#<play>` in an evaluation step, the bare name in any other."""
    from contracts.fedrl import not_allowed

    assert not_allowed("alpha", "eval-act", ["a-alpha#0", "c-alpha#12"]) == []
    assert not_allowed("alpha", "eval-act", ["a-alpha", "c-alpha#x", "y#0", "a-alpha#"]) == [
        "a-alpha",
        "a-alpha#",
        "c-alpha#x",
        "y#0",
    ]
    assert not_allowed("alpha", "act", ["y", "c-alpha#0"]) == ["c-alpha#0"]
    server = fedrl_server.Exchange.__new__(fedrl_server.Exchange)
    with pytest.raises(fedrl_server.FederationError, match="does not relay"):
        server.check_relayed("beta", "act", {"c-beta#9": np.zeros((8, 4), np.float32)}, None)
    with pytest.raises(fedrl_server.FederationError, match="not action ids"):
        server.check_relayed("beta", "eval-act", {"a-beta#1": np.array([99])}, None)


def test_a_finished_episodes_rows_in_a_play_say_nothing_about_its_observation():
    """A finished slot's frozen observation is not released again at every later step of the
    play (the ledger would count each as a new record): its rows are zeros before the noise and
    its move a constant; the running slots' releases, noise included, are unchanged."""
    import copy

    s = Settings.of(parse(merged({**SMALL, "fedrl.sigma": 1.0, "fedrl.reproducible-noise": True})))
    local = DirectTransport(s)
    local.round()
    local.alpha.start_plays({0: ("valid", "last")})
    out = {}
    for case in ("running", "finished", "finished, other observation"):
        alpha = copy.deepcopy(local.alpha)
        with alpha.playing(0):
            w = alpha.eval_world
            w.active[0] = case == "running"
            if case.endswith("other observation"):
                w.obs_alpha[0] = 255 - w.obs_alpha[0]
            c = alpha.observe(w)
            a, _, _ = alpha.eval_act(np.zeros((w.B, 4), np.float32), np.zeros(w.B, np.int64), True)
        out[case] = (c, a)
    run, fin, other = out["running"], out["finished"], out["finished, other observation"]
    assert np.array_equal(run[0][1:], fin[0][1:]) and np.array_equal(run[1][1:], fin[1][1:])
    assert not np.array_equal(run[0][0], fin[0][0])  # the row changed: noise alone now
    assert np.array_equal(fin[0][0], other[0][0]) and fin[1][0] == other[1][0] == 0


def test_the_message_study_counts_both_protocols_and_sees_any_number_that_differs():
    """Issue 66: experiments/studies/fedrl_messages.toml. The same 3-round run (train, evaluate,
    last) sent one play at a time and chained: a training round sends the same both ways, an
    evaluating round fewer chained, the numbers are equal; a number changed in one protocol's
    run is seen."""
    from experiments.bench import fedrl_messages as fm

    runs = pd.DataFrame(
        [r for p in fm.PROTOCOLS for r in fm.count(p, "../shared/data/gridworld", 8, 3, 2, 0)]
    )
    table = fm.summarize(runs).set_index("rounds")
    assert table.loc["train", "messages_one_by_one"] == table.loc["train", "messages_chained"]
    for kind in ("evaluate", "last"):
        assert table.loc[kind, "messages_chained"] < table.loc[kind, "messages_one_by_one"]
    assert table.loc["run", "same_numbers"]
    numeric = [c for c in runs.columns if c.startswith("valid") and runs[c].notna().any()]
    assert numeric, "the evaluating round scored nothing"
    runs.loc[runs.index[-1], numeric[0]] += 0.01
    assert not fm.same_numbers(runs)
    with pytest.raises(ValueError, match="grid.protocol"):
        fm.check({"protocol": "batched", "size": 8, "rounds": 2, "eval-every": 1}, "f.toml")
    with pytest.raises(ValueError, match="grid.rounds"):
        fm.check({"protocol": "chained", "size": 8, "rounds": 0, "eval-every": 1}, "f.toml")
