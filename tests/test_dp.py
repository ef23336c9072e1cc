"""Differential privacy for the weight-sharing methods (issue 44 item 2): Flower's central-DP
wrapper and clipping mod, Flower's local-DP mod under the party's policy, the accounting, the
budget, and what was actually sent."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from flwr.app import Array, ArrayRecord

from clients import audit, policy
from config import parse
from config.schema import ConfigError, merged
from tests.conftest import InProcessGrid, assert_logged_as_sent

DRIVING = {
    "method": "fedavg",
    "driving.image-size": 24,
    "driving.train-per-silo": 16,
    "driving.test-per-silo": 8,
    "driving.local-epochs": 1,
    "driving.batch-size": 8,
    "num-server-rounds": 2,
    "num-clients": 3,
}


def _run(tmp_path, extra, policy_text=None, method="fedavg"):
    from clients.app import app
    from config.methods import server_module

    cfg = merged({**DRIVING, "method": method, **extra, "out-dir": str(tmp_path / "out")})
    node = {}
    if policy_text is not None:
        path = tmp_path / "policy.toml"
        path.write_text(policy_text)
        node = {"policy": str(path)}
    grid = InProcessGrid(app, cfg, 3, node_config_extra=node)
    server_module(method).run(grid, parse(cfg), method)
    return grid, tmp_path / "out"


def _updates(grid):
    """(message arrays, reply arrays) of every accepted training exchange."""
    by_id = {m.metadata.message_id: m for m in grid.sent}
    out = []
    for rep in grid.replies:
        sent = by_id[rep.metadata.reply_to_message_id]
        if rep.has_error() or sent.metadata.message_type != "train":
            continue
        down = next(iter(sent.content.array_records.values()))
        up = next(iter(rep.content.array_records.values()))
        out.append(({k: v.numpy() for k, v in down.items()}, {k: v.numpy() for k, v in up.items()}))
    return out


def _norm(down, up):
    return math.sqrt(sum(float(np.sum((up[k] - down[k]).astype(np.float64) ** 2)) for k in up))


def test_fixed_denominator_mean_weighs_every_party_one_mth_whoever_is_dropped():
    from strategies.dp import fixed_denominator_mean

    w = ArrayRecord({"a": Array(np.zeros(3, np.float32)), "n": Array(np.array([7], np.int64))})
    ups = [{"a": np.ones(3, np.float32), "n": np.array([9])}, {"a": 2 * np.ones(3, np.float32)}]
    out = fixed_denominator_mean([{"a": u["a"], "n": np.array([9])} for u in ups], w, 4)
    assert np.allclose(out["a"].numpy(), 3 / 4)  # (1 + 2) / 4, not / 2
    assert out["n"].numpy().tolist() == [7]  # a counter keeps the global value


@pytest.mark.slow
def test_central_dp_clips_on_the_party_noises_on_the_server_and_accounts_with_flower(tmp_path):
    from flwr.serverapp import NeighboringRelation, PrivacyConfig, RdpAccountant, SamplingMethod
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    extra = {"dp.mode": "central", "dp.clip": 0.1, "dp.noise-multiplier": 2.0}
    grid, out = _run(tmp_path, extra)
    ups = _updates(grid)
    assert len(ups) == 6
    norms = [_norm(d, u) for d, u in ups]
    assert max(norms) <= 0.1 * 1.001 and min(norms) > 0.09  # clipped by fixedclipping_mod
    rounds = pd.read_csv(out / "rounds.csv")
    rounds = rounds[rounds["round"] > 0]
    ref = RdpAccountant(PrivacyConfig(1e-5, 3, NeighboringRelation.ADD_OR_REMOVE_ONE,
                                      SamplingMethod.NO_AMPLIFICATION))  # fmt: skip
    want = []
    for _ in range(2):
        ref.compose(GaussianPrivacyEvent(noise_multiplier=2.0, sample_size=3, population_size=3))
        want.append(ref.get_privacy_spent().epsilon)
    assert rounds["dp_epsilon"].tolist() == pytest.approx(want)
    assert rounds["dp_releases"].tolist() == [1, 2]
    # the global model moved by the noised mean: not the plain mean of what the parties sent
    round1 = [u for d, u in ups[:3]]
    plain = {k: sum(u[k].astype(np.float64) for u in round1) / 3 for k in round1[0]}
    sent2 = next(iter(grid.sent[-6].content.array_records.values()))  # round 2's model
    gap = [np.abs(sent2[k].numpy() - plain[k]).max() for k in plain if "weight" in k]
    assert max(gap) > 0.05  # std 2.0 * 0.1 / 3 = 0.067 per coordinate, 10^5 coordinates
    for node in range(3):  # each party's log says what its updates carried
        log = audit.read(tmp_path / "node-state" / "fedembodied" / "audit" /
                         f"partition-{node}.jsonl")  # fmt: skip
        train = [r for r in log if r.get("kind") == "train"]
        assert train and all(r["mechanism"].startswith("clip") for r in train)
    assert_logged_as_sent(grid)


@pytest.mark.slow
def test_a_budget_stops_the_run_before_the_release_that_would_exceed_it(tmp_path):
    extra = {"dp.mode": "central", "dp.clip": 0.05, "dp.noise-multiplier": 2.0,
             "num-server-rounds": 4}  # fmt: skip
    from flwr.serverapp import NeighboringRelation, PrivacyConfig, RdpAccountant, SamplingMethod
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    acc = RdpAccountant(PrivacyConfig(1e-5, 3, NeighboringRelation.ADD_OR_REMOVE_ONE,
                                      SamplingMethod.NO_AMPLIFICATION))  # fmt: skip
    acc.compose(GaussianPrivacyEvent(noise_multiplier=2.0, sample_size=3, population_size=3), 2)
    two = acc.get_privacy_spent().epsilon
    grid, out = _run(tmp_path, {**extra, "dp.max-epsilon": two * 1.01})
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["round"].max() == 2  # the third release would have exceeded it
    assert rounds["dp_epsilon"].max() <= two * 1.01
    said = json.loads((out / "config.json").read_text())["stopped"]
    assert "privacy budget" in said and "dp.max-epsilon" in said


@pytest.mark.slow
def test_local_dp_noises_on_the_party_and_the_party_reports_its_epsilon(tmp_path):
    from clients import dp

    extra = {"dp.mode": "local", "dp.clip": 0.5, "dp.local-epsilon": 50.0}
    grid, out = _run(tmp_path, extra, "[dp]\nlocal-epsilon = 50.0\n")
    c = parse(merged({**DRIVING, **extra}))
    std = c.dp.local_std
    assert std == pytest.approx(2 * 0.5 * math.sqrt(2 * math.log(1.25e5)) / 50)
    for down, up in _updates(grid):  # what left: clipped update + N(0, std^2) per coordinate
        big = max(up, key=lambda k: up[k].size)
        diff = (up[big] - down[big]).astype(np.float64).ravel()
        assert np.std(diff) == pytest.approx(std, rel=0.1)
    replies = [r for r in grid.replies if not r.has_error() and r.content.metric_records]
    eps = sorted({round(float(next(iter(r.content.metric_records.values()))[dp.EPSILON]), 6)
                  for r in replies if dp.EPSILON in next(iter(r.content.metric_records.values()))})  # fmt: skip
    assert eps == [round(dp.spent(c, 1), 6), round(dp.spent(c, 2), 6)]
    assert dp.spent(c, 2) > dp.spent(c, 1) > 0
    rounds = pd.read_csv(out / "rounds.csv")  # the server's own count = the parties' ledger
    assert rounds["dp_epsilon"].tolist() == pytest.approx([dp.spent(c, 1), dp.spent(c, 2)])
    assert rounds["dp_epsilon_claimed"].tolist() == pytest.approx(rounds["dp_epsilon"].tolist())
    import dp_accounting  # and an independent computation: 2 Gaussian releases, z = std / 2C
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(std / (2 * 0.5)), 2)
    )
    assert rounds["dp_epsilon"].iloc[-1] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    log = audit.read(tmp_path / "node-state" / "fedembodied" / "audit" / "partition-0.jsonl")
    last = [r for r in log if r.get("kind") == "train"][-1]
    assert last["releases"] == 2 and last["epsilon"] == pytest.approx(dp.spent(c, 2))
    assert last["sigma"] == pytest.approx(std)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["cdl", "gossip"])
def test_party_side_dp_on_a_peer_topology_noises_what_each_silo_sends(
    tmp_path, method, monkeypatch
):
    """CDL and gossip have no server aggregate to noise: each silo clips and noises the model it
    sends its neighbours on its own machine (Flower's LocalDpMod), its ledger counts the
    releases, the relay's round line is the silos' own figure, and what the relay forwards has
    its noised BatchNorm variances floored (post-processing)."""
    import strategies.decentralized as relay
    from clients import dp
    from strategies.dp import VAR_FLOOR

    floored = []
    real = relay.floor_variance_arrays
    monkeypatch.setattr(relay, "floor_variance_arrays", lambda a: floored.append(a) or real(a))
    extra = {"dp.mode": "local", "dp.clip": 0.5, "dp.local-epsilon": 50.0, "topology": "ring"}
    grid, out = _run(tmp_path, extra, "[dp]\nlocal-epsilon = 50.0\n", method=method)
    c = parse(merged({**DRIVING, "method": method, **extra}))
    std = c.dp.local_std
    ups = _updates(grid)
    assert len(ups) == 6  # 3 silos x 2 rounds, every one noised
    for down, up in ups:
        big = max(up, key=lambda k: up[k].size)
        assert np.std((up[big] - down[big]).astype(np.float64)) == pytest.approx(std, rel=0.1)
        assert not any(k.startswith("sub.") for k in up)  # CDL: the sub-network stays home
    rounds = pd.read_csv(out / "rounds.csv")
    assert rounds["dp_epsilon"].tolist() == pytest.approx([dp.spent(c, 1), dp.spent(c, 2)])
    assert len(floored) == 6  # every forwarded model's variances floored ...
    neg = real({"bn.running_var": np.array([-0.3, 2.0], np.float32), "w": np.array([-1.0])})
    assert neg["bn.running_var"].tolist() == pytest.approx([VAR_FLOOR, 2.0])
    assert neg["w"].tolist() == [-1.0]  # ... and nothing else
    kept = torch.load(out / "checkpoints" / "final_silo_000.pt")
    assert all((v.numpy() >= VAR_FLOOR).all() for k, v in kept.items() if "running_var" in k)
    log = audit.read(tmp_path / "node-state" / "fedembodied" / "audit" / "partition-0.jsonl")
    last = [r for r in log if r.get("kind") == "train"][-1]
    assert last["releases"] == 2 and last["epsilon"] == pytest.approx(dp.spent(c, 2))


@pytest.mark.slow
def test_statistics_kept_local_never_travel_and_each_silo_scores_with_its_own(tmp_path):
    """driving.batchnorm-statistics = "local" under party-side DP (models/state.py): no message
    either way carries a running mean or variance, so none is clipped, noised or floored; the
    noise still has the ledger's std; and a silo scores a model with statistics re-estimated on
    its own training images (its rmse_own is exactly that), not with the initial ones."""
    from clients.driving_client import build_model, silo_data
    from training.steering import estimate_statistics, evaluate_steering

    extra = {
        "dp.mode": "local",
        "dp.clip": 0.5,
        "dp.local-epsilon": 50.0,
        "topology": "ring",
        "driving.batchnorm-statistics": "local",
    }
    grid, out = _run(tmp_path, extra, method="cdl")
    sent = [a for m in grid.sent for r in m.content.array_records.values() for a in r]
    back = [a for m in grid.replies for r in m.content.array_records.values() for a in r]
    assert (
        sent and back and not any(k.endswith(("running_mean", "running_var")) for k in sent + back)
    )
    assert any(k.endswith("bn1.weight") for k in back)  # the affine parameters do travel
    c = parse(merged({**DRIVING, "method": "cdl", **extra}))
    for down, up in _updates(grid):
        big = max(up, key=lambda k: up[k].size)
        assert np.std((up[big] - down[big]).astype(np.float64)) == pytest.approx(
            c.dp.local_std, rel=0.1
        )
    final = torch.load(out / "checkpoints" / "final_silo_001.pt")
    assert not any("running" in k for k in final)
    context = type("Ctx", (), {})()
    context.run_config = merged({**DRIVING, "method": "cdl", **extra})
    context.node_config = {"partition-id": 1, "num-partitions": 3}
    data = silo_data(context)
    own = estimate_statistics(build_model(c, final), data.x_train)
    want = math.sqrt(evaluate_steering(own, data.x_test, data.y_test)[0])
    silos = pd.read_csv(out / "silos.csv")
    got = silos[(silos["round"] == 2) & (silos["partition"] == 1)]["rmse_own"].iloc[0]
    assert got == pytest.approx(want, rel=1e-5)
    untouched = math.sqrt(evaluate_steering(build_model(c, final), data.x_test, data.y_test)[0])
    assert abs(untouched - want) > 1e-4  # the initial statistics would score differently


def test_central_dp_with_statistics_kept_local_releases_only_weights(tmp_path):
    """FedAvg under central DP with driving.batchnorm-statistics = "local": the global model the
    server noises and sends, and every clipped update, hold no running statistics."""
    extra = {"dp.mode": "central", "dp.clip": 0.5, "dp.noise-multiplier": 0.1}
    grid, out = _run(tmp_path, {**extra, "driving.batchnorm-statistics": "local"})
    sent = [a for m in grid.sent for r in m.content.array_records.values() for a in r]
    back = [a for m in grid.replies for r in m.content.array_records.values() for a in r]
    assert sent and back and not any("running" in k for k in sent + back)
    rounds = pd.read_csv(out / "rounds.csv")
    assert len(rounds) == 2 and (rounds["dp_epsilon"] > 0).all()
    assert np.isfinite(rounds["rmse"]).all()


@pytest.mark.parametrize(
    "asks,says",
    [
        ({}, r"asks dp.mode='none'"),
        ({"dp.mode": "central"}, r"asks dp.mode='central'"),
        ({"dp.mode": "local", "dp.local-epsilon": 5.0}, r"asks dp.local-epsilon=5"),
    ],
)
def test_a_party_whose_policy_requires_local_dp_refuses_a_run_asking_less(tmp_path, asks, says):
    from flwr.app import ConfigRecord, Context, Message, RecordDict

    from clients.app import app
    from models.state import initial_state

    path = tmp_path / "p.toml"
    path.write_text("[dp]\nlocal-epsilon = 1.0\n")
    cfg = merged({**DRIVING, **asks, "out-dir": str(tmp_path / "out")})
    ctx = Context(run_id=1, node_id=5000, node_config={"partition-id": 0, "num-partitions": 3,
                  "policy": str(path)}, state=RecordDict(), run_config=cfg)  # fmt: skip
    content = RecordDict({"arrays": ArrayRecord(initial_state(24, 1, 0)),
                          "config": ConfigRecord({"server-round": 1})})  # fmt: skip
    msg = Message(content, dst_node_id=5000, message_type="train")
    msg.metadata.__dict__["_message_id"] = "m1"
    with pytest.raises(policy.Refused, match=says + r".*policy key 'dp.local-epsilon'"):
        app(msg, ctx)
    log = audit.read(tmp_path / "node-state" / "fedembodied" / "audit" / "partition-0.jsonl")
    assert log[-1]["status"] == "refused"  # and its own log says so


@pytest.mark.parametrize("method,why", [("cdl", "peer topology"), ("gossip", "peer topology"),
                                        ("fedrl", "noises its released Q outputs")])  # fmt: skip
def test_dp_is_refused_where_it_does_not_fit_saying_why(method, why):
    from config.methods import check_dp

    with pytest.raises(ConfigError, match=rf"'dp.mode' 'central': method {method} .*{why}"):
        check_dp(parse(merged({**DRIVING, "method": method, "dp.mode": "central"})))


def test_a_release_is_noised_even_when_nothing_was_accepted_and_eq7_steps_from_it():
    """Review findings: FedVLN's Eq. 7 stepped from its un-noised model, so successive rounds'
    noise could cancel; an empty round left the model exactly as it was (no Gaussian release
    does that). Both now release, and account, the noised model."""
    from flwr.serverapp.strategy import FedAvg

    from strategies.dp import CentralDP

    class Recorder:
        metrics: dict = {}

        def add_metrics(self, m):
            self.metrics.update(m)

    class Inner(FedAvg):
        def __init__(self, answer):
            super().__init__()
            self.answer, self.recorder, self.round_offset = answer, Recorder(), 0
            self.current = ArrayRecord({"w": Array(np.zeros(1000, np.float32))})
            self.global_arrays = self.current

        def dp_step_scale(self):
            return 2.0

        def aggregate_train(self, server_round, replies):
            return self.answer, None

    c = parse(merged({**DRIVING, "dp.mode": "central", "dp.clip": 1.0,
                      "dp.noise-multiplier": 1.0}))  # fmt: skip
    for answer in (ArrayRecord({"w": Array(np.ones(1000, np.float32))}), None):
        inner = Inner(answer)
        dp = CentralDP(inner, c, sampled=4, population=4)
        dp._prepare_accounting(1, ["a message"])
        out, _ = dp.aggregate_train(1, [])
        w = out["w"].numpy() - (1.0 if answer is not None else 0.0)
        assert np.std(w) == pytest.approx(2.0 * 1.0 * 1.0 / 4, rel=0.15)  # eta z C / m
        assert inner.global_arrays is out  # the next step starts from what was released
        assert inner.recorder.metrics["dp_releases"] == 1


def test_a_larger_delta_cannot_buy_less_noise_past_a_party_policy(tmp_path):
    from clients import dp
    from clients.policy import Refused, load

    path = tmp_path / "p.toml"
    path.write_text("[dp]\nlocal-epsilon = 1.0\n")
    path.chmod(0o600)
    p = load(path)
    same = parse(merged({**DRIVING, "dp.mode": "local", "dp.local-epsilon": 1.0}))
    dp.check(p, same)  # the policy's own setting passes
    with pytest.raises(Refused, match=r"dp.delta=0.5: noise multiplier .* less than"):
        dp.check(p, parse(merged({**DRIVING, "dp.mode": "local", "dp.local-epsilon": 1.0,
                                  "dp.delta": 0.5})))  # fmt: skip
    with pytest.raises(ConfigError, match="each party keeps its own"):
        parse(merged({**DRIVING, "dp.mode": "local", "dp.max-epsilon": 5.0}))


def test_the_cdl_diagnosis_puts_back_the_statistics_a_noised_release_floored():
    """experiments/privacy/cdl_dp_diagnosis.py: a BatchNorm variance noised down to the floor
    amplifies its channel; re-estimating only that layer on the same images restores the model's
    outputs and leaves every weight as it was."""
    import torch

    from models.resnet8 import ResNet8
    from strategies.dp import VAR_FLOOR
    from training.steering import estimate_statistics

    torch.manual_seed(0)
    x = torch.rand(64, 1, 32, 32).numpy()
    ref = ResNet8(32, 1)
    estimate_statistics(ref, x)  # statistics of these images
    want = ref(torch.as_tensor(x)).detach()
    hurt = ResNet8(32, 1)
    hurt.load_state_dict(ref.state_dict())
    hurt.blocks[0].bn1.running_var[:3] = VAR_FLOOR  # what the release's noise and floor did
    hurt.eval()
    assert not torch.allclose(hurt(torch.as_tensor(x)).detach(), want, atol=1e-3)
    weights = {k: v.clone() for k, v in hurt.state_dict().items() if "running" not in k}
    estimate_statistics(hurt, x, only="blocks.0.bn1")
    assert torch.allclose(hurt(torch.as_tensor(x)).detach(), want, atol=1e-4)
    assert all(torch.equal(v, hurt.state_dict()[k]) for k, v in weights.items())


def test_adaptive_clipping_moves_c_toward_the_quantile_where_flowers_wrapper_runs_away():
    """Andrew et al.'s step C exp(-eta (u - gamma)) takes the share u of *unclipped* updates;
    Flower 1.41's wrapper feeds it the share of clipped ones (its mod's bit), so with every
    update above C it shrinks C further. Ours grows C toward the updates' median norm."""
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping, FedAvg

    from strategies.dp import next_clip

    norms = np.full(10, 10.0)  # every party's update has norm 10
    ours = 1.0
    flower = DifferentialPrivacyClientSideAdaptiveClipping(FedAvg(), 0.0, 10, 1.0)
    for _ in range(40):
        ours = next_clip(ours, float(np.mean(norms <= ours)), 0.5, 0.2)
        flower._geometric_update(float(np.mean(norms > flower.clipping_norm)))
    assert 10 / 1.2 < ours < 10 * 1.2  # at the median norm, within one step
    assert flower.clipping_norm < 0.02  # 1 exp(-0.2 (1 - 0.5) 40): ran away from it
    norms = np.arange(1, 11.0)  # a spread: C settles about the gamma = 0.3 quantile
    c = 50.0
    for _ in range(200):
        c = next_clip(c, float(np.mean(norms <= c)), 0.3, 0.2)
    assert 2 <= c <= 4.5


def test_adaptive_clipping_refuses_a_multiplier_its_count_noise_cannot_carry():
    from strategies.dp import CentralDP

    c = parse(merged({**DRIVING, "dp.mode": "central", "dp.clipping": "adaptive",
                      "dp.noise-multiplier": 0.5}))  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"'dp.noise-multiplier' = 0.5 is too large .*below 2 sigma_b = 0.3"
    ):
        CentralDP(FedAvgStub(), c, sampled=3, population=3)


class FedAvgStub:
    def __init__(self):
        self.dp_denominator = None


@pytest.mark.slow
def test_adaptive_clipping_clips_each_round_to_the_c_sent_and_accounts_z(tmp_path):
    """Central DP with adaptive clipping on the in-process grid: every party clips to the C the
    server sent that round (each update's norm at or below it, and it logs that C); with every
    update above a tiny first C, C grows each round; the accountant composes z, the noise on
    the updates is z_Delta < z."""
    from flwr.serverapp import NeighboringRelation, PrivacyConfig, RdpAccountant, SamplingMethod
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent

    extra = {"dp.mode": "central", "dp.clipping": "adaptive", "dp.clip": 0.01,
             "dp.noise-multiplier": 0.1, "num-server-rounds": 3}  # fmt: skip
    grid, out = _run(tmp_path, extra)
    rounds = pd.read_csv(out / "rounds.csv")
    rounds = rounds[rounds["round"] > 0].reset_index(drop=True)
    clips = rounds["dp_clip"].tolist()
    assert clips[0] == pytest.approx(0.01) and clips[0] < clips[1] < clips[2]
    assert rounds["dp_clip_next"].tolist()[:2] == pytest.approx(clips[1:])
    ups = _updates(grid)
    assert len(ups) == 9
    for k, (d, u) in enumerate(ups):
        assert _norm(d, u) <= clips[k // 3] * 1.001  # clipped to that round's C
    ref = RdpAccountant(PrivacyConfig(1e-5, 3, NeighboringRelation.ADD_OR_REMOVE_ONE,
                                      SamplingMethod.NO_AMPLIFICATION))  # fmt: skip
    ref.compose(GaussianPrivacyEvent(noise_multiplier=0.1, sample_size=3, population_size=3), 3)
    assert rounds["dp_epsilon"].iloc[-1] == pytest.approx(ref.get_privacy_spent().epsilon)
    for node in range(3):
        log = audit.read(tmp_path / "node-state" / "fedembodied" / "audit" /
                         f"partition-{node}.jsonl")  # fmt: skip
        train = [r for r in log if r.get("kind") == "train"]
        assert all(r["mechanism"].startswith("adaptive clip") for r in train)
        assert [r["clip"] for r in train] == pytest.approx(clips)
    assert_logged_as_sent(grid)


def test_adaptive_clipping_counts_only_well_formed_bits_keeps_a_users_bound_and_resumes_safely():
    """Review findings: a NaN, huge or repeated bit from one party crashed the server or drove
    C to 0; the step overwrote a smaller run.max-update-norm; a resume could read C = NaN."""
    from flwr.app import Message, MetricRecord, RecordDict

    from server.strategy_args import resumed_clip
    from strategies.dp import CentralDP, clip_bit, clip_range

    def reply(*records):
        content = RecordDict({f"m{k}": MetricRecord(r) for k, r in enumerate(records)})
        return Message(content, dst_node_id=1, message_type="train")

    assert clip_bit(reply({"norm_bit": 1})) == 1 and clip_bit(reply({"norm_bit": 0})) == 0
    for bad in ({"norm_bit": 1e6}, {"norm_bit": -3}, {"norm_bit": float("nan")}, {"x": 1}):
        assert clip_bit(reply(bad)) is None
    assert clip_bit(reply({"norm_bit": 1}, {"norm_bit": 1})) is None  # counted once at most

    class Recorder:
        def __init__(self):
            self.metrics = {}

        def add_metrics(self, m):
            self.metrics.update(m)

    class Inner:
        max_update_norm, recorder, dp_denominator = 0.5, Recorder(), None

    c = parse(merged({**DRIVING, "dp.mode": "central", "dp.clipping": "adaptive",
                      "dp.noise-multiplier": 0.01}))  # fmt: skip
    inner = Inner()
    dp = CentralDP(inner, c, sampled=10, population=10, user_bound=0.5)
    dp.count_std = 0.0  # the step itself, without the count's noise
    dp._step_clip([reply({"norm_bit": 1})] * 10 + [reply({"norm_bit": float("nan")})])
    assert dp.clipping_norm == pytest.approx(1.0 * math.exp(0.2 * 0.5))  # all clipped: C grows
    assert inner.max_update_norm == 0.5  # the user's smaller bound stays
    assert inner.recorder.metrics["dp_clip_next"] == dp.clipping_norm
    dp._step_clip([])  # no bits: C stays, and is still written for a resume
    assert inner.recorder.metrics["dp_clip_next"] == dp.clipping_norm
    assert resumed_clip(c, [{"dp_clip_next": 3.0}]) == 3.0
    for broken in (float("nan"), 0.0, None, "x"):
        assert resumed_clip(c, [{"dp_clip_next": broken}]) == c.dp.clip
    for edited in (1e300, 1e-300, -2.0, math.inf):  # issue 62: out of C's range, never resumed
        assert resumed_clip(c, [{"dp_clip_next": edited}]) == c.dp.clip
    fixed = parse(merged({**DRIVING, "dp.mode": "central"}))
    assert resumed_clip(fixed, [{"dp_clip_next": 3.0}]) == fixed.dp.clip
    # parties that all claim "clipped" (or never) move C at most within clip_range: 200
    # rounds of lies walk it to the bound and no further (it reached 39,861 from 2 before)
    lo, hi = clip_range(c)
    for bit, bound in ((1, hi), (0, lo)):
        dp.clipping_norm = c.dp.clip
        for _ in range(200):
            dp._step_clip([reply({"norm_bit": bit})] * 10)
        assert dp.clipping_norm == pytest.approx(bound)
    assert (lo, hi) == (c.dp.clip / 100, c.dp.clip * 100)


@pytest.mark.parametrize("lie", [float("nan"), -5.0, 1e308, "12", 0.001])
def test_the_server_counts_local_dp_epsilon_itself_whatever_a_party_claims(lie, caplog):
    """strategies/dp.LocalDPLedger: dp_epsilon is the server's count of the updates it got
    (partition 0 twice, 1 once: partition 0's two releases); a party's claim never moves it.
    A claim that cannot be a figure (NaN, negative, above every release's epsilon, not a
    number) is dropped and named; a possible but wrong one is kept beside it and named."""
    import logging

    from clients import dp
    from strategies.dp import LocalDPLedger

    c = parse(merged({**DRIVING, "dp.mode": "local", "dp.clip": 0.5, "dp.local-epsilon": 50.0}))
    ledger = LocalDPLedger(c)
    ledger.received(0, {dp.EPSILON: dp.spent(c, 1)})
    ledger.received(1, {dp.EPSILON: dp.spent(c, 1)})
    assert ledger.report() == {"dp_epsilon": dp.spent(c, 1), "dp_epsilon_claimed": dp.spent(c, 1)}
    with caplog.at_level(logging.WARNING):
        ledger.received(0, {dp.EPSILON: lie})
        got = ledger.report()
    assert got["dp_epsilon"] == pytest.approx(dp.spent(c, 2))
    if lie == 0.001:
        assert got["dp_epsilon_claimed"] == 0.001 and "the server counts" in caplog.text
    else:
        assert "dp_epsilon_claimed" not in got and "partition 0 claims" in caplog.text
