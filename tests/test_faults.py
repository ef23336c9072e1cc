"""Fault injection (clients/faults.py) for every method, whole runs on the in-process grid:
a partition that raises or sends NaN is recorded and never aggregated; the run goes on (FedRL,
whose two parties cannot lose one, stops and names the party)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from config import parse
from config.schema import merged
from tests.conftest import RESEARCH, InProcessGrid

DRIVING = {
    "driving.image-size": 24,
    "driving.train-per-silo": 16,
    "driving.test-per-silo": 8,
    "driving.local-epochs": 1,
    "driving.batch-size": 8,
    "num-server-rounds": 2,
    "num-clients": 3,
    "topology": "ring",
}
FEDVLN = {
    "method": "fedvln",
    "num-clients": 5,
    "num-server-rounds": 2,
    "fedvln.train-houses": 3,
    "fedvln.unseen-houses": 2,
    "fedvln.embedding": 16,
    "fedvln.hidden": 32,
    "fedvln.batch-size": 8,
    "fedvln.max-local-steps": 2,
    "fedvln.seen-rate": 1.0,
    "fedvln.unseen-rate": 1.0,  # both unseen houses: fedvln.min-round-houses = 2
}
FAULTS = {"faults.raise-partitions": "1", "faults.nan-partitions": "2"}


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "cdl", "gossip", "fedvln"])
@pytest.mark.slow
def test_a_raising_and_a_nan_partition_are_recorded_and_never_aggregated(tmp_path, method):
    from clients.app import app
    from config.methods import server_module

    base = FEDVLN if method == "fedvln" else {**DRIVING, "method": method}
    cfg = merged({**base, **FAULTS, "out-dir": str(tmp_path)})
    grid = InProcessGrid(app, cfg, int(cfg["num-clients"]))
    server_module(method).run(grid, parse(cfg), method)
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    rounds = rounds[rounds["round"] > 0]
    assert len(rounds) == 2 and (rounds["n_accepted"] == 1).all()  # only partition 0
    rows = pd.read_csv(tmp_path / "clients.csv")
    rows = rows[rows["round"] > 0]
    raised = rows[rows.partition == 1].status
    nan = rows[rows.partition == 2].status
    assert len(raised) == 2 and raised.str.match(r"failed: .*InjectedFault: injected fault").all()
    assert "\n" not in "".join(raised)  # one line per cell
    assert len(nan) == 2 and nan.str.contains("NaN").all()
    assert (rows[rows.partition == 0].status == "ok").all()


@pytest.mark.slow
def test_fedrl_stops_naming_the_party_that_raised(tmp_path):
    from clients.app import app
    from server import fedrl_run as server

    cfg = merged(
        {
            "method": "fedrl",
            "num-server-rounds": 2,
            "fedrl.warmup": 16,
            "fedrl.envs": 8,
            "fedrl.act-steps": 2,
            "fedrl.updates": 3,
            "fedrl.batch-size": 8,
            "fedrl.eval-episodes": 6,
            "fedrl.max-steps": 6,
            "faults.raise-partitions": "1",
            "out-dir": str(tmp_path),
        }
    )
    with pytest.raises(
        server.FederationError,
        match=r"beta failed in 'act' in round 1 3 times \(fedrl.retries = 2\)"
        r".*InjectedFault",
    ):
        server.run(InProcessGrid(app, cfg, 2), parse(cfg), "fedrl")


def test_nan_fault_marks_the_first_float_array_only():
    import torch

    from clients.faults import nan_state

    state = {"ids": np.arange(4), "q": np.ones(3), "w": torch.ones(2)}
    out = nan_state(dict(state), "nan")
    assert np.isnan(out["q"]).all() and (out["ids"] == np.arange(4)).all()
    assert torch.equal(out["w"], torch.ones(2))
    assert nan_state(dict(state), None)["q"].sum() == 3


def test_fault_draws_follow_lists_rounds_and_fraction():
    from clients.faults import fault_of

    cfg = merged({"faults.hang-partitions": "0,2-3", "faults.rounds": "2-3"})
    assert [fault_of(parse(cfg), p, 2) for p in range(5)] == ["hang", None, "hang", "hang", None]
    assert fault_of(parse(cfg), 0, 1) is None and fault_of(parse(cfg), 0, 4) is None  # other rounds
    cfg = merged({"faults.fraction": 0.2, "faults.fraction-kind": "nan", "seed": 3})
    draws = [fault_of(parse(cfg), p, r) for p in range(20) for r in range(1, 51)]
    assert 0.15 < draws.count("nan") / len(draws) < 0.25 and set(draws) == {None, "nan"}
    assert draws == [fault_of(parse(cfg), p, r) for p in range(20) for r in range(1, 51)]  # seeded
    again = [fault_of(parse(cfg), p, r, attempt=1) for p in range(20) for r in range(1, 51)]
    assert again != draws  # a retried call draws again


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"faults.raise-partitions": "1,7"}, "raise-partitions"),
        ({"faults.nan-partitions": "x"}, "nan-partitions"),
        ({"faults.rounds": "2-"}, "faults.rounds"),
        ({"faults.fraction": 1.5}, "faults.fraction"),
        ({"faults.fraction-kind": "slow"}, "fraction-kind"),
    ],
)
def test_bad_fault_settings_are_named(bad, key):
    from config.schema import ConfigError

    with pytest.raises(ConfigError, match=key):
        parse(bad).faults.check_partitions(3)


@pytest.mark.parametrize("method", ["fedavg", "cdl", "fedvln"])
@pytest.mark.slow
def test_twenty_percent_faulty_calls_every_round_completes_and_none_is_aggregated(tmp_path, method):
    from clients.app import app
    from clients.faults import fault_of
    from config.methods import server_module

    base = FEDVLN if method == "fedvln" else {**DRIVING, "method": method, "num-clients": 5}
    cfg = merged(
        {
            **base,
            "num-server-rounds": 4,
            "faults.fraction": 0.2,
            "seed": 4,
            "faults.fraction-kind": "raise" if method == "cdl" else "nan",
            "out-dir": str(tmp_path),
        }
    )
    n = int(cfg["num-clients"])
    grid = InProcessGrid(app, cfg, n)
    server_module(method).run(grid, parse(cfg), method)
    rows = pd.read_csv(tmp_path / "clients.csv")
    rows = rows[(rows["round"] > 0) & rows.status.notna()]
    faulty = {(r, p) for r in range(1, 5) for p in range(n) if fault_of(parse(cfg), p, r)}
    assert faulty, "the seed should give some faults"
    for _, row in rows.iterrows():
        bad = (row["round"], row.partition) in faulty
        assert (row.status != "ok") == bad, (row["round"], row.partition, row.status)
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    rounds = rounds[rounds["round"] > 0]
    assert len(rounds) == 4
    ok = rows[rows.status == "ok"].groupby("round").size()
    assert (rows.status != "ok").sum() > 0
    for _, r in rounds.iterrows():  # accepted = the calls that were not faulty, every round
        assert r.n_accepted == ok.get(int(r["round"]), 0)


@pytest.mark.slow
def test_a_hung_silo_costs_a_few_normal_rounds_not_the_round_timeout(tmp_path):
    """round-timeout 600 s; silo 1 hangs (20 s) in round 3 only. The adaptive limit (5 x the
    slowest complete exchange, floor 1 s) gives up on it in seconds; it trains again after."""
    import time

    from clients.app import app
    from config.methods import server_module
    from strategies.timeouts import AdaptiveTimeout

    cfg = merged(
        {
            **DRIVING,
            "method": "fedavg",
            "num-server-rounds": 4,
            "round-timeout": 600.0,
            "faults.hang-partitions": "1",
            "faults.rounds": "3",
            "faults.hang-s": 20.0,
            "out-dir": str(tmp_path),
        }
    )
    grid = AdaptiveTimeout(InProcessGrid(app, cfg, 3, concurrent=True), 5.0, 1.0)
    t0 = time.monotonic()
    server_module("fedavg").run(grid, parse(cfg), "fedavg")
    took = time.monotonic() - t0
    rows = pd.read_csv(tmp_path / "clients.csv")
    hung = rows[(rows["round"] == 3) & (rows.partition == 1)]
    assert len(hung) == 1 and hung.status.iloc[0].startswith("failed: no reply")
    assert (rows[(rows["round"] == 4)].status == "ok").all() and len(rows[rows["round"] == 4]) == 3
    rounds = pd.read_csv(tmp_path / "rounds.csv").set_index("round")
    assert rounds.loc[3, "n_accepted"] == 2 and rounds.loc[4, "n_accepted"] == 3
    assert took < 20, f"the hang was waited out ({took:.1f} s)"


@pytest.mark.slow
def test_fedrl_retries_a_failed_call_and_goes_on(tmp_path):
    from clients.app import app
    from server import fedrl_run as server

    cfg = merged(
        {
            "method": "fedrl",
            "num-server-rounds": 2,
            "fedrl.warmup": 16,
            "fedrl.envs": 8,
            "fedrl.act-steps": 2,
            "fedrl.updates": 3,
            "fedrl.batch-size": 8,
            "fedrl.eval-episodes": 6,
            "fedrl.max-steps": 6,
            "faults.fraction": 0.2,
            "seed": 4,
            "out-dir": str(tmp_path),
        }
    )
    server.run(InProcessGrid(app, cfg, 2), parse(cfg), "fedrl")
    rows = pd.read_csv(tmp_path / "clients.csv")
    retried = rows[rows.status.str.startswith("failed in")]
    assert len(retried) > 0 and retried.status.str.contains("attempt 1: .*InjectedFault").all()
    assert len(pd.read_csv(tmp_path / "rounds.csv").query("round > 0")) == 2


@pytest.mark.parametrize(
    "method, extra",
    [
        ("fedavg", {}),
        ("gossip", {}),
        # CDL whose silos keep their Adam state and sub-networks in their own context: resumed
        # only if each silo reads its state back (clients/state_store.py)
        ("cdl", {"driving.optimizer": "adam", "driving.optimizer-state": "silo"}),
        # study mode: two runs repeat to the digit only with noise from the run seed (a
        # default run's parties each draw a secret key; the resumed party keeps its own)
        ("fedrl", {"fedrl.reproducible-noise": True}),
        # houses keep their own optimizer; the server's lr decays with the round
        ("fedvln", {"fedvln.optimizer-state": "house", "fedvln.server-lr-decay": 0.5}),
        # FedAdam's server step: its moments come back from the server's own checkpoint
        ("fedvln", {"fedvln.server-opt": "adam", "fedvln.server-lr": 0.01}),
        # a stage with a setup round: the speaker and its sampled routes that each seen house
        # got in round 0 come back from the house's own disk (none is sent again)
        ("fedvln", {"fedvln.stage": "augment", "fedvln.aug-routes": 4}),
        # env-based pre-exploration shares nothing: an empty server checkpoint, each unseen
        # house's own model on its disk (raising a finished run's cap resumes it too)
        ("fedvln", {"fedvln.stage": "preexplore", "fedvln.variant": "env-based"}),
    ],
)
@pytest.mark.slow
def test_a_killed_run_resumes_to_the_same_final_metrics(tmp_path, method, extra):
    """Rounds 1-2, then (a new ServerApp, new client contexts: all in-memory state gone)
    resume = true up to round 3: the same rows and the same final metrics, bit for bit, as 3
    uninterrupted rounds."""
    from clients.app import app
    from config.methods import server_module
    from tests.test_fedrl import SMALL as FEDRL_SMALL

    base = {"fedrl": {**FEDRL_SMALL, "eval-every": 1}, "fedvln": FEDVLN}.get(
        method, {**DRIVING, "num-clients": 3, "driving.train-per-silo": 24}
    )
    base = {**base, **extra, "method": method}
    if extra.get("fedvln.stage") in ("augment", "preexplore"):
        base.update(_untrained_inits(tmp_path, base))
    n = {"fedrl": 2, "fedvln": 5}.get(method, 3)

    class Killed(Exception):
        pass

    class KilledInRound3(InProcessGrid):
        """The run dies after its second exchange of round 3: some nodes already trained
        (and saved their state) in the round that rounds.csv never got."""

        calls = 0

        def send_and_receive(self, messages, timeout=None):
            replies = super().send_and_receive(messages, timeout)
            if any(
                int(m.content.config_records.get("config", {}).get("server-round", 0)) == 3
                for m in messages
            ):
                self.calls += 1
                if self.calls == 2:
                    raise Killed
            return replies

    def run(out, grid_cls=InProcessGrid, resume=False):
        cfg = merged(
            {
                **base,
                "num-server-rounds": 3,
                "resume": resume,
                "resume-round": 2 if resume else 0,
                "out-dir": str(out),
            }
        )
        node = RESEARCH if method == "fedrl" else None  # a policy that allows the study mode
        server_module(method).run(grid_cls(app, cfg, n, node_config_extra=node), parse(cfg), method)
        return pd.read_csv(out / "rounds.csv")

    whole = run(tmp_path / "whole")
    with pytest.raises(Killed):
        run(tmp_path / "cut", KilledInRound3)
    assert pd.read_csv(tmp_path / "cut" / "rounds.csv")["round"].max() == 2
    resumed = run(tmp_path / "cut", resume=True)
    # round 0 is a setup round (FedVLN augment), recorded once, before the kill
    assert resumed["round"].tolist() == whole["round"].tolist() and whole["round"].max() == 3
    cols = {
        "fedrl": [
            "valid-succ-rate-test_noise=off",
            "updates",
            "messages",
            "alpha-privacy-epsilon",
            "best-round",
        ],
        "gossip": ["train_loss", "silo_rmse_pooled_mean", "n_accepted", "avg_rmse", "consensus"],
        "cdl": ["train_loss", "silo_rmse_pooled_mean", "avg_rmse", "consensus"],
        "fedvln": ["train_loss", "n_accepted", "val_unseen_sr", "val_unseen_spl"],
    }.get(method, ["train_loss", "rmse", "n_accepted"])
    assert resumed[cols].equals(whole[cols]), (resumed[cols], whole[cols])
    if method == "fedvln":  # the global model after the resumed round, bit for bit
        last = [torch.load(d / "checkpoints" / "round_0003.pt") for d in (tmp_path / "whole",
                                                                          tmp_path / "cut")]  # fmt: skip
        assert last[0].keys() == last[1].keys()
        assert all(torch.equal(last[0][k], last[1][k]) for k in last[0])
    clients = pd.read_csv(tmp_path / "cut" / "clients.csv")
    assert len(clients) == len(pd.read_csv(tmp_path / "whole" / "clients.csv"))


def _untrained_inits(tmp_path, rc: dict) -> dict:
    """agent-init and speaker-init checkpoints of freshly drawn models of the run's sizes."""
    from config.schema import merged
    from contracts.fedvln import follower_size, speaker_size
    from models import vln_checkpoint
    from models.envdrop import Follower
    from models.speaker import Speaker
    from training.vln_house import open_setup, spec_of

    c = parse(merged(rc))
    setup = open_setup("", "", spec_of(c))
    v, f = len(setup.vocab), setup.world.feature_dim
    paths = {"fedvln.agent-init": tmp_path / "agent.pt", "fedvln.speaker-init": tmp_path / "spk.pt"}
    vln_checkpoint.save(paths["fedvln.agent-init"], Follower(follower_size(c, v, f)), None)
    vln_checkpoint.save(paths["fedvln.speaker-init"], Speaker(speaker_size(c, v, f)), None)
    return {k: str(p) for k, p in paths.items()}


def test_a_run_without_out_dir_names_the_folder_it_wrote(tmp_path, monkeypatch):
    """`flwr run .` leaves out-dir "": the ServerApp names a folder by the time once, writes
    there, and its closing line names that folder (not a second, later timestamp)."""
    import itertools
    import logging
    import time
    from types import SimpleNamespace

    from flwr.app import Context, RecordDict

    from clients.app import app as client_app
    from server.app import main

    monkeypatch.chdir(tmp_path)
    stamps = itertools.count()  # every call of the clock a new "time": no two names agree
    monkeypatch.setattr(
        "server.recorder.time",
        SimpleNamespace(strftime=lambda fmt: f"t{next(stamps)}", perf_counter=time.perf_counter),
    )
    rc = {**DRIVING, "method": "fedavg", "num-server-rounds": 1, "num-clients": 2, "out-dir": ""}
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("flwr").addHandler(handler)
    try:
        ctx = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc)
        main(InProcessGrid(client_app, rc, 2), ctx)
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    done = [ln.split("done: ", 1)[1] for ln in lines if "[fedembodied] done: " in ln]
    assert len(done) == 1
    folder = Path(done[0])
    assert folder.parent == tmp_path / "runs" and (folder / "rounds.csv").is_file()


@pytest.mark.slow
def test_a_run_keeps_its_numbers_while_another_trains_in_the_same_process(tmp_path):
    """Silos of two runs training at once in one process (threads: a concurrent grid, a hung
    call that wakes after its test moved on, the cause of issue 34's flaky resume) all draw
    dropout masks from torch's one global generator. Each silo owns it while it draws
    (models/rng.py), so a run's numbers do not depend on what else runs beside it."""
    import threading

    from clients.app import app
    from config.methods import server_module

    def run(out, seed=0):
        cfg = merged({**DRIVING, "method": "fedavg", "seed": seed, "out-dir": str(out)})
        server_module("fedavg").run(InProcessGrid(app, cfg, 3), parse(cfg), "fedavg")
        return pd.read_csv(out / "rounds.csv")[["train_loss", "rmse", "mae"]]

    alone = run(tmp_path / "alone")
    stop, runs_beside = threading.Event(), []

    def beside():
        while not stop.is_set():
            runs_beside.append(run(tmp_path / f"beside{len(runs_beside)}", seed=1))

    thread = threading.Thread(target=beside)
    thread.start()
    try:
        together = [run(tmp_path / f"together{k}") for k in range(2)]
    finally:
        stop.set()
        thread.join()
    assert runs_beside, "nothing ran beside"
    for t in together:
        assert t.equals(alone), (t, alone)
    assert all(r.equals(runs_beside[0]) for r in runs_beside)


def _resumed_node(tmp_path):
    """(run config, context, state folder) of partition 0 in a FedAvg run resumed at round 1."""
    from flwr.app import Context, RecordDict

    from clients import state_store

    cfg = merged({**DRIVING, "method": "fedavg", "resume": True, "resume-round": 1,
                  "out-dir": str(tmp_path / "out")})  # fmt: skip
    ctx = Context(run_id=1, node_id=5000, node_config={"partition-id": 0, "num-partitions": 3},
                  state=RecordDict(), run_config=cfg)  # fmt: skip
    where = state_store.folder(ctx, parse(cfg))
    where.mkdir(parents=True)
    return cfg, ctx, where


def test_a_saved_state_that_does_not_parse_is_refused_naming_the_file(tmp_path):
    """Ten junk bytes where a node's snapshot was: the node refuses to go on, naming the file
    (it neither crashes in protobuf nor starts half-loaded)."""
    from clients import state_store

    cfg, ctx, where = _resumed_node(tmp_path)
    (where / "newest.pb").write_bytes(b"\x0f" * 10)
    with pytest.raises(state_store.StateUnreadable, match=r"newest\.pb does not parse"):
        state_store.restore(ctx, parse(cfg))
    assert state_store.TAG not in ctx.state  # nothing half-loaded


@pytest.mark.parametrize("how", ["/dev/zero", "nan"])
def test_a_saved_state_that_is_not_a_file_or_holds_nan_is_refused(tmp_path, how):
    """A snapshot that is a link to /dev/zero made the node start afresh silently, and NaN
    arrays were restored into the model (issue 42): both are refused naming the file."""
    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
    from flwr.common.serde import recorddict_to_proto

    from clients import state_store

    cfg, ctx, where = _resumed_node(tmp_path)
    snap = where / "newest.pb"
    if how == "/dev/zero":
        snap.symlink_to("/dev/zero")
        says = r"newest\.pb is not a regular file"
    else:
        state = RecordDict(
            {
                "model": ArrayRecord({"w": Array(np.array([1.0, np.nan], np.float32))}),
                state_store.TAG: ConfigRecord({"round": 1}),
            }
        )
        snap.write_bytes(recorddict_to_proto(state).SerializeToString())
        says = r"newest\.pb: array model/w holds NaN"
    with pytest.raises(state_store.StateUnreadable, match=says):
        state_store.restore(ctx, parse(cfg))
    assert state_store.TAG not in ctx.state


def test_a_node_folder_holds_one_run_and_a_resume_takes_it_over(tmp_path):
    """Two runs with one out-dir shared every node's state folder and the last writer won
    silently (issue 42). The node now refuses a second fresh run naming the first; the first,
    once its folder is taken over (by a resume), stops instead of writing beside it."""
    from flwr.app import Context, RecordDict

    from clients import state_store

    def node(run_id, resume):
        cfg = merged({**DRIVING, "method": "fedavg", "resume": resume, "resume-round": 1,
                      "out-dir": str(tmp_path / "out")})  # fmt: skip
        ctx = Context(run_id=run_id, node_id=5000, node_config={"partition-id": 0,
                      "num-partitions": 3}, state=RecordDict(), run_config=cfg)  # fmt: skip
        return ctx, parse(cfg)

    first = node(11, False)
    state_store.claim(*first)
    state_store.claim(*first)  # its own later messages go on
    with pytest.raises(state_store.StateInUse, match=r"in use by run 11 .*another out-dir"):
        state_store.claim(*node(12, False))
    resumed = node(13, True)
    state_store.claim(*resumed)
    with pytest.raises(state_store.StateInUse, match=r"taken over by run 13"):
        state_store.claim(*first)
    state_store.claim(*resumed)
    owner = state_store.folder(*resumed) / state_store.OWNER
    stale = json.loads(owner.read_text())
    stale["at"] -= state_store.LEASE_S + 1  # the resumed run went silent: the folder is free
    owner.write_text(json.dumps(stale))
    state_store.claim(*node(14, False))


def test_replies_are_pulled_every_tenth_of_a_second_not_every_three(monkeypatch):
    """Flower 1.41's deployed grid sleeps 3 s between pulls; AdaptiveTimeout pushes and pulls
    through the grid itself every REPLY_POLL_S, returns what came by the timeout, and leaves a
    grid without push/pull (the in-process one) to its own send_and_receive."""
    from types import SimpleNamespace

    import strategies.timeouts as t

    slept = []
    monkeypatch.setattr(t.time, "sleep", lambda s: slept.append(s))

    class PushPull:
        def __init__(self, ready_after: dict):
            self.ready_after, self.pulls = ready_after, 0  # message id -> pulls until its reply

        def push_messages(self, messages):
            return [m for m in messages]

        def pull_messages(self, ids):
            self.pulls += 1
            due = [i for i in ids if self.ready_after[i] <= self.pulls]
            return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i)) for i in due]

        def send_and_receive(self, messages, timeout=None):
            raise AssertionError("Flower's 3 s loop was used")

    grid = PushPull({"a": 1, "b": 4})
    got = t.exchange(grid, ["a", "b"], timeout=None)
    assert sorted(r.metadata.reply_to_message_id for r in got) == ["a", "b"]
    assert grid.pulls == 4 and slept == [t.REPLY_POLL_S] * 3 and t.REPLY_POLL_S <= 0.1
    never = PushPull({"a": 1, "b": 10**9})
    clock = iter(range(100))
    monkeypatch.setattr(t.time, "monotonic", lambda: next(clock))
    got = t.exchange(never, ["a", "b"], timeout=5)
    assert [r.metadata.reply_to_message_id for r in got] == ["a"]
    own = SimpleNamespace(send_and_receive=lambda messages, timeout=None: ["its own"])
    assert t.exchange(own, ["a"], timeout=1) == ["its own"]


def test_a_chained_rounds_houses_are_timed_each_on_its_own():
    """A chained round (FedVLN speaker-round = "chain") sends one house at a time; houses
    differ in how long they train, so each house's exchange is its own kind for the adaptive
    timeout (a review found a 6x-larger house cut off in every round when one slow-house
    limit came from a small house); a plain round's kind stays its type and step."""
    from flwr.app import ConfigRecord, Message, RecordDict

    from contracts.messages import CHAIN_ROUND
    from strategies.timeouts import AdaptiveTimeout, _kind

    def msg(node, chained):
        extra = {CHAIN_ROUND: True} if chained else {}
        rd = RecordDict({"config": ConfigRecord({"step": "speaker", **extra})})
        return Message(rd, dst_node_id=node, message_type="train")

    assert _kind([msg(7, True)]) != _kind([msg(8, True)])
    assert _kind([msg(7, False)]) == _kind([msg(8, False)]) == "train/speaker"
    grid = AdaptiveTimeout(None, 5.0, 0.01)
    grid.slowest[_kind([msg(7, True)])] = 0.1  # a small house was quick
    assert grid.limit(_kind([msg(8, True)]), 60.0) == 60.0  # the large one still gets the ceiling


def test_reliability_study_refuses_bad_fields_and_shows_a_stopped_run(tmp_path):
    """Issue 66: experiments/studies/reliability.toml. A kill after the last round, a hang
    outside the run, an unknown run-config key or a fault setting that sets no fault is refused
    by field before anything runs; a run the hang stopped is shown as stopped, not timed."""
    import pandas as pd

    from experiments.bench.reliability_table import check, markdown, plot
    from experiments.figures import command_of

    cell = {"config": "driving.lr=0.1", "faulty": "faults.fraction=0.2",
            "hang": "faults.hang-s=1.0", "rounds": 6, "kill-after": 2, "hang-round": 3}  # fmt: skip
    check(cell, "f.toml")
    for bad, field in (({"kill-after": 6}, "grid.kill-after"), ({"hang-round": 0}, "grid.hang-round"),
                       ({"config": "driving.lrr=0.1"}, "grid.config"),
                       ({"hang": "timeout-floor=5.0"}, "grid.hang")):  # fmt: skip
        with pytest.raises(ValueError, match=field):
            check(cell | bad, "f.toml")
    runs = pd.DataFrame(
        [{"method": m, "rounds": 6, "injected": 6, "recorded": 6, "wrongly_aggregated": 0,
          "faults_rounds": 6, "hang_exit": code, "hang_round_s": s, "hang_lost_s": lost,
          "killed_after_round": 2, "resumed_rounds": 6, "metric": "rmse", "clean_final": 0.24,
          "resumed_final": 0.24, "identical": True}
         for m, code, s, lost in (("fedavg", 0, 9.0, 8.5), ("fedrl", 1, None, None))]
    )  # fmt: skip
    rows = markdown(runs).splitlines()
    assert "| 9.0, +8.5 |" in rows[2] and "run stops (exit 1)" in rows[3]
    plot(runs, tmp_path / "r.png", "python -m experiments.study r.toml")
    assert command_of(tmp_path / "r.png") == "python -m experiments.study r.toml"


def test_a_fedrl_party_that_does_not_answer_is_named_with_the_wait_it_was_given():
    """The error that stops a FedRL run names the party, the step and the time it was waited
    for: the adaptive timeout's few seconds, not the round-timeout it cut short (the
    reliability study's hung party read "within 3600 s" after 5 s)."""
    import time

    from server.fedrl_run import Exchange
    from strategies.nodes import FederationError
    from strategies.timeouts import AdaptiveTimeout

    class Silent:  # a party that never answers
        def send_and_receive(self, messages, timeout=None):
            time.sleep(timeout)
            return []

    class Rows:
        rows: list = []

        def add_client(self, **row):
            self.rows.append(row)

    grid = AdaptiveTimeout(Silent(), factor=5.0, floor_s=0.2)
    grid.slowest["train/act"] = 0.01
    rec = Rows()
    send = Exchange(grid, {"beta": 7}, rec, timeout=3600.0)
    with pytest.raises(FederationError, match=r"beta did not answer 'act' .*after 0\.2 s "
                       r"\(round-timeout 3600 s, cut short by timeout-factor\)"):  # fmt: skip
        send("beta", "act")
    assert rec.rows[-1]["status"] == "failed: no reply to 'act' within 0.2 s"


def test_reliability_study_keeps_a_stopped_run_instead_of_launching_it_again(tmp_path, monkeypatch):
    """A hang run that stopped the run (FedRL, by design) is an outcome: a rerun of the study
    reads how it ended from `launched.json` and starts nothing (its folder would refuse a
    second run, and the table would show that refusal instead of the hang)."""
    import json
    import subprocess

    from experiments.bench import reliability_table as rel

    out = tmp_path / "hang"
    out.mkdir()
    kept = {"code": 1, "wall_s": 40.0, "error": "beta did not answer 'act'"}
    (out / "launched.json").write_text(json.dumps(kept))

    def refuse(*a, **k):
        raise AssertionError("launched again")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    spec = {"method": "fedrl", "num_clients": 0, "config": "", "rounds": 6, "seed": 0}
    assert rel.launch(spec, out, "faults.fraction=0.2") == kept
