"""FedVLN: the Eq. 7 server step, house sampling, pooled metrics, and a privacy audit of every
message the houses send, with whole stages run in-process (no Ray) on five tiny houses."""

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import sacrebleu
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from config import parse
from server.recorder import Recorder
from strategies.fedvln_strategy import FedVLNStrategy, pool
from tests.conftest import ROOT, InProcessGrid, assert_logged_as_sent

TINY = {
    "method": "fedvln",
    "num-clients": 5,
    "num-server-rounds": 1,
    "fedvln.train-houses": 3,
    "fedvln.unseen-houses": 2,
    "fedvln.embedding": 16,
    "fedvln.hidden": 32,
    "fedvln.batch-size": 8,
    "fedvln.max-local-steps": 2,
    "fedvln.seen-rate": 0.67,  # 2 of 3 seen houses a round: fedvln.min-round-houses = 2
    "fedvln.unseen-rate": 1.0,  # and both unseen houses
    "fedvln.aug-routes": 4,
    "fedvln.preexplore-routes": 6,
}


# the cpu agent recipe as a run's config.json records it (config/fedvln_recipe.recipe_record)
CPU_AGENT_RECIPE = {
    "optimizer": "rms",
    "lr": 1e-3,
    "server_lr": 1.0,
    "server_lr_decay": 1.0,
    "seen_rate": 0.2,
    "server_opt": "avg",
}


def _strategy(tmp_path, roles, rates, **kw):
    s = FedVLNStrategy(
        roles=roles,
        rates=rates,
        eval_roles=("seen", "unseen"),
        recorder=Recorder(tmp_path, {}),
        num_clients=len(roles),
        seed=0,
        min_train_nodes=1,
        min_evaluate_nodes=1,
        **kw,
    )
    s.partitions = {1000 + p: p for p in roles}
    return s


def _reply(msg, value, n):
    arrays = ArrayRecord({"w": Array(np.full(3, value, np.float32))})
    return Message(
        RecordDict(
            {"arrays": arrays, "metrics": MetricRecord({"num-examples": n, "train-loss": 0.1})}
        ),
        reply_to=msg,
    )


def test_server_step_is_eq7_with_learning_rate_and_decay(tmp_path):
    s = _strategy(tmp_path, {0: "seen", 1: "seen"}, {"seen": 1.0}, server_lr=2.0, lr_decay=0.5)
    w0 = ArrayRecord({"w": Array(np.ones(3, np.float32))})
    msgs = list(s.configure_train(1, w0, ConfigRecord(), grid=None))
    # w + eta * sum n_i/n (w_i - w) = 1 + 2 * (0.25 * (2 - 1) + 0.75 * (5 - 1)) = 7.5
    arrays, _ = s.aggregate_train(1, [_reply(msgs[0], 2.0, 1), _reply(msgs[1], 5.0, 3)])
    assert np.allclose(arrays["w"].numpy(), 7.5)
    msgs = list(s.configure_train(2, arrays, ConfigRecord(), grid=None))
    arrays, _ = s.aggregate_train(2, [_reply(msgs[0], 8.5, 1), _reply(msgs[1], 8.5, 1)])
    assert np.allclose(arrays["w"].numpy(), 8.5)  # eta_2 = 2 * 0.5 = 1: plain FedAvg


@pytest.mark.parametrize("eta", [1.0, 2.0, 0.5])
def test_eq7_is_flowers_fedavgm_with_zero_momentum_and_fedavg_at_eta_1(tmp_path, eta):
    """Eq. 7, w <- w + eta sum n_i/n (w_i - w), is Flower's own FedAvgM (server_learning_rate
    eta, server_momentum 0) on the same replies, and Flower's FedAvg when eta = 1."""
    from flwr.serverapp.strategy import FedAvg, FedAvgM

    rng = np.random.default_rng(0)
    w0 = ArrayRecord({"a": Array(rng.normal(size=(4, 3)).astype(np.float32)),
                      "b": Array(rng.normal(size=5).astype(np.float32))})  # fmt: skip
    updates = [
        ({k: v.numpy() + rng.normal(size=v.numpy().shape).astype(np.float32)
          for k, v in w0.items()}, n)
        for n in (3, 1, 6)
    ]  # fmt: skip

    def replies(msgs):
        return [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord({k: Array(v) for k, v in u.items()}),
                        "metrics": MetricRecord({"num-examples": n, "train-loss": 0.1}),
                    }
                ),
                reply_to=m,
            )
            for m, (u, n) in zip(msgs, updates)
        ]

    ours = _strategy(tmp_path, {0: "seen", 1: "seen", 2: "seen"}, {"seen": 1.0}, server_lr=eta)
    msgs = list(ours.configure_train(1, w0, ConfigRecord(), grid=None))
    mine, _ = ours.aggregate_train(1, replies(msgs))
    flowers = [FedAvgM(server_learning_rate=eta, server_momentum=0.0)]
    flowers += [FedAvg()] if eta == 1.0 else []
    for strategy in flowers:
        strategy.current_arrays = w0  # what FedAvgM.configure_train keeps
        theirs, _ = strategy.aggregate_train(1, replies(msgs))
        for k in w0:
            assert np.allclose(mine[k].numpy(), theirs[k].numpy(), atol=1e-5), (strategy, k)


def test_a_nan_update_is_rejected_before_the_server_step(tmp_path):
    # min_mixed = 1: the one good house's update is used (the mixing bound has its own test)
    s = _strategy(tmp_path, {0: "seen", 1: "seen"}, {"seen": 1.0}, server_lr=2.0, min_mixed=1)
    w0 = ArrayRecord({"w": Array(np.ones(3, np.float32))})
    msgs = list(s.configure_train(1, w0, ConfigRecord(), grid=None))
    arrays, metrics = s.aggregate_train(1, [_reply(msgs[0], np.nan, 5), _reply(msgs[1], 2.0, 1)])
    assert np.allclose(arrays["w"].numpy(), 3.0)  # 1 + 2 * (2 - 1) from the good house only
    assert metrics["n_accepted"] == 1
    s.recorder.end_round(arrays)
    status = pd.read_csv(tmp_path / "clients.csv")["status"].tolist()
    assert status[0].startswith("rejected") and "NaN" in status[0] and status[1] == "ok"


def test_fedadam_steps_by_the_mean_update_with_moments_kept_across_rounds(tmp_path):
    """FedAdam (Reddi et al. 2021, Alg. 2; strategies/fedadam.py): D is the size-weighted mean
    update, m and v carry over rounds, w + eta m / (sqrt(v) + tau), no bias correction. The
    run config chooses it per stage; central DP, whose noise is calibrated to Eq. 7's step,
    is refused with it; a run made before it is read as Eq. 7's."""
    from config.fedvln_recipe import recipe_of, recorded_recipe
    from config.schema import ConfigError, merged
    from server.fedvln_run import check_config

    s = _strategy(tmp_path, {0: "seen", 1: "seen"}, {"seen": 1.0}, server_lr=0.1,
                  server_opt="adam")  # fmt: skip
    w = np.ones(3, np.float32)
    m = v = np.zeros(3, np.float32)
    for rnd, (a, b) in enumerate([(2.0, 5.0), (0.0, 1.0)], start=1):
        msgs = list(s.configure_train(rnd, ArrayRecord({"w": Array(w)}), ConfigRecord(), None))
        got, _ = s.aggregate_train(rnd, [_reply(msgs[0], a, 1), _reply(msgs[1], b, 3)])
        d = np.float32(0.25 * a + 0.75 * b) - w
        m, v = 0.9 * m + 0.1 * d, 0.99 * v + 0.01 * d**2
        w = (w + 0.1 * m / (np.sqrt(v) + 1e-3)).astype(np.float32)
        assert np.allclose(got["w"].numpy(), w, rtol=1e-6)
    assert abs(float(w[0]) - 1.0) > 0.1  # the second round's step is not the first's again
    adam = parse(merged({**TINY, "fedvln.server-opt": "adam", "fedvln.server-lr": 0.03}))
    assert recipe_of(adam.fedvln).server_opt == "adam"
    with pytest.raises(ConfigError, match="server-opt.*adam.*dp.mode"):
        check_config(parse(merged({**TINY, "fedvln.server-opt": "adam", "dp.mode": "central",
                                   "dp.noise": 0.1})))  # fmt: skip
    old = {"recipe": {"optimizer": "rms", "lr": 1e-3, "server_lr": 1.0, "server_lr_decay": 1.0,
                      "seen_rate": 0.2}}  # fmt: skip
    assert recorded_recipe(old)["server_opt"] == "avg"


def test_houses_are_sampled_per_role_at_their_rates(tmp_path):
    roles = {p: "seen" if p < 10 else "unseen" for p in range(15)}
    s = _strategy(tmp_path, roles, {"seen": 0.2, "unseen": 0.6})
    picks = [s.train_nodes(None, r) for r in (1, 2, 3)]
    for nodes in picks:
        parts = [n - 1000 for n in nodes]
        assert sum(p < 10 for p in parts) == 2 and sum(p >= 10 for p in parts) == 3
        assert parts == sorted(parts)
    assert len({tuple(p) for p in picks}) > 1  # changes per round
    assert picks[0] == _strategy(tmp_path, roles, {"seen": 0.2, "unseen": 0.6}).train_nodes(None, 1)
    assert len(s.evaluate_nodes(None, 1)) == 15


def test_pooled_navigation_metrics_are_episode_weighted():
    out = pool(
        [
            {"val_unseen_n": 10, "val_unseen_sr": 50.0},
            {"val_unseen_n": 30, "val_unseen_sr": 10.0},
            {"val_seen_n": 0},
        ]
    )
    assert out == {"val_unseen_n": 40, "val_unseen_sr": 20.0}


@pytest.mark.slow
def test_bleu_pooled_from_house_counts_equals_corpus_bleu_of_all_paths():
    import torch

    from config import parse
    from contracts.fedvln import speaker_size
    from envs.vln_houses import HouseSpec
    from models.speaker import Speaker
    from strategies.fedvln_strategy import eval_problem
    from training import vln_speaker
    from training.vln_house import open_house, open_setup
    from training.vln_speaker_quality import fidelity, one_per_path

    torch.manual_seed(0)  # the speaker's start must not depend on which tests ran before
    setup = open_setup("", "", HouseSpec(train_houses=3, unseen_houses=2))
    speaker = Speaker(speaker_size(parse(TINY), len(setup.vocab), setup.world.feature_dim))
    inputs = vln_speaker.PathInputs(setup.world)
    houses = [open_house(setup, h) for h in ("house000", "house001", "house002")]
    # a few teacher-forced steps so the greedy instructions share n-grams with the references
    opt = torch.optim.Adam(speaker.parameters(), lr=1e-2)
    vln_speaker.train_batches(
        speaker,
        opt,
        inputs,
        houses[0].train,
        setup.vocab,
        vln_speaker.SpeakerSettings(batch_size=16),
        iterations=120,
        rng=np.random.default_rng(0),
    )
    records = [
        {
            f"val_seen_{k}": v
            for k, v in vln_speaker.bleu_stats(
                speaker, inputs, h.val, setup.vocab, setup.data
            ).items()
        }
        for h in houses
    ]
    union = [e for h in houses for e in h.val]
    expected = vln_speaker.bleu(speaker, inputs, union, setup.vocab)
    assert expected > 1.0
    assert math.isclose(pool(records)["val_seen_bleu"], expected, rel_tol=1e-9)
    # route fidelity pools the same way: from summed counts, equal to the union's score
    paths, refs = one_per_path(union)
    hyps = vln_speaker.write_instructions(speaker, inputs, paths, setup.vocab)
    union_fid = fidelity(setup.data, paths, hyps, refs)
    for k, v in union_fid.items():
        assert pool(records)[f"val_seen_{k}"] == pytest.approx(v, nan_ok=True), k
    forged = dict(records[0], val_seen_fid_goal_hits=records[0]["val_seen_fid_paths"] + 1)
    assert "exceeds its count" in eval_problem(forged)
    assert pool(records)["val_seen_bleu"] != pytest.approx(
        np.mean(
            [
                sacrebleu.BLEU.compute_bleu(
                    [r[f"val_seen_correct_{i}"] for i in range(1, 5)],
                    [r[f"val_seen_total_{i}"] for i in range(1, 5)],
                    r["val_seen_sys_len"],
                    r["val_seen_ref_len"],
                    smooth_method="exp",
                ).score
                for r in records
            ]
        )
    )


# ---- whole stages in process: what leaves a house ------------------------------------------
def _run(tmp_path, name, **extra):
    from clients.app import app
    from config.schema import merged
    from server import fedvln_run

    rc = {**TINY, "out-dir": str(tmp_path / name), **extra}
    grid = InProcessGrid(app, rc, 5)
    fedvln_run.run(grid, parse(merged(rc)), "fedvln")
    return grid, tmp_path / name


IDENTITY = {
    "partition-id",
    "num-partitions",
    "role",
    "house",
    "houses",  # how many houses the data holds (the federation's size)
    "vocab-size",
    "feature-dim",
    "num-train",
    "num-val",
}
ALLOWED_METRICS = {"num-examples", "num-augmented", "train-loss", "local-steps", "fit-s"}


def _audit(grid, shared_prefix: str | None):
    """Every reply: text only in the identity answer (house id, role, sizes, counts), metrics
    only counts, losses and pooled-metric inputs, arrays only model parameters of the shared
    part with their shapes."""
    from clients.fedvln_client import _model, house_of
    from config import parse

    ctx = next(iter(grid.contexts.values()))
    params = {
        k: tuple(v.shape)
        for kind in ("follower", "speaker")
        for k, v in _model(kind, parse(ctx.run_config), house_of(ctx)).state_dict().items()
    }
    for rep in grid.replies:
        content = rep.content
        if "identity" in content:
            assert set(content["identity"].keys()) == IDENTITY
            continue
        assert not content.config_records, "a house sent text"
        for rec in content.metric_records.values():
            for k, v in rec.items():
                assert isinstance(v, (int, float)), k
                # the scores and their floor (the untrained model's scores, issue 66)
                assert k in ALLOWED_METRICS or k.removeprefix("floor-").startswith(
                    ("val_seen_", "val_unseen_")
                ), k
        for rec in content.array_records.values():
            for k, a in rec.items():
                assert k in params and tuple(a.shape) == params[k], k
                if shared_prefix is not None:
                    assert k.startswith(shared_prefix), k


@pytest.mark.slow
def test_privacy_audit_of_every_stage_and_fed_lan_sends_only_the_language_encoder(tmp_path):
    grid, agent = _run(tmp_path, "agent")
    _audit(grid, None)
    assert assert_logged_as_sent(grid) > 0
    rounds = pd.read_csv(agent / "rounds.csv")
    assert rounds.loc[0, "bytes_up"] > 0 and rounds.loc[0, "val_unseen_n"] == 180
    assert (agent / "model.pt").is_file()

    grid, speaker = _run(tmp_path, "speaker", **{"fedvln.stage": "speaker"})
    _audit(grid, None)
    assert assert_logged_as_sent(grid) > 0
    assert (speaker / "best.pt").is_file()
    inits = {
        "fedvln.agent-init": str(agent / "model.pt"),
        "fedvln.speaker-init": str(speaker / "best.pt"),
    }

    grid, aug = _run(tmp_path, "augment", **{"fedvln.stage": "augment"}, **inits)
    _audit(grid, None)
    assert assert_logged_as_sent(grid) > 0
    assert pd.read_csv(aug / "rounds.csv").loc[0, "augmented_episodes"] == 3 * 4
    seen_ctx = grid.contexts[5000]  # routes and speaker kept in the house, never sent
    assert len(seen_ctx.state["fedvln-routes"]["paths"]) == 4
    assert "fedvln-speaker" in seen_ctx.state
    # best.pt is the round with the best pooled val_unseen SR (the paper's checkpoint)
    from models import vln_checkpoint as ck

    rounds = pd.read_csv(agent / "rounds.csv")
    _, _, extra = ck.load(agent / "best.pt")
    assert extra["round"] == int(rounds.loc[rounds["val_unseen_sr"].idxmax(), "round"])
    assert extra["val_unseen_sr"] == pytest.approx(rounds["val_unseen_sr"].max())
    assert (aug / "best.pt").is_file()

    # augmentation's control: the same restart from agent-init with no routes; no house is
    # handed the speaker (so none needs speaker-init) and nothing is back-translated
    grid, ctl = _run(
        tmp_path,
        "control",
        **{"fedvln.stage": "augment", "fedvln.aug-routes": 0, "num-server-rounds": 1},
        **{"fedvln.agent-init": inits["fedvln.agent-init"]},
    )
    _audit(grid, None)
    assert not any("fedvln-speaker" in c.state for c in grid.contexts.values())
    ctl_rounds = pd.read_csv(ctl / "rounds.csv")
    assert ctl_rounds.get("augmented_episodes", pd.Series([0])).fillna(0).eq(0).all()
    assert ctl_rounds["local_steps"].sum() > 0
    assert (ctl / "best.pt").is_file()

    # a perfect speaker (fedvln.route-words = "grammar", a diagnostic): each route carries the
    # houses' own words, kept in the house like the routes; nothing is back-translated or sent
    grid, gram = _run(
        tmp_path,
        "grammar",
        **{"fedvln.stage": "augment", "fedvln.route-words": "grammar", "num-server-rounds": 1},
        **inits,
    )
    _audit(grid, None)
    words = grid.contexts[5000].state["fedvln-routes"]["instructions"]
    assert len(words) == 4 and all(len(w.split()) > 5 for w in words)
    assert pd.read_csv(gram / "rounds.csv")["local_steps"].sum() > 0

    grid, lan = _run(
        tmp_path,
        "fed-lan",
        **{"fedvln.stage": "preexplore", "fedvln.variant": "fed-lan", "num-server-rounds": 2},
        **inits,
    )
    _audit(grid, "lang_encoder.")
    assert assert_logged_as_sent(grid) > 0
    trained = [r for r in grid.replies if "arrays" in r.content and len(r.content["arrays"])]
    assert trained and all(
        set(k.split(".")[0] for k in r.content["arrays"].keys()) == {"lang_encoder"}
        for r in trained
    )
    # the unseen houses' decoders and critics stayed local and moved away from the start
    from models import vln_checkpoint

    init, _, _ = vln_checkpoint.load(agent / "model.pt")
    moved = [
        not np.allclose(
            ctx.state["fedvln-follower"]["decoder.cell.weight_ih"].numpy(),
            init.state_dict()["decoder.cell.weight_ih"].numpy(),
        )
        for p, ctx in grid.contexts.items()
        if "fedvln-follower" in ctx.state
    ]
    assert any(moved)
    cfg = __import__("json").loads((lan / "config.json").read_text())
    assert cfg["shared_fraction"] == pytest.approx(cfg["language_encoder_fraction"])
    assert 0 < cfg["shared_fraction"] < 0.5

    grid, env = _run(
        tmp_path, "env", **{"fedvln.stage": "preexplore", "fedvln.variant": "env-based"}, **inits
    )
    _audit(grid, "")
    assert assert_logged_as_sent(grid) > 0
    assert pd.read_csv(env / "rounds.csv")["bytes_up"].sum() == 0
    from clients import fedvln_client
    from config.schema import ConfigError, merged

    own = {
        fedvln_client.house_of(ctx).name: str(ctx.state["fedvln-routes"]["scan"])
        for ctx in grid.contexts.values()
        if "fedvln-routes" in ctx.state
    }
    assert len(own) == 2 and all(h == scan for h, scan in own.items())

    # the held-out-house control: each unseen house adapts on the other's routes, in its rooms
    grid, other = _run(
        tmp_path,
        "env-other",
        **{"fedvln.stage": "preexplore", "fedvln.variant": "env-based"},
        **{"fedvln.routes-house": "next-unseen"},
        **inits,
    )
    _audit(grid, "")
    taken = {
        fedvln_client.house_of(ctx).name: ctx
        for ctx in grid.contexts.values()
        if "fedvln-routes" in ctx.state
    }
    assert sorted(taken) == sorted(own)  # the unseen houses, each with the other's routes
    for house, ctx in taken.items():
        scan = str(ctx.state["fedvln-routes"]["scan"])
        assert scan != house and scan in own
        routes = fedvln_client.routes_of(ctx, fedvln_client.house_of(ctx))
        assert routes and {r.scan for r in routes} == {scan}
    assert pd.read_csv(other / "rounds.csv")["local_steps"].sum() > 0
    with pytest.raises(ConfigError, match="fedvln.routes-house"):
        parse(merged({**TINY, "fedvln.routes-house": "next-unseen"}))  # the agent stage
    pre = {**TINY, "fedvln.stage": "preexplore", "fedvln.variant": "env-based"}
    with pytest.raises(ConfigError, match="fedvln.unseen-houses"):  # no other house to use
        parse(merged({**pre, "fedvln.routes-house": "next-unseen", "fedvln.unseen-houses": 1}))
    with pytest.raises(ConfigError, match="fedvln.env-based-rate"):  # not env-based
        parse(merged({**pre, "fedvln.variant": "fed-lan", "fedvln.env-based-rate": 0.5}))


# ---- the training recipe ---------------------------------------------------------------
def test_recipe_follows_the_official_scripts_and_explicit_keys_override_it():
    from config import parse
    from config.fedvln_recipe import recipe_of

    def of(rc: dict):
        return recipe_of(parse(rc).fedvln)

    assert of({"fedvln.recipe": "official", "fedvln.stage": "speaker"}).__dict__ == {
        "optimizer": "adam",
        "lr": 5e-5,
        "server_lr": 1.6,
        "server_lr_decay": 1.0,
        "seen_rate": 0.2,  # 12 of the official 61 houses
        "rounds": 5,
        "server_opt": "avg",  # Eq. 7
    }
    agent = of({"fedvln.recipe": "official"})
    assert (agent.optimizer, agent.lr, agent.server_lr) == ("rms", 1e-4, 2.0)
    cpu = of({"fedvln.stage": "preexplore"})
    assert (cpu.optimizer, cpu.server_lr) == ("rms", 1.0)
    # the stages that fine-tune a trained agent keep the official lr; training from scratch 10x
    assert of({"fedvln.stage": "augment"}).lr == cpu.lr == agent.lr
    assert of({"fedvln.stage": "agent"}).lr == 10 * cpu.lr
    mine = of({"fedvln.server-lr": 2.0, "fedvln.lr": 3e-4, "fedvln.optimizer": "adam"})
    assert (mine.optimizer, mine.lr, mine.server_lr) == ("adam", 3e-4, 2.0)


@pytest.mark.parametrize(
    "key,value,named",
    [
        ("fedvln.recipe", "paper", "fedvln.recipe"),
        ("fedvln.optimizer", "sgd", "fedvln.optimizer"),
        ("fedvln.server-lr-decay", 1.5, "fedvln.server-lr-decay"),
        ("fedvln.aug-ml-weight", -1.0, "fedvln.aug-ml-weight"),
    ],
)
def test_bad_recipe_keys_are_named(key, value, named):
    from config.schema import ConfigError, merged
    from server import fedvln_run

    with pytest.raises(ConfigError, match=named):
        fedvln_run.check_config(parse(merged({key: value})))


def test_local_steps_count_as_the_official_code_does():
    from training.vln_house import follower_steps

    assert follower_steps(120, 0, 3, 32) == 12  # ceil(3 * 120 / 32)
    assert follower_steps(120, 40, 3, 32) == 6  # half, each labelled + routes
    assert follower_steps(0, 120, 1, 32) == 4  # routes only (pre-exploration)
    assert follower_steps(120, 40, 3, 32, cap=5) == 3


def test_pipeline_tables_report_best_and_last_over_seeds_and_steps_to_target(tmp_path):
    from experiments.fedvln import pipeline as fp

    for seed, (srs, aug) in enumerate([([10, 30, 20], [20, 25]), ([12, 18, 26], [22, 24])]):
        out = tmp_path / f"seed{seed}"
        for run, vals in (("agent", srs), ("augment", aug)):
            (out / run).mkdir(parents=True)
            rows = [{"round": 0, "local_steps": None, "val_unseen_sr": None}]
            rows += [
                {
                    "round": r + 1,
                    "local_steps": 24,
                    "val_unseen_sr": v,
                    "val_unseen_n": 400,
                    "val_seen_sr": v + 1,
                    "val_seen_n": 100,
                    **{
                        f"{sp}_{k}": 1.0
                        for sp in ("val_seen", "val_unseen")
                        for k in ("ne", "osr", "spl", "cls", "ndtw")
                    },
                }
                for r, v in enumerate(vals)
            ]
            pd.DataFrame(rows).to_csv(out / run / "rounds.csv", index=False)
            (out / run / "config.json").write_text('{"wall_s": 1.0}')  # finished
    (tmp_path / "seed1" / "preexplore-fed-lan").mkdir()  # still running: left out
    pd.DataFrame([{"round": 1, "local_steps": 4}]).to_csv(
        tmp_path / "seed1" / "preexplore-fed-lan" / "rounds.csv", index=False
    )
    assert fp.curve(tmp_path / "seed1", "preexplore-fed-lan") is None
    dirs = fp.seed_dirs(tmp_path, [0, 1, 2])
    assert list(dirs) == [0, 1]
    t2 = fp.table2(dirs)
    fed = t2[(t2["model"] == "FedEnvdrop") & (t2["split"] == "val_unseen")].set_index("checkpoint")
    assert fed.loc["best", "sr"] == 28 and fed.loc["best", "sr_sd"] == pytest.approx(2**0.5 * 2)
    assert fed.loc["last", "sr"] == 23 and fed.loc["best", "n_seeds"] == 2
    assert fed.loc["best", "steps"] == 60  # round 2 (48) and round 3 (72)
    assert fed.loc["best", "se_eval"] == pytest.approx(
        np.mean([np.sqrt(30 * 70 / 400), np.sqrt(26 * 74 / 400)])
    )
    seen = t2[
        (t2["model"] == "FedEnvdrop") & (t2["split"] == "val_seen") & (t2["checkpoint"] == "best")
    ]
    assert seen["sr"].iloc[0] == 29  # val_seen of the same evaluation
    assert set(t2.loc[t2["source"] == "paper", "sr"]) >= {47.5, 51.3}
    t9 = fp.table9(dirs)
    row = t9[(t9["phase"] == "seen") & (t9["method"] == "federated")].iloc[0]
    assert row["target_sr"] == pytest.approx(0.9 * 28)  # 90% of the lowest mean best
    assert row["steps"] == 60 and row["reached"] == 2  # seed 0 at 48, seed 1 at 72
    # a study of the agent stage only (--stages agent) tabulates its rows only
    assert set(fp.table2(dirs, ("agent",))["model"]) >= {"FedEnvdrop"}
    assert "FedEnvdrop_aug" not in set(fp.table2(dirs, ("agent",))["model"])
    assert "FedEnvdrop_aug" in set(t2["model"])
    assert set(fp.table9(dirs, ("agent",)).dropna(subset=["n_seeds"])["phase"]) == {"seen"}
    # the convergence protocol's columns: best SR 30 / 26 at 48 / 72 steps, each ran 72
    assert row["best_sr"] == 28 and row["best_steps"] == 60 and row["stop_steps"] == 72
    assert "| seen | federated | 25.2 | 60 ± 17 | 2 / 2 | 28.0 ± 2.8 | 60 ± 17 | 72 ± 0 |" in (
        fp.markdown(
            {"table2": t2, "table4": pd.DataFrame(), "table5": pd.DataFrame(), "table9": t9}
        )
    )


def test_a_house_refuses_to_send_more_than_its_stage_shares_whatever_the_server_asks(tmp_path):
    """fed-lan: the house, not the server, decides that only the language encoder leaves."""
    from flwr.app import Context

    from clients import fedvln_client as house
    from config import parse
    from contracts.fedvln import shared_part

    assert house.within("lang_encoder.", "lang_encoder.") and house.within("", "")
    assert not house.within("*", "lang_encoder.") and not house.within("decoder.", "")
    rc = {**TINY, "fedvln.stage": "preexplore", "fedvln.variant": "fed-lan"}
    ctx = Context(
        run_id=1,
        node_id=5003,
        node_config={"partition-id": 3, "num-partitions": 5},
        state=RecordDict(),
        run_config=rc,
    )
    arrays = shared_part(house._model("follower", parse(rc), house.house_of(ctx)), "*")
    greedy = Message(
        RecordDict(
            {
                "arrays": arrays,
                "config": ConfigRecord(
                    {
                        "step": "follower",
                        "server-round": 1,
                        "epochs": 1.0,
                        "share": "*",
                        "keep-local": True,
                    }
                ),
            }
        ),
        dst_node_id=5003,
        message_type="train",
    )
    with pytest.raises(
        PermissionError, match="sends at most 'lang_encoder.'.*fedvln.preexplore-share"
    ):
        house.train(greedy, ctx)
    # the run asking fed-full changes nothing: the house's policy, not the run, decides
    ctx.run_config = {**rc, "fedvln.variant": "fed-full"}
    with pytest.raises(PermissionError, match="fedvln.preexplore-share"):
        house.train(greedy, ctx)
    # the operator's own policy, stricter than the paper's: nothing leaves in training either
    strict = tmp_path / "strict.toml"
    strict.write_text('[fedvln]\ntrain-share = ""\npreexplore-share = ""\n')
    ctx.node_config["policy"] = str(strict)
    allowed, key = house.allowed_share(parse({**TINY, "fedvln.stage": "agent"}), ctx.node_config)
    assert allowed == "" and key.startswith("fedvln.train-share in ") and str(strict) in key


def test_forged_or_broken_evaluation_replies_are_left_out_of_the_pool(tmp_path):
    s = _strategy(tmp_path, {0: "seen", 1: "seen", 2: "seen", 3: "seen"}, {"seen": 1.0})
    msgs = s._messages(ArrayRecord(), ConfigRecord(), [1000, 1001, 1002, 1003], "evaluate")
    honest = {"val_seen_n": 10, "val_seen_sr": 20.0, "val_seen_ne": 5.0}
    forged = [
        {"val_seen_n": 10, "val_seen_sr": 1000.0, "val_seen_ne": 5.0},  # SR > 100
        {"val_seen_n": 1e30, "val_seen_sr": 100.0, "val_seen_ne": 0.0},  # count
        {"val_seen_n": 10, "val_seen_sr": float("nan"), "val_seen_ne": 1.0},
    ]
    replies = [
        Message(RecordDict({"metrics": MetricRecord(r)}), reply_to=m)
        for r, m in zip([honest] + forged, msgs)
    ]
    assert s.aggregate_evaluate(1, replies)["val_seen_sr"] == 20.0
    bleu = {
        "val_seen_n": 3,
        "val_seen_sys_len": 10,
        "val_seen_ref_len": 10,
        **{f"val_seen_{k}_{i}": 5 for k in ("correct", "total") for i in range(1, 5)},
    }
    from strategies.fedvln_strategy import eval_problem

    assert eval_problem(bleu) is None
    assert "negative" in eval_problem({**bleu, "val_seen_correct_2": -3})
    assert "exceeds its total" in eval_problem({**bleu, "val_seen_correct_1": 9})


@pytest.mark.slow
def test_a_house_keeps_its_optimizer_state_between_rounds_when_asked(tmp_path):
    """optimizer-state=house (the default): the house's RMSprop square averages carry over (in
    its context, never in a reply); round: a fresh optimizer each round keeps nothing."""
    import torch

    from training.optimizer_state import load_optimizer_arrays, optimizer_arrays
    from training.vln_loop import make_optimizer

    model = torch.nn.Linear(3, 2)
    opt = make_optimizer("rms", model.parameters(), 1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    saved = optimizer_arrays(opt)
    again = make_optimizer("rms", model.parameters(), 1e-3)
    load_optimizer_arrays(again, saved)
    for k, v in optimizer_arrays(again).items():
        assert torch.equal(v, saved[k])
    grid, run = _run(
        tmp_path,
        "agent",
        **{"fedvln.optimizer-state": "house", "num-server-rounds": 2, "fedvln.seen-rate": 1.0},
    )
    kept = [
        c.state["fedvln-optimizer-follower"]
        for c in grid.contexts.values()
        if "fedvln-optimizer-follower" in c.state
    ]
    assert len(kept) == 3  # every seen house, none unseen
    steps = {float(a.numpy()) for rec in kept for k, a in rec.items() if k.endswith("/step")}
    assert steps == {4.0}  # 2 rounds x 2 local steps, kept
    assert all(
        "fedvln-optimizer" not in k for r in grid.replies for k in r.content.array_records
    )  # never sent
    grid, _ = _run(
        tmp_path, "agent-round", **{"fedvln.optimizer-state": "round", "num-server-rounds": 2}
    )
    assert not any("fedvln-optimizer-follower" in c.state for c in grid.contexts.values())


def test_the_server_waits_for_one_node_per_house_whatever_num_clients_says(tmp_path, caplog):
    """Plain `flwr run .` passes num-clients=10; the data's houses decide (here 5)."""
    grid, out = _run(tmp_path, "follow", **{"num-clients": 2})
    asked = {r.metadata.src_node_id for r in grid.replies if "identity" in r.content}
    assert len(asked) == 5  # every house's node was waited for and asked who it is
    assert (out / "rounds.csv").is_file()
    assert "holds 5 houses" in caplog.text and "num-supernodes=5" in caplog.text


def test_patience_keeps_the_first_best_and_stops_after_that_many_flat_evaluations():
    from training.convergence import Patience

    p = Patience(2)
    assert [p.update(s, at) for at, s in enumerate([0.1, float("nan"), 0.3, 0.3, 0.2], 1)] == [
        True,
        False,  # no evaluation this round: neither better nor worse
        True,
        False,  # equal is not better
        False,
    ]
    assert (p.best, p.best_at, p.stop) == (0.3, 3, True)
    assert not Patience(0).stop and Patience.replay(1, [(1, 0.5), (2, 0.4)]).stop
    with pytest.raises(ValueError):
        Patience(-1)


def test_a_stage_stops_once_val_unseen_has_not_improved_for_patience_evaluations(tmp_path):
    """A follower that cannot change (learning rate 1e-9) scores the same every round: with
    patience 1 the stage ends after its second round of six, keeping round 1 as best."""
    import json

    import pandas as pd

    _, run = _run(
        tmp_path,
        "agent",
        **{"num-server-rounds": 6, "fedvln.patience": 1, "fedvln.lr": 1e-9},
    )
    conv = json.loads((run / "config.json").read_text())["convergence"]
    assert conv["stopped_early"] and conv["best_round"] == 1 and conv["last_round"] == 2
    assert list(pd.read_csv(run / "rounds.csv")["round"]) == [1, 2]
    assert (run / "best.pt").is_file() and (run / "model.pt").is_file()


def test_pipeline_caps_the_centralized_stage_at_the_federated_cap_when_training_to_convergence(
    tmp_path,
):
    from experiments.fedvln.pipeline import _central_steps

    rounds = tmp_path / "rounds.csv"
    rounds.write_text("round,local_steps\n1,40\n2,40\n3,40\n4,40\n")  # stopped at 4 of cap 10
    assert _central_steps(rounds, 160, 10, patience=0) == 160  # fixed budget: step-matched
    assert _central_steps(rounds, 160, 10, patience=3) == 400  # 40 a round x the cap of 10


def test_pipeline_stops_each_centralized_stage_by_its_federated_stages_rule(tmp_path, monkeypatch):
    """Issue 41: the speaker trains with its own share of houses and patience, federated and
    centralized; each centralized stage gets its federated stage's patience, evaluated every
    as many sequential steps as one federated evaluation interval (summed steps / houses)."""
    from config.schema import merged
    from experiments.fedvln import pipeline as fp

    a = fp.settings(stages=["agent", "speaker", "augment"])
    assert "fedvln.seen-rate=0.5" in fp.stage_config(a, "speaker")
    assert "fedvln.patience=16" in fp.stage_config(a, "speaker")
    assert "fedvln.server-lr=1.6" in fp.stage_config(a, "speaker")  # the official speaker's
    assert "seen-rate" not in fp.stage_config(a, "agent")
    assert "server-lr" not in fp.stage_config(a, "agent")  # the cpu recipe's 1
    assert "fedvln.patience=8" in fp.stage_config(a, "agent")
    fixed = fp.settings(patience=0)
    assert "fedvln.patience=0" in fp.stage_config(fixed, "speaker")
    base = {**TINY, "fedvln.train-houses": 12}
    rates = {"agent": 0.2, "speaker": 0.5, "augment": 0.2}  # 2, 6 and 2 houses a round
    per_round = {"agent": 24, "speaker": 114, "augment": 12}  # summed over houses
    for stage, rate in rates.items():
        (tmp_path / stage).mkdir()
        rows = [
            {
                "round": r,
                "local_steps": per_round[stage],
                fp.SPEAKER_SELECTION: 1.0,
                "val_unseen_sr": 1.0,
            }
            for r in (1, 2, 3)
        ]
        pd.DataFrame(rows).to_csv(tmp_path / stage / "rounds.csv", index=False)
        cfg = merged({**base, "fedvln.seen-rate": rate})
        (tmp_path / stage / "config.json").write_text(json.dumps(cfg))
    calls = []
    monkeypatch.setattr(fp.vln_centralized, "main", lambda args: calls.append(args) or 0)
    fp.centralized(a, tmp_path, 0)
    got = {c[c.index("--stages") + 1]: c for c in calls}
    assert sorted(got) == ["agent", "augment", "augment-control", "speaker"]
    flag = {
        s: {k: c[c.index(k) + 1] for k in ("--patience", "--eval-every")} for s, c in got.items()
    }
    assert flag["agent"] == {"--patience": "8", "--eval-every": "12"}
    assert flag["speaker"] == {"--patience": "16", "--eval-every": "19"}
    assert flag["augment"] == {"--patience": "8", "--eval-every": "6"}
    # augmentation's control: the augment stage's rule and cap, less the routes
    assert flag["augment-control"] == flag["augment"]
    cap = got["augment"][got["augment"].index("--aug-iters") + 1]
    assert got["augment-control"][got["augment-control"].index("--aug-iters") + 1] == cap
    # the centralized baselines see what the federated houses saw: the same added look
    assert all(c[c.index("--appearance") + 1] == "0.0" for c in calls)
    assert not any("--features-tsv" in c for c in calls)
    # and the same speaker: the federated stage's word dropout (the default's 0.25)
    assert all(c[c.index("--speaker-word-dropout") + 1] == "0.25" for c in calls)
    for stage in rates:
        cfg = json.loads((tmp_path / stage / "config.json").read_text())
        cfg["fedvln.appearance"] = 1.5
        (tmp_path / stage / "config.json").write_text(json.dumps(cfg))
    calls.clear()
    fp.centralized(a, tmp_path, 0)
    assert calls and all(c[c.index("--appearance") + 1] == "1.5" for c in calls)


def pipeline_cell(**over) -> dict:
    """The first cell of the committed pipeline study, `over` replacing fields."""
    from experiments import function_runs, study

    s = study.load(ROOT / "experiments" / "studies" / "fedvln_pipeline.toml")
    return study.cells(s, function_runs.crossed(s))[0] | over


def test_pipeline_refuses_a_stage_without_the_stages_it_starts_from():
    """Each pipeline study field is checked before anything trains, named with the file."""
    from experiments.fedvln import pipeline as fp

    for over, says in (
        ({"stages": ["speaker", "preexplore"]}, "grid.stages: preexplore needs augment"),
        ({"pre-rounds": 0}, "grid.pre-rounds: must be >= 1"),
        ({"extra-config": "fedvln.aug-routes=8"}, "grid.extra-config: may not set"),
        ({"speaker-server-lr": -1.0}, "grid.speaker-server-lr: must be in"),
        ({"stages": ["agent", "loud"]}, "grid.stages: some of"),
    ):
        with pytest.raises(ValueError, match=f"f.toml: {says}"):
            fp.check(pipeline_cell(**over), "f.toml")
    fp.check(pipeline_cell(), "f.toml")


def test_gap_study_reports_each_runs_best_and_last_with_their_steps_and_refuses_bad_flags():
    from experiments.fedvln import gap as gap

    df = pd.DataFrame({"steps": [72, 144, 216], "val_unseen_sr": [10.0, 19.0, 15.0]})
    rows = {r["checkpoint"]: r for r in gap.rows_of("x", 3, df, stopped=True)}
    assert (rows["best"]["steps"], rows["best"]["val_unseen_sr"]) == (144, 19.0)
    assert (rows["last"]["steps"], rows["last"]["val_unseen_sr"]) == (216, 15.0)
    assert rows["best"]["stopped_early"] and rows["best"]["seed"] == 3
    fed = df.assign(round=[3, 6, 9], local_steps=24, n_clients=2)
    assert gap.sequential_steps(fed) == 6 * 12  # best at round 6, 12 steps per house a round
    # every variant names the settings it varies, so a changed default leaves it as it is
    for _, rc in gap.VARIANTS.values():
        for key in ("seen-rate", "local-epochs", "optimizer-state", "server-lr"):
            assert f"fedvln.{key}=" in rc
    cell = {"rounds": 150, "all-houses-rounds": 60, "eval-every": 3, "patience": 8}
    gap.check(cell | {"variant": "centralized"}, "f.toml")
    with pytest.raises(ValueError, match="f.toml: grid.patience"):
        gap.check(cell | {"variant": "default", "patience": 0}, "f.toml")
    with pytest.raises(ValueError, match="f.toml: grid.variant"):
        gap.check(cell | {"variant": "loud"}, "f.toml")
    table = pd.DataFrame(
        [
            {"run": "x", "checkpoint": "best", "n_seeds": 3, "stopped_early": 2.0, "steps": 1200.0,
             "steps_sd": 100.0, "val_unseen_sr": 30.04, "val_unseen_sr_sd": 1.0,
             "val_seen_sr": 31.0, "val_seen_sr_sd": float("nan")},
        ]
    )  # fmt: skip
    assert "| x | best | 3 | 2 / 3 | 1200 ± 100 | 30.0 ± 1.0 | 31.0 |" in gap.markdown(table)


def test_oracle_summary_pools_houses_by_episodes_and_pairs_each_arm_with_none():
    import pandas as pd

    from experiments.fedvln.oracle import ARMS, summarize

    rows = []
    for seed, base in ((0, 10.0), (1, 20.0), (2, 30.0)):
        for arm, gain in zip(ARMS, (0.0, 12.0, 1.0, -1.0, 9.0, 2.0), strict=True):
            # house b has 3x the episodes of house a: pooled SR = (a + 3 b) / 4
            rows += [
                {"seed": seed, "house": "a", "arm": arm, "n": 10, "sr": base + gain},
                {"seed": seed, "house": "b", "arm": arm, "n": 30, "sr": base + gain + 4.0},
            ]
    t = summarize(pd.DataFrame(rows)).set_index("arm")
    assert t.loc["none", "val_unseen SR"] == "23.0 ± 10.0"  # 10 + 3, 20 + 3, 30 + 3
    assert t.loc["grammar", "gain over none"].startswith("+12.0")
    assert t.loc["constant", "gain over none"].startswith("-1.0")
    # what the words add over the same routes with a constant sentence
    assert t.loc["grammar", "gain over constant (same routes)"].startswith("+13.0")
    assert t.loc["constant", "gain over constant (same routes)"] == ""
    # the held-out-house control: what adapting in this house adds over adapting in another
    other = "gain over the same adaptation in another house"
    assert t.loc["grammar", other].startswith("+3.0")
    assert t.loc["speaker", other].startswith("-1.0")
    assert t.loc["grammar@other", "gain over none"].startswith("+9.0")
    assert t.loc["none", other] == t.loc["constant", other] == t.loc["grammar@other", other] == ""


def test_the_oracles_control_adapts_on_another_unseen_houses_routes(tmp_path, monkeypatch):
    """Issue 64 item 4: `<arm>@other` adapts on the next unseen house's routes (and words) and
    is scored on this house's episodes; the other arms adapt at home."""
    from experiments.fedvln import oracle

    ck = tmp_path / "ck"
    ck.mkdir()
    for f in ("agent_best.pt", "speaker.pt"):
        (ck / f).write_bytes(b"x")
    seen = []

    def fake_adapt(follower, house, arm, speaker, routes, labelled, a, seed):
        scans = {r.scan for r in routes}
        words = {r.scan for r in labelled.get(arm, routes)}
        seen.append((house.name, arm, scans, words, {e.scan for e in house.val}))
        return {"n": len(house.val), "sr": 0.0, "spl": 0.0}

    monkeypatch.setattr(oracle, "adapt", fake_adapt)
    monkeypatch.setattr(oracle, "_models", lambda a, seed: ck)
    monkeypatch.setattr(oracle.vln_checkpoint, "load", lambda p: (None, None, None))
    a = SimpleNamespace(
        steps=1, routes=4, batch_size=2, lr=1e-4, data_dir="", appearance=0.0, models=str(ck),
        work=str(tmp_path / "out"),
    )  # fmt: skip
    oracle.run_seed(a, 0)
    houses = sorted({h for h, *_ in seen})
    assert len(houses) == 4 and len(seen) == 4 * len(oracle.ARMS)
    for k, (house, word, scans, words, scored) in enumerate(seen):
        arm = oracle.ARMS[k % len(oracle.ARMS)]  # adapted in the order of ARMS, house by house
        assert word == arm.removesuffix("@other") and scored == {house}  # scored at home
        if arm == "none":
            continue
        want = houses[(houses.index(house) + 1) % 4] if arm.endswith("@other") else house
        assert scans == {want} and words == {want}, (house, arm)
    # a rerun reuses the rows, unless the houses' generator or the route filter changed
    n = len(seen)
    oracle.run_seed(a, 0)
    assert len(seen) == n
    monkeypatch.setattr(oracle, "ROUTE_FILTER", oracle.ROUTE_FILTER + 1)
    oracle.run_seed(a, 0)
    assert len(seen) == 2 * n


def test_r2r_oracle_adapts_on_paths_disjoint_from_the_scored_half_of_the_house():
    """On R2R the human arm adapts on real val_unseen paths: they alternate with the scored
    ones, keep all their references, and none has the nodes (in order) or the start and goal
    of a scored path, so no arm trains on what it is scored on (issue 41, item 4)."""
    from envs.vln_data import Episode
    from experiments.fedvln.oracle import split_paths

    def ep(pid, k, path):
        return Episode(f"{pid}_{k}", "h", tuple(path), 0.0, f"go {pid} {k}", pid)

    val = [ep(pid, k, path) for pid, path in [
        (1, "abc"), (2, "ade"), (3, "fgh"), (4, "fxh"),  # 4 has 3's start and goal
        (5, "ijk"), (6, "ijk"), (7, "lmn"), (8, "opq"),  # 6 is 5's path
        (9, "rst"), (10, "tsr"), (11, "uvw"), (12, "wzu"),  # 10 is 9 reversed, 12 joins w, u
        (13, "xyz"), (14, "cba"),  # 14 is 1 reversed
    ] for k in range(3)]  # fmt: skip
    scored, adapt_on = split_paths(val)
    assert sorted({e.path_id for e in scored}) == [1, 3, 5, 7, 9, 11, 13]
    assert sorted(adapt_on) == [2, 8]
    assert all(len(v) == 3 for v in adapt_on.values())  # every reference of a path
    ends = {(e.path[0], e.path[-1]) for e in scored}
    ends |= {(b, a) for a, b in ends}
    for eps in adapt_on.values():
        assert eps[0].path not in {p for e in scored for p in (e.path, e.path[::-1])}
        assert (eps[0].path[0], eps[0].path[-1]) not in ends


def test_oracle_studies_name_the_field_when_their_models_are_missing(tmp_path, capsys):
    """The R2R oracle never trains the R2R speaker study's models, and a look's oracle never
    trains or reuses the speaker study's (the look changes the follower's input): missing
    models stop the study in one line naming the field, the folder, what is missing and how
    to make it; an appearance without `models` is refused before anything runs."""
    from experiments import study as runner

    studies = ROOT / "experiments" / "studies"
    r2r = (studies / "fedvln_oracle_r2r.toml").read_text()
    spk = (studies / "fedvln_speaker_r2r.toml").read_text()
    (tmp_path / "spk.toml").write_text(spk.replace("runs/fedvln-speaker-r2r", str(tmp_path / "s")))
    data = tmp_path / "data"
    data.mkdir()
    f = tmp_path / "o.toml"
    f.write_text(
        r2r.replace("experiments/studies/fedvln_speaker_r2r.toml", str(tmp_path / "spk.toml"))
        .replace('"../shared/data"', f'"{data}"').replace("seed = [0, 1, 2]", "seed = [0]")
        .replace('name = "fedvln_oracle_r2r"', 'name = "x_oracle"')
    )  # fmt: skip
    assert runner.main([str(f), "--work", str(tmp_path / "o"), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "grid.speaker-study" in err and "agent_best.pt" in err and str(tmp_path / "s") in err
    assert f"python -m experiments.study {tmp_path / 'spk.toml'}" in err
    assert len(err.strip().splitlines()) == 1
    look = (studies / "fedvln_oracle_appearance.toml").read_text()
    look = look.replace('name = "fedvln_oracle_appearance"', 'name = "x_oracle"')
    f.write_text(look.replace("runs/fedvln-appearance", str(tmp_path / "a")))
    assert runner.main([str(f), "--work", str(tmp_path / "o"), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "grid.models" in err and "a1-s" in err and "speaker.pt" in err
    f.write_text(
        look.replace('models = "runs/fedvln-appearance/a1-s{seed}/checkpoints"', 'models = ""')
    )
    assert runner.main([str(f), "--work", str(tmp_path / "o")]) == 2
    assert "grid.appearance" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_sampled_routes_never_hold_a_scored_route_of_the_house():
    """Routes a house samples for augmentation or pre-exploration share neither the path nor
    the (start, goal) of an episode the house is scored on, in seen and unseen houses alike:
    the old oracle arm, and the pipeline's pre-exploration, trained on the routes they were
    scored on (issue 41). Asking for fewer routes gives a prefix of asking for more (the
    centralized reference rebuilds what each house samples)."""
    from envs.vln_houses import HouseSpec
    from training.vln_house import house_names, open_house, open_setup, speaker_routes

    setup = open_setup("", "", HouseSpec())
    seen, unseen = house_names(setup)
    for name in (seen[0], unseen[0], unseen[-1]):
        house = open_house(setup, name)
        routes = speaker_routes(house, 60, seed=0)
        assert len(routes) == 60
        ends = {(e.path[0], e.path[-1]) for e in house.val}
        ends |= {(b, a) for a, b in ends}  # either way (issue 64)
        scored = {e.path for e in house.val} | {e.path[::-1] for e in house.val}
        assert not {r.path for r in routes} & scored
        assert not {(r.path[0], r.path[-1]) for r in routes} & ends
        assert [r.path for r in speaker_routes(house, 20, seed=0)] == [r.path for r in routes[:20]]
    # the filter is not idle: unfiltered draws in these houses do hit scored routes
    from envs.vln_routes import sample_routes

    house = open_house(setup, unseen[0])
    scan = setup.world.scan(house.name)
    drawn = sample_routes(scan, 400, np.random.default_rng(0))
    ends = {(e.path[0], e.path[-1]) for e in house.val}
    assert any((scan.ids[p[0]], scan.ids[p[-1]]) in ends for p, _ in drawn)
    backwards = {(b, a) for a, b in ends}  # and reversed ones, which the filter also drops
    assert any((scan.ids[p[0]], scan.ids[p[-1]]) in backwards for p, _ in drawn)


def test_val_seen_shares_no_path_with_train_either_way():
    """Issue 64: R2R's val_seen holds new routes in the training houses; the embedded houses'
    val_seen drew 6 of 120 paths identical to a train path and 9 reversed. Now none, in every
    house (and the houses still have their 10 val_seen paths each)."""
    from envs.vln_houses import HouseSpec
    from training.vln_house import open_setup

    setup = open_setup("", "", HouseSpec())
    train = setup.split("train")
    for scan in {e.scan for e in train}:
        paths = {e.path for e in train if e.scan == scan}
        paths |= {p[::-1] for p in paths}
        val = [e for e in setup.split("val_seen") if e.scan == scan]
        assert len({e.path_id for e in val}) == HouseSpec().val_seen_paths
        assert not {e.path for e in val} & paths, scan


def test_grammar_route_words_name_each_routes_rooms_and_goal():
    """fedvln.route-words = "grammar" gives each sampled route the houses' own instruction for
    it: route fidelity at the true references' level, far above a constant's; refused on a
    data folder, which has no grammar, and in a stage that samples no routes."""
    from config.schema import ConfigError, merged
    from envs.vln_houses import HouseSpec
    from training.vln_house import (
        grammar_words,
        house_names,
        open_house,
        open_setup,
        speaker_routes,
    )
    from training.vln_speaker_quality import fidelity

    setup = open_setup("", "", HouseSpec())
    seen, unseen = house_names(setup)
    for name in (seen[0], unseen[0]):
        house = open_house(setup, name)
        routes = speaker_routes(house, 30, seed=0)
        words = grammar_words(house, routes, HouseSpec(), seed=0)
        assert words == grammar_words(house, routes, HouseSpec(), seed=0)
        good = fidelity(setup.data, routes, words, {})  # sampled: no references
        const = fidelity(setup.data, routes, [house.val[0].instruction] * len(routes), {})
        assert good["rooms_on_route"] > 90 and good["goal_room"] > 80
        assert good["fidelity"] > const["fidelity"] + 30
    rc = {"method": "fedvln", "fedvln.route-words": "grammar", "fedvln.stage": "augment"}
    parse(merged(rc))
    for bad in ({"fedvln.data-dir": "/data/r2r"}, {"fedvln.stage": "agent"}):
        with pytest.raises(ConfigError, match="fedvln.route-words"):
            parse(merged({**rc, **bad}))


def test_a_house_that_lost_its_setup_refuses_to_train_without_it():
    """A resumed augment stage skips the setup round; a seen house whose saved state is gone
    (no speaker, no routes) must not train on its labels alone as if nothing were missing."""
    from types import SimpleNamespace

    from clients.fedvln_client import SPEAKER, _check_setup
    from contracts.fedvln import FOLLOWER_TO, SPEAKER_TO

    conf = {SPEAKER_TO: "seen", FOLLOWER_TO: ""}
    seen, unseen = (
        SimpleNamespace(name="h1", role="seen"),
        SimpleNamespace(name="u1", role="unseen"),
    )
    with pytest.raises(ValueError, match="h1 .seen. no longer holds the speaker"):
        _check_setup(SimpleNamespace(state={}), conf, seen)
    _check_setup(SimpleNamespace(state={SPEAKER: object()}), conf, seen)
    _check_setup(SimpleNamespace(state={}), conf, unseen)  # not equipped in this stage


def test_gap_study_reuses_the_pipelines_agent_run_only_when_it_is_the_same_run(tmp_path):
    import json

    from config.schema import merged, parse_overrides
    from experiments.fedvln import gap as gap

    a = SimpleNamespace(rounds=150, all_houses_rounds=60, eval_every=3, patience=8,
                        pipeline_work=str(tmp_path), work=tmp_path / "own")  # fmt: skip
    run = tmp_path / "seed2" / "agent"
    run.mkdir(parents=True)
    pd.DataFrame(
        [{"round": 1, "local_steps": 24, "val_unseen_sr": 20.0, "val_unseen_n": 360}]
    ).to_csv(run / "rounds.csv", index=False)
    # the pipeline's agent stage: the defaults (server-lr 0 = the recipe's eta of 1)
    cfg = merged(parse_overrides(f'fedvln.stage="agent" eval-every=3 fedvln.patience={a.patience}'))
    cfg.update({"num-server-rounds": a.rounds, "seed": 2, "method": "fedvln", "wall_s": 1.0})
    recipe = dict(CPU_AGENT_RECIPE)
    cfg.update({"out-dir": str(run), "num-clients": 16, "recipe": recipe})
    (run / "config.json").write_text(json.dumps(cfg))
    assert gap.pipeline_twin(a, "kept-optimizer", 2) == run
    assert gap.pipeline_twin(a, "kept-optimizer", 1) is None  # another seed: no run
    assert gap.pipeline_twin(a, "kept-optimizer-eta2", 2) is None  # eta 2
    assert gap.pipeline_twin(a, "default", 2) is None  # a fresh optimizer each round
    assert (
        gap.pipeline_twin(SimpleNamespace(**{**vars(a), "rounds": 90}), "kept-optimizer", 2) is None
    )
    # trained under another recipe (its lr is not what these settings resolve to today)
    (run / "config.json").write_text(json.dumps({**cfg, "recipe": {**recipe, "lr": 1e-4}}))
    assert gap.pipeline_twin(a, "kept-optimizer", 2) is None


def test_pipeline_floor_scores_an_untrained_follower_and_speaker_from_a_stages_config(tmp_path):
    """The floor rows come from whichever stage ran (agent, or speaker alone)."""
    import json

    from config.schema import merged
    from experiments.fedvln import pipeline as fp

    out = tmp_path / "seed0"
    (out / "speaker").mkdir(parents=True)
    cfg = merged({**TINY, "fedvln.stage": "speaker"})
    (out / "speaker" / "config.json").write_text(json.dumps(cfg))
    fp.floor(out, 0)
    row = pd.read_csv(out / "untrained" / "log.csv").iloc[0]
    assert row["val_unseen_n"] > 0 and 0 <= row["val_unseen_sr"] <= 100
    assert row["val_unseen_bleu"] == row["val_unseen_bleu"]  # scored, not NaN
    # Table 4's floors beside it: a constant sentence and another path's instruction
    for run in ("constant", "other-path"):
        floor = pd.read_csv(out / run / "log.csv").iloc[0]
        assert floor["val_unseen_bleu"] > 10 and floor["val_unseen_fidelity"] < 50
    # kept on a rerun with the same run; made again when the run's features change
    made = (out / "untrained" / "log.csv").stat().st_mtime_ns
    fp.floor(out, 0)
    assert (out / "untrained" / "log.csv").stat().st_mtime_ns == made
    (out / "speaker" / "config.json").write_text(json.dumps({**cfg, "fedvln.appearance": 1.0}))
    fp.floor(out, 0)
    assert json.loads((out / "untrained" / "made_from.json").read_text())["fedvln.appearance"] == 1
    assert (out / "untrained" / "log.csv").stat().st_mtime_ns != made


def test_pipeline_starts_pre_exploration_from_given_models_and_scores_that_start(tmp_path):
    """--start-models (issue 41: Table 5 with a house's own look, from the appearance study's
    centralized follower and speaker): refused with other stages or a folder that lacks a
    model; the start row is that follower's val_unseen SR, made again when it changes."""
    import json

    import torch

    from config.schema import merged
    from contracts.fedvln import follower_size
    from experiments.fedvln import pipeline as fp
    from models import vln_checkpoint
    from models.envdrop import Follower
    from training.vln_house import setup_of

    with pytest.raises(ValueError, match=r'stages = \["preexplore"\] alone'):
        fp.check(pipeline_cell(stages=["agent", "preexplore"], **{"start-models": "x"}), "f.toml")
    fp.check(pipeline_cell(stages=["preexplore"], **{"start-models": "x"}), "f.toml")
    ck = tmp_path / "models" / "s0"
    ck.mkdir(parents=True)
    a = fp.settings(stages=["preexplore"], start_models=str(tmp_path / "models" / "s{seed}"))
    with pytest.raises(ValueError, match="grid.start-models: .*has no agent_best.pt, speaker.pt"):
        fp.start_folder(a, 0)
    with pytest.raises(ValueError, match="f.toml: grid.start-models: .*has no agent_best.pt"):
        fp.needs(pipeline_cell(stages=["preexplore"], **{"start-models": a.start_models}), "f.toml")
    with pytest.raises(ValueError, match="grid.start-models: .*has no agent_best.pt"):
        fp.measure(
            **{
                k.replace("-", "_"): v
                for k, v in pipeline_cell().items()
                if k not in ("run", "run-config")
            }
            | {"stages": ["preexplore"], "start_models": a.start_models, "work": tmp_path}
        )
    cfg = merged(
        {**TINY, "fedvln.stage": "preexplore", "fedvln.agent-init": str(ck / "agent_best.pt")}
    )
    c = parse(cfg)
    setup = setup_of(c)
    v, f = len(setup.vocab), setup.world.feature_dim
    torch.manual_seed(0)
    vln_checkpoint.save(ck / "agent_best.pt", Follower(follower_size(c, v, f)), None)
    out = tmp_path / "seed0"
    (out / "preexplore-env-based").mkdir(parents=True)
    (out / "preexplore-env-based" / "config.json").write_text(json.dumps(cfg))
    assert fp.start_curve(out) is None
    fp.start_eval(out)
    start = fp.start_curve(out)
    assert len(start) == 1 and start["val_unseen_n"].iloc[0] > 0
    assert 0 <= start["val_unseen_sr"].iloc[0] <= 100
    made = (out / "start" / "log.csv").stat().st_mtime_ns
    fp.start_eval(out)  # the same checkpoint: kept
    assert (out / "start" / "log.csv").stat().st_mtime_ns == made
    torch.manual_seed(1)
    vln_checkpoint.save(ck / "agent_best.pt", Follower(follower_size(c, v, f)), None)
    fp.start_eval(out)  # another follower at the same path: scored again
    assert (out / "start" / "log.csv").stat().st_mtime_ns != made


def test_what_the_federated_speaker_said_is_written_for_every_val_path(tmp_path):
    """said.csv (training/vln_said.py), as simulation.py writes it after a speaker stage and
    the pipeline after its own: every val path once per checkpoint."""
    import json

    import torch

    from config import parse
    from config.schema import merged
    from contracts.fedvln import speaker_size
    from models import vln_checkpoint
    from models.speaker import Speaker
    from training.vln_house import open_setup, spec_of
    from training.vln_said import write_said

    run = tmp_path / "speaker"
    run.mkdir()
    cfg = merged({**TINY, "fedvln.stage": "speaker"})
    (run / "config.json").write_text(json.dumps(cfg))
    c = parse(cfg)
    setup = open_setup("", "", spec_of(c))
    torch.manual_seed(0)
    speaker = Speaker(speaker_size(c, len(setup.vocab), setup.world.feature_dim))
    for f in ("best.pt", "model.pt"):
        vln_checkpoint.save(run / f, speaker, None)  # a server's model: no vocabulary
    assert write_said(run) == run / "said.csv"
    said = pd.read_csv(run / "said.csv", keep_default_na=False)
    paths = {s: len({e.path_id for e in setup.split(s)}) for s in ("val_seen", "val_unseen")}
    for ck in ("best", "last"):
        for split, n in paths.items():
            rows = said[(said.checkpoint == ck) & (said.split == split)]
            assert len(rows) == n and rows.path_id.is_unique


def test_finetune_lr_study_reads_twin_runs_and_pairs_the_best_over_seeds(tmp_path):
    """A finished augment run of the same launch under a `reuse` folder is read, not trained
    again (and only for the lr its recipe resolved to); the table pairs each lr's best with the
    first lr's over the seeds both have, beside the agent each started from; a seed the
    pipeline has not run stops the study naming the study to run."""
    import json

    import experiments.fedvln.finetune_lr as ft
    from config.schema import merged, parse_overrides
    from experiments.fedvln.runs import curve

    old = tmp_path / "old"
    a = SimpleNamespace(rounds=90, eval_every=3, patience=8, pipeline_work=str(tmp_path / "pipe"),
                        reuse=[str(old)], work=tmp_path / "own")  # fmt: skip

    def run(folder, seed, srs, cfg=None):
        folder.mkdir(parents=True)
        rows = [{"round": 3 * (i + 1), "local_steps": 12, "val_unseen_sr": v, "val_unseen_n": 360}
                for i, v in enumerate(srs)]  # fmt: skip
        pd.DataFrame(rows).to_csv(folder / "rounds.csv", index=False)
        (folder / "config.json").write_text(json.dumps({"wall_s": 1.0, **(cfg or {})}))

    for seed, start in ((0, 30.0), (1, 34.0)):
        run(tmp_path / "pipe" / f"seed{seed}" / "agent", seed, [10.0, start])
        cfg = merged(parse_overrides(ft._config(a, seed, 1e-3)))
        cfg.update({"num-server-rounds": a.rounds, "seed": seed, "method": "fedvln"})
        recipe = dict(CPU_AGENT_RECIPE)
        cfg.update({"fedvln.lr": 0.0, "out-dir": "x", "recipe": recipe})  # the recipe's own lr
        run(old / f"seed{seed}" / "augment", seed, [20.0, 28.0 + seed, 25.0], cfg)
    assert ft.run_dir(a, 0, 1e-3) == old / "seed0" / "augment"
    assert ft.run_dir(a, 0, 1e-4) == a.work / "lr0.0001-s0"  # 1e-3 run: no twin of 1e-4
    rows = [ft.rows_of(a, s, 1e-3) for s in (0, 1)]
    assert rows[0]["start_sr"] == 30.0 and rows[0]["first_sr"] == 20.0
    assert (rows[1]["best_sr"], rows[1]["best_steps"], rows[1]["last_sr"]) == (29.0, 24, 25.0)
    runs = pd.DataFrame(rows + [{**r, "lr": 1e-4, "best_sr": r["best_sr"] + d}
                                for r, d in zip(rows, (4.0, 6.0))])  # fmt: skip
    table = ft.summary(runs).set_index("lr")
    assert table.loc["0.001", "best_gain_over_start"] == "-3.5 ± 2.1"
    assert table.loc["0.0001", "best_vs_first_lr"].startswith("+5.0 [")
    assert "| 0.0001 | 2 |" in ft.markdown(table.reset_index())
    assert curve(old / "seed0", "augment") is not None
    got = ft.measure(1, 1e-3, 90, 3, 8, str(tmp_path / "pipe"), [str(old)], tmp_path / "own")
    assert got == rows[1]  # read from the twin run, nothing trained
    with pytest.raises(ValueError, match=r"grid.pipeline-work: .* seed 2: run .*fedvln_pipeline"):
        ft.measure(2, 1e-3, 90, 3, 8, str(tmp_path / "pipe"), [str(old)], tmp_path / "own")
    for key, bad in (("lr", 0.0), ("patience", 0)):
        with pytest.raises(ValueError, match=f"f.toml: grid.{key}"):
            ft.check({"lr": 1e-3, "rounds": 90, "eval-every": 3, "patience": 8, key: bad}, "f.toml")


def test_augment_budget_changes_only_tau_and_pairs_each_arm_with_its_update_twin(
    tmp_path, monkeypatch
):
    """Issue 41: the arms that pull apart 'routes' and 'half the updates' are the pipeline's own
    augment and control launches with only fedvln.local-epochs scaled (x2 for augment, /2 for
    the control), and the perfect-words arm only its route words; the comparisons pair an arm
    with the one of equal updates, seed by seed."""
    import json

    import experiments.fedvln.augment_budget as ab

    pipe = tmp_path / "pipe"
    a = SimpleNamespace(pipeline_work=str(pipe), work=tmp_path / "own")
    for seed in (0, 1):
        for run, extra in (("augment", "fedvln.speaker-init=x"), ("augment-control", "")):
            f = pipe / f"seed{seed}" / run
            f.mkdir(parents=True)
            rows = [{"round": 3, "local_steps": 12, "val_unseen_sr": 30.0, "val_unseen_n": 360}]
            pd.DataFrame(rows).to_csv(f / "rounds.csv", index=False)
            (f / "config.json").write_text(json.dumps({"wall_s": 1, "fedvln.local-epochs": 3.0}))
            args = ["fedvln", "--rounds", "90", "--run-config", f'fedvln.stage="augment" {extra}']
            (f / "study.json").write_text(json.dumps({"args": args}))
    launched = []
    monkeypatch.setattr(ab, "simulate", lambda *x, **k: launched.append((x[1], k)))
    ab._run(a, 1, "augment at control's updates")
    ab._run(a, 0, "control at augment's updates")
    ab._run(a, 0, "augment, perfect words")
    (run1, k1), (run0, k0), (_, kg) = launched
    assert kg["run_config"].endswith('speaker-init=x fedvln.route-words="grammar"')
    assert k1["rounds"] == 90 and k1["seed"] == 1 and run1.parent == a.work
    assert k1["run_config"] == 'fedvln.stage="augment" fedvln.speaker-init=x fedvln.local-epochs=6'
    assert (
        k0["run_config"].endswith("fedvln.local-epochs=1.5") and "speaker" not in k0["run_config"]
    )
    assert ab.run_dir(a, 0, "augment") == pipe / "seed0" / "augment"
    capped = pipe / "seed1" / "augment" / "config.json"  # a step cap breaks the equal updates
    capped.write_text(json.dumps({"wall_s": 1, "fedvln.local-epochs": 3.0,
                                  "fedvln.max-local-steps": 4}))  # fmt: skip
    with pytest.raises(ValueError, match="grid.pipeline-work: .*max-local-steps"):
        ab._run(a, 1, "augment at control's updates")
    got = ab.measure(0, "augment", str(pipe), tmp_path / "own")  # the pipeline's: read
    assert [r["checkpoint"] for r in got] == ["best", "last"] and len(launched) == 3
    with pytest.raises(ValueError, match="seed 2: run .*fedvln_pipeline.toml"):
        ab.measure(2, "augment", str(pipe), tmp_path / "own")

    sr = {"augment": (28, 27), "control": (33, 30), "control at augment's updates": (29, 27),
          "augment at control's updates": (31, 31)}  # fmt: skip
    runs = pd.DataFrame(
        [
            {"seed": s, "arm": arm, "checkpoint": "best", "sr": v[s] + s, "n": 360.0}
            for arm, v in sr.items()
            for s in (0, 1)
        ]  # fmt: skip
    )
    t = ab.comparisons(runs).set_index("b")
    assert t.loc["control at augment's updates", "by_seed"] == "-1.0 / +0.0"
    assert t.loc["control at augment's updates", "within_noise"]
    assert t.loc["control", "a"].tolist() == [
        "augment",
        "augment at control's updates",
        "control at augment's updates",
    ]
    assert "| routes at augment's updates" in ab.markdown(t.reset_index())


def test_centralized_patience_spans_the_federated_stages_sequential_steps():
    """Issue 41: the centralized baseline stops by the federated rule, P evaluations spanning
    the same sequential steps: evaluated every E * S steps, not at the federated summed counts
    E * S * H (which, with P / H patience, gave it half the noisy draws)."""
    from config.schema import merged
    from experiments.fedvln.pipeline import central_every

    cfg = merged({**TINY, "fedvln.seen-rate": 0.2})  # 3 seen houses: 1 per round
    assert central_every(8, 72, cfg) == 72
    cfg = merged({**TINY, "fedvln.train-houses": 12, "fedvln.seen-rate": 0.2})  # 2 per round
    assert central_every(8, 72, cfg) == 36 and central_every(3, 75, cfg) == 38
    assert central_every(0, 72, cfg) == 72  # fixed budgets: the federated evaluation points


def _fake_run(out, run, srs):
    """A finished federated run whose evaluations have these val_unseen SRs, 24 steps a round."""
    (out / run).mkdir(parents=True)
    rows = [{"round": r + 1, "local_steps": 24, "val_unseen_sr": v} for r, v in enumerate(srs)]
    pd.DataFrame(rows).to_csv(out / run / "rounds.csv", index=False)
    (out / run / "config.json").write_text('{"wall_s": 1.0}')


def test_gains_are_paired_by_seed_and_pre_exploration_is_compared_with_its_start(tmp_path):
    """Issue 41 item 5: each contribution's gain is a paired interval over seeds; a
    pre-exploration's last checkpoint is compared with the best augmented agent it starts from,
    and a seed missing one side is left out of that comparison, not paired with another."""
    from experiments.fedvln.gains import gains, markdown
    from experiments.fedvln.runs import seed_dirs

    curves = {  # seed: (agent, augment, fed-lan, fed-full, augment-control)
        0: ([10, 30, 20], [31, 34, 33], [35, 38, 36], [30, 29], [31, 35]),
        1: ([12, 26, 25], [27, 29, 28], [33, 31, 32], [28, 30], [27, 28]),
        2: ([11, 28, 27], [30, 33, 31], [35, 37, 35], None, [30, 31]),
    }
    for seed, (agent, aug, lan, full, ctl) in curves.items():
        out = tmp_path / f"seed{seed}"
        _fake_run(out, "agent", agent)
        _fake_run(out, "augment", aug)
        _fake_run(out, "augment-control", ctl)
        _fake_run(out, "preexplore-fed-lan", lan)
        if full:
            _fake_run(out, "preexplore-fed-full", full)
    t = gains(seed_dirs(tmp_path, [0, 1, 2])).set_index(["comparison", "checkpoint"])
    aug = t.loc[("augmentation, federated", "best")]
    assert aug["gain"] == pytest.approx(np.mean([4, 3, 5])) and aug["n_seeds"] == 3
    assert aug["low"] > 0 and not aug["within_noise"]
    assert aug["by_seed"] == "+4.0 / +3.0 / +5.0"
    ctl = t.loc[("augmentation vs its control (same restart, no routes), federated", "best")]
    assert ctl["by_seed"] == "-1.0 / +1.0 / +2.0" and ctl["within_noise"]
    lan_last = t.loc[("pre-exploration, fed-lan", "last")]
    assert lan_last["b_checkpoint"] == "best"  # its start is the augmented agent's best
    assert lan_last["gain"] == pytest.approx(np.mean([36 - 34, 32 - 29, 35 - 33]))
    claim = t.loc[("sharing only the language encoder vs the whole model", "best")]
    assert claim["n_seeds"] == 2  # seed 2 has no fed-full run
    assert claim["gain"] == pytest.approx(np.mean([38 - 30, 33 - 30]))
    assert ("augmentation, centralized", "best") not in t.index  # no centralized runs here
    assert "+4.0 [" in markdown(t.reset_index())


def test_pre_exploration_from_given_models_is_compared_with_that_start(tmp_path):
    """With `start-models` there is no augmented agent: each variant's best and last are
    paired with the given follower's one evaluation (`start/log.csv`), and no augmentation row
    appears."""
    from experiments.fedvln.gains import gains
    from experiments.fedvln.runs import seed_dirs

    for seed, (start, env) in {0: (25.0, [28, 31, 30]), 1: (31.0, [33, 36, 35])}.items():
        out = tmp_path / f"seed{seed}"
        _fake_run(out, "preexplore-env-based", env)
        (out / "start").mkdir()
        pd.DataFrame(
            [{"round": 0, "steps": 0, "val_unseen_sr": start, "val_unseen_n": 360}]
        ).to_csv(out / "start" / "log.csv", index=False)
    t = gains(seed_dirs(tmp_path, [0, 1])).set_index(["comparison", "checkpoint"])
    best = t.loc[("pre-exploration, env-based, from its start-models", "best")]
    assert best["by_seed"] == "+6.0 / +5.0" and best["n_seeds"] == 2
    last = t.loc[("pre-exploration, env-based, from its start-models", "last")]
    assert last["b_checkpoint"] == "best" and last["by_seed"] == "+5.0 / +4.0"
    assert not any("augmentation" in c for c, _ in t.index)


def test_table5_has_its_house_and_budget_controls_and_says_which_runs_hit_the_cap(tmp_path):
    """Issue 64 items 4 and 6: env-based is paired with the same adaptation in another house
    and with itself at the federated variants' r1; fed-lan with the latter (same updates per
    house); Table 5 counts the seeds whose run stopped at its round cap."""
    import json

    from config import parse
    from config.schema import merged
    from experiments.fedvln.gains import gains
    from experiments.fedvln.pipeline import NAV, table5
    from experiments.fedvln.runs import BUDGET_CONTROL, HOUSE_CONTROL, seed_dirs
    from server.fedvln_run import plan_of

    for seed in (0, 1, 2):
        out = tmp_path / f"seed{seed}"
        _fake_run(out, "preexplore-env-based", [30 + seed, 36 + seed, 35 + seed])
        _fake_run(out, f"preexplore-{HOUSE_CONTROL}", [30 + seed, 32 + seed, 33 + seed])
        _fake_run(out, f"preexplore-{BUDGET_CONTROL}", [30 + seed, 33 + seed, 34 + seed])
        _fake_run(out, "preexplore-fed-lan", [30 + seed, 34 + seed])
        for run, cap, early in (
            ("env-based", 3, False),
            (HOUSE_CONTROL, 60, False),
            (BUDGET_CONTROL, 3, True),  # patience stopped it in the cap's own round
        ):
            conv = {"stopped_early": early}
            (out / f"preexplore-{run}" / "config.json").write_text(
                json.dumps({"wall_s": 1.0, "num-server-rounds": cap, "convergence": conv})
            )
        for run in ("env-based", HOUSE_CONTROL, BUDGET_CONTROL, "fed-lan"):  # Table 5's columns
            f = out / f"preexplore-{run}" / "rounds.csv"
            other = {f"val_unseen_{k}": 1.0 for k in NAV if k != "sr"}
            df = pd.read_csv(f).assign(bytes_up=0, val_unseen_n=90, **other)
            df.to_csv(f, index=False)
    dirs = seed_dirs(tmp_path, [0, 1, 2])
    t = gains(dirs).set_index(["comparison", "checkpoint"])
    other = "vs the same adaptation in another house (held-out-house control)"
    house = t.loc[(f"env-based {other}", "best")]
    assert house["by_seed"] == "+3.0 / +3.0 / +3.0" and house["b"] == HOUSE_CONTROL
    # every pre-exploration variant has the control beside it, not only env-based
    assert t.loc[(f"fed-lan {other}", "best")]["by_seed"] == "+1.0 / +1.0 / +1.0"
    budget = t.loc[(next(c for c, _ in t.index if "every round vs at r1" in c), "best")]
    assert budget["by_seed"] == "+2.0 / +2.0 / +2.0"
    equal = t.loc[(next(c for c, _ in t.index if "same updates per house" in c), "best")]
    assert equal["a"] == "fed-lan" and equal["by_seed"] == "+0.0 / +0.0 / +0.0"
    t5 = table5(dirs).query("source == 'ours' and checkpoint == 'best'").set_index("method")
    assert t5.loc["env-based", "seeds_at_cap"] == 3  # 3 rounds of a cap of 3
    assert t5.loc[HOUSE_CONTROL, "seeds_at_cap"] == 0  # stopped before its cap of 60
    assert t5.loc[BUDGET_CONTROL, "seeds_at_cap"] == 0  # patience, not the cap
    assert np.isnan(t5.loc["fed-lan", "seeds_at_cap"])  # no convergence record: not known
    # env-based trains every unseen house each round unless told to train r1 of them
    rc = {"method": "fedvln", "fedvln.stage": "preexplore", "fedvln.variant": "env-based"}
    assert plan_of(parse(merged(rc))).rates == {"unseen": 1.0}
    assert plan_of(parse(merged({**rc, "fedvln.env-based-rate": 0.6}))).rates == {"unseen": 0.6}


def test_a_gain_below_one_evaluations_noise_is_within_noise_even_if_the_seeds_agree(tmp_path):
    """Two seeds whose augmented agents both beat their control by 0.6 SR: the seeds' own
    spread is 0, but each SR is measured on 360 episodes (binomial sd ~2.4 points), so the
    gains table floors the interval's sd and calls it noise."""
    from experiments.fedvln.gains import gains
    from experiments.fedvln.runs import seed_dirs
    from experiments.tables import binomial_sd

    for seed, (aug, ctl) in {0: (30.6, 30.0), 1: (28.3, 27.7)}.items():
        for run, sr in (("augment", aug), ("augment-control", ctl)):
            (tmp_path / f"seed{seed}" / run).mkdir(parents=True)
            pd.DataFrame(
                [{"round": 1, "local_steps": 24, "val_unseen_sr": sr, "val_unseen_n": 360}]
            ).to_csv(tmp_path / f"seed{seed}" / run / "rounds.csv", index=False)
            (tmp_path / f"seed{seed}" / run / "config.json").write_text('{"wall_s": 1.0}')
    t = gains(seed_dirs(tmp_path, [0, 1])).set_index(["comparison", "checkpoint"])
    ctl = t.loc[("augmentation vs its control (same restart, no routes), federated", "best")]
    assert ctl["by_seed"] == "+0.6 / +0.6" and ctl["within_noise"]
    assert ctl["low"] < 0 < ctl["high"]
    sd = binomial_sd({0: (30.0, 360.0)}, {0: (30.0, float("nan"))}, [0])
    assert sd == pytest.approx(
        np.sqrt(2 * 30 * 70 / 360)
    )  # a side without a count takes the other's


def test_table4_carries_what_each_speaker_teaches_beside_its_floors(tmp_path):
    """Table 4's teaching columns come from the seed's teaching.csv: a floor and the true
    words have one row for both checkpoints, a speaker one per checkpoint."""
    from experiments.fedvln import pipeline as fp

    out = tmp_path / "seed0"
    (out / "speaker").mkdir(parents=True)
    rows = [{"round": 1, "local_steps": 10, "val_seen_fidelity": 70, "val_unseen_bleu": 40}]
    rows += [{"round": 2, "local_steps": 10, "val_seen_fidelity": 60, "val_unseen_bleu": 45}]
    pd.DataFrame(rows).to_csv(out / "speaker" / "rounds.csv", index=False)
    (out / "speaker" / "config.json").write_text('{"wall_s": 1.0}')
    (out / "constant").mkdir()
    pd.DataFrame([{"round": 0, "steps": 0, "val_unseen_bleu": 41}]).to_csv(
        out / "constant" / "log.csv", index=False
    )
    (out / "agent").mkdir()
    for f in ("agent/best.pt", "speaker/best.pt"):
        (out / f).write_bytes(b"")
        os.utime(out / f, (1e9, 1e9))  # older than teaching.csv: it is read, not recomputed
    taught = [
        ("true instructions", "", 40.0),
        ("constant sentence (floor)", "", 8.0),
        ("Fed", "best", 32.0),
        ("Fed", "last", 30.0),
    ]
    pd.DataFrame(
        [
            {
                "seed": 0,
                "speaker": n,
                "checkpoint": ck,
                "split": sp,
                "taught_sr": sr,
                "true_sr": 40.0,
                "taught_ratio": sr / 40,
            }
            for n, ck, sr in taught
            for sp in ("val_seen", "val_unseen")
        ]
    ).to_csv(out / "teaching.csv", index=False)
    t = fp.table4({0: out}).query("source == 'ours'").set_index(["speaker", "checkpoint"])
    assert t.loc[("Fed", "best"), "val_unseen_taught_ratio"] == pytest.approx(0.8)
    assert t.loc[("Fed", "best"), "val_seen_fidelity"] == 70  # kept by val_seen fidelity
    assert t.loc[("Fed", "last"), "val_unseen_taught_sr"] == 30
    assert t.loc[("constant sentence (floor)", "last"), "val_unseen_taught_sr"] == 8
    assert t.loc[("true instructions", "best"), "val_unseen_taught_ratio"] == 1
    assert "32.0 (0.80)" in fp.markdown(
        {k: pd.DataFrame() for k in ("table2", "table5", "table9")}
        | {"table4": fp.table4({0: out})}
    )


def test_the_speaker_panel_draws_the_constant_sentence_from_table4():
    """Issue 66 item 4: a BLEU a constant sentence reaches says nothing of the route, so the
    figure's speaker panel draws Table 4's constant-sentence floor (its best row, ours, not the
    paper's), not only the untrained speaker's zero; without a Table 4 it draws no such line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.fedvln import pipeline as fp

    curves = pd.DataFrame(
        [{"seed": 0, "run": "central/speaker", "steps": 10.0 * k, "value": 5.0 * k} for k in (1, 2)]
        + [{"seed": 0, "run": "untrained/bleu", "steps": 0.0, "value": 0.0}]
    )
    table4 = pd.DataFrame(
        [
            {"speaker": "constant sentence (floor)", "checkpoint": "best", "val_unseen_bleu": 18.0,
             "source": "ours"},
            {"speaker": "constant sentence (floor)", "checkpoint": "last", "val_unseen_bleu": 1.0,
             "source": "ours"},
            {"speaker": "other path's instruction (floor)", "checkpoint": "best",
             "val_unseen_bleu": 10.6, "source": "ours"},
        ]
    )  # fmt: skip

    def floors(table):
        fig, ax = plt.subplots()
        fp._plot_speaker(ax, curves, table)
        lines = {ln.get_label(): ln.get_ydata()[0] for ln in ax.get_lines()}
        plt.close(fig)
        return {k: v for k, v in lines.items() if k.startswith(("constant", "other"))}

    assert floors(table4) == {
        "constant sentence (floor) 18.0": 18.0,
        "other path's instruction (floor) 10.6": 10.6,
    }
    assert floors(None) == {}


def test_the_follower_and_preexploration_panels_draw_their_paper_rows_and_floor():
    """Table 2's panel draws the paper's R2R SR for each run it draws that the paper has
    (the augmented rows too), and Table 5's panel the untrained follower, as Table 2's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.fedvln import pipeline as fp

    runs = ["augment", "untrained", fp._pre_run("fed-lan")]
    curves = pd.DataFrame(
        [{"seed": 0, "run": r, "steps": 10.0 * k, "value": 2.0 + k} for r in runs for k in (1, 2)]
    )
    lines = {}
    for draw in (fp._plot_follower, fp._plot_preexplore):
        fig, ax = plt.subplots()
        draw(ax, curves)
        lines[draw] = {ln.get_label(): ln.get_ydata()[0] for ln in ax.get_lines()}
        plt.close(fig)
    follower = lines[fp._plot_follower]
    assert follower["paper FedEnvdrop_aug 51.3"] == 51.3
    assert not any("paper Envdrop" in k for k in follower)  # its run is not drawn
    assert lines[fp._plot_preexplore]["untrained follower (floor)"] == 3.5


def test_table4_shows_a_removed_lenient_score_as_a_dash_and_keeps_the_unchanged_parts():
    """A Table 4 made before issue 64's strict fidelity has its lenient columns emptied (route
    fidelity, rooms on route, stop object): each shows '–', and goal room, whose rule did not
    change, still shows its number; a row with none of them is one '–'."""
    from experiments.fedvln import pipeline as fp

    row = {"speaker": "Fed", "checkpoint": "best", "n_seeds": 3, "steps": 10, "steps_sd": 0,
           "val_seen_bleu": 40.0, "val_unseen_bleu": 41.0, "source": "ours"}  # fmt: skip
    kept = {**row, "val_unseen_goal_room": 89.4, "val_unseen_goal_room_sd": 1.7}
    none = {**row, "speaker": "untrained (floor)"}
    full = {**row, "speaker": "Cent", "val_seen_fidelity": 80.0, "val_unseen_fidelity": 78.0,
            **{m: 50.0 for m in fp.T4_PARTS}}  # fmt: skip
    text = fp.markdown(
        {k: pd.DataFrame() for k in ("table2", "table5", "table9")}
        | {"table4": pd.DataFrame([kept, none, full])}
    )
    lines = {r.split(" | ")[0].lstrip("| "): r.split(" | ") for r in text.splitlines()[2:] if r}
    assert lines["Fed"][6:8] == ["–", "– / 89.4 ± 1.7 / –"]
    assert lines["untrained (floor)"][6:8] == ["–", "–"]
    assert lines["Cent"][6:8] == ["80.0 / 78.0", "50.0 / 50.0 / 50.0"]


def test_centralized_pre_exploration_is_redone_when_its_start_changed(tmp_path):
    """The centralized pre-exploration row counts as finished only for the very agent and
    speaker it started from (their digests), not for whatever now lies at the same paths."""
    from experiments.fedvln.pipeline import finished_from

    starts = {"agent": "a1", "speaker": "s1"}
    assert not finished_from(tmp_path, starts, 3)  # nothing run
    pd.DataFrame({"round": [3], "val_unseen_sr": [30.0]}).to_csv(tmp_path / "log.csv")
    assert not finished_from(tmp_path, starts, 3)  # made before its starts were kept
    (tmp_path / "starts.json").write_text(json.dumps(starts))
    assert finished_from(tmp_path, starts, 3)
    assert not finished_from(tmp_path, starts, 6)  # fewer rounds than asked
    assert not finished_from(tmp_path, {**starts, "speaker": "s2"}, 3)  # a retrained speaker


def test_the_embedded_houses_are_the_same_in_every_process(tmp_path):
    """Issue 63: FedVLN deployed and simulated disagreed (val_unseen SR 4.44 vs 5.56) because
    the embedded instructions iterated a set of room codes, whose order Python randomises per
    process (PYTHONHASHSEED): each machine that generated the houses (its own cache) wrote other
    words. Processes with different hash seeds, each generating afresh into its own cache, now
    build the same houses, episodes and instructions, byte for byte."""
    import subprocess

    from tests.conftest import PYTHON, ROOT

    code = (
        "import hashlib, json\n"
        "from config import parse\n"
        "from config.schema import merged\n"
        "from training.vln_house import open_setup, spec_of\n"
        f"c = parse(merged({TINY!r}))\n"
        "s = open_setup('', '', spec_of(c))\n"
        "h = hashlib.sha256()\n"
        "for split in ('train', 'val_seen', 'val_unseen'):\n"
        "    for e in s.split(split):\n"
        "        h.update(json.dumps([e.instr_id, e.scan, e.path, e.instruction]).encode())\n"
        "print(h.hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [PYTHON, "-c", code],
            cwd=ROOT,
            env={
                **__import__("os").environ,
                "PYTHONHASHSEED": seed,
                "FEDEMBODIED_CACHE": str(tmp_path / seed),  # generated here, not read back
            },
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1 and len(next(iter(digests))) == 64


@pytest.mark.slow
def test_a_fedvln_run_records_the_untrained_models_floor_and_its_plots_draw_it(tmp_path):
    """Issue 66: every run plot carries its floor. Each house scores an untrained model (fresh
    weights from the run seed) on its own val episodes once, beside its scores; the server pools
    it like them: `floor-val_unseen_sr` is the untrained follower's SR over the unseen houses'
    episodes, the same in every round, computed here on the pooled episodes directly."""
    import matplotlib.pyplot as plt

    from clients.fedvln_client import _model
    from config.schema import merged
    from models.rng import owned, stream_seed
    from server.plots import _draw, load_rounds
    from training import vln_agent
    from training.vln_house import open_setup, spec_of

    _, out = _run(tmp_path, "agent", **{"num-server-rounds": 2})
    rounds = load_rounds(out)
    floor = rounds["floor-val_unseen_sr"].dropna()
    assert len(floor) == 2 and floor.nunique() == 1
    c = parse(merged({**TINY, "num-server-rounds": 2}))
    setup = open_setup("", "", spec_of(c))

    class House:  # what _model reads of a house
        pass

    h = House()
    h.setup = setup
    with owned(stream_seed(c.run.seed, 0, 0)):
        untrained = _model("follower", c, h)
    s = vln_agent.AgentSettings.of(c)
    episodes = setup.split("val_unseen")
    m, _ = vln_agent.evaluate(
        untrained, setup.world, episodes, vln_agent.Tokens(setup.vocab, s.max_words), s
    )
    assert floor.iloc[0] == pytest.approx(float(m["sr"]), abs=1e-6)
    # SR is 0 for an untrained follower here; its navigation error is not (13.4 m)
    ne = rounds["floor-val_unseen_ne"].dropna()
    assert ne.iloc[0] > 1 and ne.iloc[0] == pytest.approx(float(m["ne"]), rel=1e-6)
    fig, ax = plt.subplots()
    _draw(ax, [("run", rounds, "fedvln")], "val_unseen_sr")
    assert "floor: the untrained model (its initial weights)" in [
        line.get_label() for line in ax.get_lines()
    ]
    plt.close(fig)


def test_the_speaker_stage_default_schedule_and_a_value_given_wins():
    """Issue 64: `--stage speaker` with no flags trains r = 0.5 of the seen houses with the
    official eta = 1.6 for 180 rounds, FedAvg rounds (the schedule that grounded it on the
    houses before issue 64; on today's it does not, docs/fedvln.md); the follower's stages keep
    r = 0.2, eta = 1 and 5 rounds; every other method keeps 5 rounds; a value the run config
    gives wins."""
    from config.fedvln_recipe import recipe_of
    from config.schema import merged
    from server.fedvln_run import plan_of

    speaker = parse(merged({"method": "fedvln", "fedvln.stage": "speaker"}))
    assert speaker.run.num_server_rounds == 180 and plan_of(speaker).rates == {"seen": 0.5}
    assert recipe_of(speaker.fedvln).server_lr == 1.6 and speaker.fedvln.speaker_round == "fedavg"
    agent = parse(merged({"method": "fedvln", "fedvln.stage": "agent"}))
    assert agent.run.num_server_rounds == 5 and plan_of(agent).rates == {"seen": 0.2}
    assert recipe_of(agent.fedvln).server_lr == 1.0
    given = parse(
        merged(
            {
                "method": "fedvln",
                "fedvln.stage": "speaker",
                "num-server-rounds": 40,
                "fedvln.seen-rate": 0.2,
                "fedvln.server-lr": 1.0,
            }
        )  # fmt: skip
    )
    assert given.run.num_server_rounds == 40 and plan_of(given).rates == {"seen": 0.2}
    assert recipe_of(given.fedvln).server_lr == 1.0
    assert parse(merged({"method": "cdl"})).run.num_server_rounds == 5
    official = parse(
        merged({"method": "fedvln", "fedvln.stage": "speaker", "fedvln.recipe": "official"})
    )
    assert plan_of(official).rates == {"seen": 0.2}  # the official script's r = 0.2 of 61


def test_a_chained_round_trains_house_after_house_and_steps_as_the_official_code(tmp_path):
    """fedvln.speaker-round = "chain": each house of the round, in a seeded random order, gets
    the model the house before it returned (the first gets w), re-encoded from the screened
    arrays, and the server step is the official code's w + eta * sum_k n_k / n * (w_k - w)
    (r2r_src/train.py:137-158); a house whose reply is screened out (non-finite) is skipped,
    the next starting from the model before it; each message says whether the model it asks
    for is handed on (all but the last), so a house's policy can refuse."""
    from contracts.messages import CHAIN_ROUND, MIXES_AT_LEAST

    got, size = [], {1000: 1, 1001: 1, 1002: 2, 1003: 4}

    class Grid:
        def get_node_ids(self):
            return list(size)

        def send_and_receive(self, msgs, timeout=None):
            for m in msgs:
                node, w = m.metadata.dst_node_id, m.content["arrays"]["w"]
                got.append((node, float(w.numpy()[0]), m.content["config"][CHAIN_ROUND], w.data))
                step = np.nan if node == 1001 else 1.0  # house 1 breaks
                yield _reply(m, float(w.numpy()[0]) + step, size[node])

    roles = {p: "seen" for p in range(4)}
    s = _strategy(tmp_path, roles, {"seen": 1.0}, server_lr=2.0, chain=True)
    w0 = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
    last = list(s.configure_train(1, w0, ConfigRecord(), grid=Grid()))
    replies = list(Grid().send_and_receive(last))
    order = [n for n, *_ in got]
    assert (
        sorted(order) == list(size) and len(last) == 1 and last[0].metadata.dst_node_id == order[-1]
    )
    assert [f for _, _, f, _ in got] == [True, True, True, False]
    # a house whose model is handed on is told its update is mixed with no other's
    assert [m.content["config"][MIXES_AT_LEAST] for m in s.sent] == [1, 1, 1, 2]
    # each house starts where the last accepted house ended (house 1001's NaN model is skipped)
    start, accepted = 0.0, []
    for node, w, _, _ in got:
        assert w == start
        if node != 1001:
            start += 1.0
            accepted.append((start, size[node]))
    assert all(d == Array(np.full(3, w, np.float32)).data for _, w, _, d in got)  # re-encoded
    arrays, _ = s.aggregate_train(1, replies)
    n = sum(k for _, k in accepted)
    assert np.allclose(arrays["w"].numpy(), 2.0 * sum(w * k for w, k in accepted) / n)
    assert not s.chained  # the round's replies were all used, none carried into the next
    orders = []  # the order is drawn anew each round, not the partitions' (the official
    for rnd in range(2, 6):  # code keeps random.sample's): later houses' updates weigh less
        got.clear()
        list(s.configure_train(rnd, arrays, ConfigRecord(), grid=Grid()))
        s.chained = []
        orders.append([n for n, *_ in got])
    assert any(o != sorted(o) for o in [order, *orders]) and len({tuple(o) for o in orders}) > 1
    # not chained: every house gets w, as FedAvg, and no message carries the chain flag
    s = _strategy(tmp_path / "b", roles, {"seen": 1.0}, server_lr=2.0)
    msgs = list(s.configure_train(1, w0, ConfigRecord(), grid=Grid()))
    assert len(msgs) == 4 and all(CHAIN_ROUND not in m.content["config"] for m in msgs)


def test_a_house_serves_a_chained_round_only_if_its_own_policy_allows(tmp_path):
    """A chained speaker round hands the model a house returns to the next house: the house
    refuses it under the secure default whatever the run asks, trains under a policy with
    fedvln.allow-chain; the run config refuses a chain outside the speaker stage and with
    central DP (which clips and noises only what reaches the server)."""
    from flwr.app import Context

    from clients import fedvln_client as house
    from config.schema import ConfigError, merged
    from contracts.fedvln import shared_part
    from contracts.messages import CHAIN_ROUND as CHAIN
    from contracts.messages import MIXES_AT_LEAST
    from server.fedvln_run import check_config

    rc = {**TINY, "fedvln.stage": "speaker", "fedvln.speaker-round": "chain"}
    ctx = Context(run_id=1, node_id=5000, node_config={"partition-id": 0, "num-partitions": 5},
                  state=RecordDict(), run_config=rc)  # fmt: skip
    arrays = shared_part(house._model("speaker", parse(rc), house.house_of(ctx)), "*")
    conf = {"step": "speaker", "server-round": 1, "epochs": 1.0, "share": "*", CHAIN: True,
            MIXES_AT_LEAST: 1}  # fmt: skip  # handed on: mixed with no other house
    msg = Message(RecordDict({"arrays": arrays, "config": ConfigRecord(conf)}),
                  dst_node_id=5000, message_type="train")  # fmt: skip
    with pytest.raises(PermissionError, match="chained.*fedvln.allow-chain"):
        house.train(msg, ctx)
    allows = tmp_path / "allows.toml"
    allows.write_text("[fedvln]\nallow-chain = true\n")  # but min-round-houses = 2
    allows.chmod(0o600)
    ctx.node_config["policy"] = str(allows)
    with pytest.raises(PermissionError, match="as few as 1 .*fedvln.min-round-houses"):
        house.train(msg, ctx)
    allows.write_text("[fedvln]\nallow-chain = true\nmin-round-houses = 1\n")
    reply = house.train(msg, ctx)
    assert reply.content["arrays"].keys() == arrays.keys()
    with pytest.raises(ConfigError, match="fedvln.speaker-round"):
        parse(merged({**rc, "fedvln.stage": "agent"}))
    with pytest.raises(ConfigError, match="dp.mode"):
        check_config(parse(merged({**rc, "dp.mode": "central", "dp.noise": 0.1})))


def test_a_round_whose_model_mixes_fewer_houses_than_min_round_houses_is_held_back(tmp_path):
    """Issue 64: after a round whose new model mixes one house's update, every house that
    gets it learns that update exactly (w + eta (w_k - w)). The server says in every train
    message the fewest houses it mixes, and holds a round back, the model unchanged, when
    failures or screening leave fewer accepted updates; with enough it takes Eq. 7's step. A
    stage that would sample fewer a round is refused before it starts, unless it shares
    nothing (env-based pre-exploration)."""
    from config.schema import ConfigError, merged
    from contracts.messages import MIXES_AT_LEAST
    from server.fedvln_run import check_config
    from server.recorder import trailing_empty_rounds
    from strategies.screened_fedavg import ClientsFailed

    s = _strategy(tmp_path, {p: "seen" for p in range(3)}, {"seen": 1.0}, server_lr=1.0,
                  max_empty_rounds=2)  # fmt: skip
    w0 = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
    msgs = list(s.configure_train(1, w0, ConfigRecord(), grid=None))
    assert [m.content["config"][MIXES_AT_LEAST] for m in msgs] == [2, 2, 2]
    # one accepted (one NaN, one silent): held back
    arrays, metrics = s.aggregate_train(1, [_reply(msgs[0], 4.0, 1), _reply(msgs[1], np.nan, 1)])
    assert arrays is None and metrics["n_accepted"] == 1
    assert np.array_equal(s.global_arrays["w"].numpy(), np.zeros(3))  # w as it was
    msgs = list(s.configure_train(2, w0, ConfigRecord(), grid=None))
    arrays, _ = s.aggregate_train(2, [_reply(msgs[0], 4.0, 1), _reply(msgs[2], 2.0, 1)])
    assert np.allclose(arrays["w"].numpy(), 3.0)  # two mixed: Eq. 7's step
    # held-back rounds are empty ones for max-empty-rounds: a federation that never gets
    # two updates stops, named, and a resumed run counts them too
    for rnd in (3, 4):
        msgs = list(s.configure_train(rnd, arrays, ConfigRecord(), grid=None))
        if rnd == 4:
            with pytest.raises(ClientsFailed, match="2 consecutive.*min-round-houses = 2"):
                s.aggregate_train(rnd, [_reply(msgs[0], 4.0, 1)])
        else:
            assert s.aggregate_train(rnd, [_reply(msgs[0], 4.0, 1)])[0] is None
            s.recorder.end_round(arrays)
    assert trailing_empty_rounds(s.recorder) == 1
    one = _strategy(tmp_path / "one", {0: "seen", 1: "seen"}, {"seen": 1.0}, min_mixed=1)
    msgs = list(one.configure_train(1, w0, ConfigRecord(), grid=None))
    assert msgs[0].content["config"][MIXES_AT_LEAST] == 1
    assert one.aggregate_train(1, [_reply(msgs[0], 4.0, 1)])[0] is not None
    # the stage's rounds sample too few: refused, naming the rate and the bound
    with pytest.raises(ConfigError, match="trains 1 house.*fedvln.seen-rate.*min-round-houses"):
        check_config(parse(merged({**TINY, "fedvln.seen-rate": 0.5})))
    pre = {**TINY, "fedvln.stage": "preexplore", "fedvln.agent-init": __file__,
           "fedvln.speaker-init": __file__}  # fmt: skip
    with pytest.raises(ConfigError, match="trains 1 house.*fedvln.unseen-rate"):
        check_config(parse(merged({**pre, "fedvln.unseen-rate": 0.5})))
    env_based = {**pre, "fedvln.variant": "env-based", "fedvln.env-based-rate": 0.5}
    check_config(parse(merged(env_based)))  # shares nothing: nothing is mixed
    check_config(parse(merged({**TINY, "fedvln.seen-rate": 0.5, "fedvln.min-round-houses": 1})))


def test_a_stage_refuses_too_few_houses_a_round_among_the_houses_that_came(tmp_path, monkeypatch):
    """With `fedvln.data-dir` the houses are known only from the nodes: the server checks the
    mixing bound against the roles they report, before the setup round (here with the
    launcher's check on the embedded houses bypassed)."""
    from clients.app import app
    from config.schema import ConfigError, merged
    from server import fedvln_run
    from tests.conftest import InProcessGrid

    cfg = merged({**TINY, "fedvln.seen-rate": 0.5, "out-dir": str(tmp_path)})
    monkeypatch.setattr(fedvln_run, "check_config", fedvln_run.plan_of)
    with pytest.raises(ConfigError, match="trains 1 house.*3 seen, 2 unseen.*min-round-houses"):
        fedvln_run.run(InProcessGrid(app, cfg, 5), parse(cfg), "fedvln")
    assert not (tmp_path / "rounds.csv").exists() or len(pd.read_csv(tmp_path / "rounds.csv")) == 0


def test_a_house_trains_only_where_the_model_sent_on_mixes_enough_houses(tmp_path):
    """The house protected by the mixing bound enforces it: under the secure default it
    refuses a train message that declares fewer than 2 houses mixed, or declares nothing (an
    older or stripped server), whatever the run asks; its operator may lower the bound."""
    from flwr.app import Context

    from clients import fedvln_client as house
    from contracts.fedvln import shared_part
    from contracts.messages import MIXES_AT_LEAST

    ctx = Context(run_id=1, node_id=5000, node_config={"partition-id": 0, "num-partitions": 5},
                  state=RecordDict(), run_config=TINY)  # fmt: skip
    arrays = shared_part(house._model("follower", parse(TINY), house.house_of(ctx)), "*")

    def message(**declared):
        conf = {"step": "follower", "server-round": 1, "epochs": 1.0, "share": "*", **declared}
        return Message(RecordDict({"arrays": arrays, "config": ConfigRecord(conf)}),
                       dst_node_id=5000, message_type="train")  # fmt: skip

    for declared, says in (({MIXES_AT_LEAST: 1}, "as few as 1 "), ({}, "declares no fewest")):
        with pytest.raises(PermissionError, match=f"{says}.*fedvln.min-round-houses"):
            house.train(message(**declared), ctx)
    assert house.train(message(**{MIXES_AT_LEAST: 2}), ctx).content["arrays"].keys()
    lower = tmp_path / "lower.toml"
    lower.write_text("[fedvln]\nmin-round-houses = 1\n")
    lower.chmod(0o600)
    ctx.node_config["policy"] = str(lower)
    assert house.train(message(**{MIXES_AT_LEAST: 1}), ctx).content["arrays"].keys()
    ctx.node_config["policy"] = str(tmp_path / "three.toml")
    (tmp_path / "three.toml").write_text("[fedvln]\nmin-round-houses = 3\n")
    (tmp_path / "three.toml").chmod(0o600)
    with pytest.raises(PermissionError, match="at least 3 are mixed"):
        house.train(message(**{MIXES_AT_LEAST: 2}), ctx)


def test_local_dp_counts_a_chained_houses_release_when_it_reaches_the_next_house(tmp_path):
    """With local DP, a chained round's reply is a release the moment it arrives (the next house
    gets it): the server's ledger (strategies/dp.LocalDPLedger) counts and saves it then, so a
    server that dies mid-chain has counted what reached a peer, and aggregation does not count
    it twice; the last house's reply is counted at aggregation, as in FedAvg."""
    import json

    from config.schema import merged
    from strategies.dp import LocalDPLedger

    size = {1000: 1, 1001: 1, 1002: 2, 1003: 4}

    class Grid:
        def get_node_ids(self):
            return list(size)

        def send_and_receive(self, msgs, timeout=None):
            for m in msgs:
                yield _reply(m, float(m.content["arrays"]["w"].numpy()[0]) + 1.0, 1)

    c = parse(merged({"dp.mode": "local", "dp.local-epsilon": 8.0, "dp.clip": 1.0}))
    ledger = LocalDPLedger(c, tmp_path)
    s = _strategy(tmp_path, {p: "seen" for p in range(4)}, {"seen": 1.0}, chain=True,
                  dp_local=ledger)  # fmt: skip
    w0 = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
    last = list(s.configure_train(1, w0, ConfigRecord(), grid=Grid()))
    saved = json.loads((tmp_path / LocalDPLedger.FILE).read_text())
    assert sorted(saved.values()) == [1, 1, 1] and len(saved) == 3  # before any aggregation
    s.aggregate_train(1, list(Grid().send_and_receive(last)))
    assert ledger.count == {p: 1 for p in range(4)}
    assert json.loads((tmp_path / LocalDPLedger.FILE).read_text()) == {str(p): 1 for p in range(4)}


def test_speaker_word_dropout_is_a_run_config_key_that_binds_training_not_loading(tmp_path):
    """fedvln.speaker-word-dropout reaches the speaker every house and the server build
    (contracts.fedvln.speaker_size); a speaker checkpoint trained with another word dropout
    still starts a run (augment, preexplore), one of another architecture does not."""
    import torch

    from config import parse
    from config.schema import ConfigError, merged
    from contracts.fedvln import speaker_size
    from models import vln_checkpoint
    from models.speaker import Speaker
    from server.fedvln_run import _load_init
    from training.vln_house import open_setup, spec_of

    c = parse(merged({**TINY, "fedvln.speaker-word-dropout": 0.25}))
    setup = open_setup("", "", spec_of(c))
    v, f = len(setup.vocab), setup.world.feature_dim
    size = speaker_size(c, v, f)
    assert size.word_dropout == 0.25
    torch.manual_seed(0)
    vln_checkpoint.save(tmp_path / "wd.pt", Speaker(size), None)
    plain = speaker_size(parse(merged({**TINY, "fedvln.speaker-word-dropout": 0.0})), v, f)
    assert plain.word_dropout == 0.0
    assert speaker_size(parse(merged(TINY)), v, f).word_dropout == 0.25  # the default
    assert isinstance(_load_init(str(tmp_path / "wd.pt"), plain), Speaker)
    other = speaker_size(parse(merged({**TINY, "fedvln.hidden": 2 * plain.hidden})), v, f)
    with pytest.raises(ConfigError, match="size"):
        _load_init(str(tmp_path / "wd.pt"), other)


def test_pipeline_figure_is_drawn_from_its_curves_csv_and_redrawn_by_plot_only(
    tmp_path, monkeypatch, capsys
):
    """The pipeline study keeps every run's evaluations, seed by seed, in its curves CSV and
    draws the figure from it, so `--plot-only` redraws the figure (under the command it keeps)
    without the run folders; a figure the study has not made yet is not drawn."""
    from experiments import study as runner
    from experiments.fedvln import pipeline as fp
    from experiments.figures import command_of

    for seed, srs in ((0, [10.0, 20.0]), (1, [12.0, 18.0])):
        run = tmp_path / "runs" / f"seed{seed}" / "agent"
        run.mkdir(parents=True)
        rows = [{"round": 3 * (i + 1), "local_steps": 24, "val_unseen_sr": v, "val_unseen_n": 360}
                for i, v in enumerate(srs)]  # fmt: skip
        pd.DataFrame(rows).to_csv(run / "rounds.csv", index=False)
        (run / "config.json").write_text(json.dumps({"wall_s": 1.0}))
    rows = [r for s in (0, 1) for r in fp.curves(tmp_path / "runs" / f"seed{s}", s)]
    assert {(r["seed"], r["run"]) for r in rows} == {(0, "agent"), (1, "agent")}
    assert [(r["steps"], r["value"]) for r in rows if r["seed"] == 0] == [(24, 10.0), (48, 20.0)]
    monkeypatch.setattr(fp, "RESULTS", tmp_path)
    file = ROOT / "experiments" / "studies" / "fedvln_pipeline.toml"
    study = runner.load(file)
    curves_csv, png = fp.outputs(study)[-2:]
    assert runner.main([str(file), "--plot-only"]) == 2
    assert "not made by this study yet" in capsys.readouterr().err
    pd.DataFrame(rows).to_csv(curves_csv, index=False)
    command = f"python -m experiments.study {file.relative_to(ROOT)}"
    fp.plot(pd.read_csv(curves_csv), png, command, ["agent"])
    drawn = []
    monkeypatch.setattr(fp.figures, "save", lambda fig, path, cmd: drawn.append((fig, path, cmd)))
    assert runner.main([str(file), "--plot-only"]) == 0
    [(fig, path, cmd)] = drawn
    assert path == png and cmd == command == command_of(png)
    line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("FedEnvdrop ("))
    assert list(line.get_xdata()) == [24, 48] and list(line.get_ydata()) == [11.0, 19.0]
    assert line.get_label() == "FedEnvdrop (n=2)"


def test_gap_study_tabulates_best_and_last_from_whole_curves_and_cuts_the_centralized_run(
    tmp_path, monkeypatch
):
    """The gap study's cells return every evaluation; the report takes each run's best and
    last (the committed table's rows), keeps the curves for `--plot-only`, and the centralized
    rows are the pipeline's Envdrop whole and cut at the federated best's sequential steps; a
    seed the pipeline has not run stops the study naming the study to run."""
    from experiments import study as runner
    from experiments.fedvln import gap

    pipe = tmp_path / "pipe" / "seed0"
    (pipe / "agent").mkdir(parents=True)
    rows = [{"round": 3 * (i + 1), "local_steps": 24, "n_clients": 2, "val_unseen_sr": v,
             "val_unseen_n": 360} for i, v in enumerate([10.0, 20.0, 15.0])]  # fmt: skip
    pd.DataFrame(rows).to_csv(pipe / "agent" / "rounds.csv", index=False)
    (pipe / "agent" / "config.json").write_text(json.dumps({"wall_s": 1.0}))
    (pipe / "central").mkdir()
    central = [{"iteration": k * 12, "val_unseen_sr": 5.0 * k, "val_seen_sr": 1.0}
               for k in range(1, 9)]  # fmt: skip
    pd.DataFrame(central).to_csv(pipe / "central" / "agent_log.csv", index=False)
    got = pd.DataFrame(
        gap.measure(0, "centralized", 150, 60, 3, 8, str(tmp_path / "pipe"), tmp_path)
    )
    cut = got[got.run == gap.CENTRAL_CUT]
    assert list(cut.steps) == [12, 24, 36, 48, 60, 72]  # best at round 6: 6 x 12 sequential
    assert len(got[got.run == gap.CENTRAL]) == 8
    with pytest.raises(ValueError, match="seed 1: run .*fedvln_pipeline.toml"):
        gap.measure(1, "centralized", 150, 60, 3, 8, str(tmp_path / "pipe"), tmp_path)
    fed = [{"run": "x", "seed": s, "stopped_early": True, "steps": 24.0 * k,
            "val_unseen_sr": v + s, "val_seen_sr": 1.0}
           for s in (0, 1) for k, v in enumerate([10.0, 30.0, 20.0], 1)]  # fmt: skip
    monkeypatch.setattr(gap, "RESULTS", tmp_path)
    study = runner.load(ROOT / "experiments" / "studies" / "fedvln_gap.toml")
    text = gap.report(pd.concat([pd.DataFrame(fed), got]), study, "python -m experiments.study f")
    table = pd.read_csv(tmp_path / "fedvln_gap.csv").set_index(["run", "checkpoint"])
    assert table.loc[("x", "best"), "val_unseen_sr"] == 30.5
    assert (
        table.loc[("x", "last"), "steps"] == 72 and table.loc[("x", "best"), "stopped_early"] == 2
    )
    assert table.loc[(gap.CENTRAL_CUT, "best"), "val_unseen_sr"] == 30.0
    assert table.loc[(gap.CENTRAL, "best"), "val_unseen_sr"] == 40.0
    assert "| x | best | 2 | 2 / 2 |" in text
    assert len(pd.read_csv(tmp_path / "fedvln_gap_curves.csv")) == 6 + 14
    assert gap.replot(study) == 0
