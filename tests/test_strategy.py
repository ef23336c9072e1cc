"""Screened FedAvg/FedProx without Ray: messages are built and answered by hand."""

import math
import re

import numpy as np
import pandas as pd
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from config import parse
from server.recorder import Recorder
from strategies.screened_fedavg import ScreenedFedAvg, ScreenedFedProx
from strategies.screening import message_bytes


def _global():
    return ArrayRecord(
        {"w": Array(np.zeros((2, 3), np.float32)), "b": Array(np.zeros(3, np.float32))}
    )


def _strategy(tmp_path, cls=ScreenedFedAvg, n=4, fraction=1.0, **kw):
    rec = Recorder(tmp_path, {"method": "test"})
    s = cls(recorder=rec, num_clients=n, seed=0, fraction_train=fraction, **kw)
    s.partitions = {1000 + p: p for p in range(n)}  # node id -> partition, as the query gives
    return s, rec


def _reply(msg, arrays, n=10, loss=0.5):
    return Message(
        RecordDict(
            {
                "arrays": arrays,
                "metrics": MetricRecord({"num-examples": n, "train-loss": loss, "fit-s": 0.1}),
            }
        ),
        reply_to=msg,
    )


def test_bad_updates_are_rejected_and_the_round_completes(tmp_path):
    s, rec = _strategy(tmp_path)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    assert [m.metadata.dst_node_id for m in msgs] == [1000, 1001, 1002, 1003]
    good = ArrayRecord(
        {"w": Array(np.ones((2, 3), np.float32)), "b": Array(np.full(3, 2, np.float32))}
    )
    nan = ArrayRecord(
        {"w": Array(np.full((2, 3), np.nan, np.float32)), "b": Array(np.zeros(3, np.float32))}
    )
    shape = ArrayRecord(
        {"w": Array(np.ones((3, 2), np.float32)), "b": Array(np.zeros(3, np.float32))}
    )
    inf = ArrayRecord(
        {"w": Array(np.ones((2, 3), np.float32)), "b": Array(np.array([1, np.inf, 0], np.float32))}
    )
    replies = [
        _reply(msgs[3], inf),
        _reply(msgs[0], good, n=30),
        _reply(msgs[2], shape),
        _reply(msgs[1], nan),
    ]
    arrays, metrics = s.aggregate_train(1, replies)
    assert np.array_equal(arrays["w"].numpy(), np.ones((2, 3)))  # only the good one counted
    assert metrics["n_accepted"] == 1
    rec.end_round(arrays)
    clients = pd.read_csv(tmp_path / "clients.csv")
    status = dict(zip(clients.partition, clients.status))
    assert status[0] == "ok"
    assert status[1].startswith("rejected") and "NaN" in status[1]
    assert status[2].startswith("rejected") and "[3, 2]" in status[2]
    assert status[3].startswith("rejected") and "NaN/Inf" in status[3]
    assert list(clients.partition) == [0, 1, 2, 3]  # replies sorted by partition


def test_all_rejected_keeps_global_model_then_fails_after_max_empty_rounds(tmp_path):
    from strategies.screened_fedavg import ClientsFailed

    s, rec = _strategy(tmp_path, n=1, max_empty_rounds=2)
    bad = ArrayRecord({"w": Array(np.ones((2, 3), np.float32))})  # missing "b"
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    arrays, metrics = s.aggregate_train(1, [_reply(msgs[0], bad)])
    assert arrays is None and metrics is None  # round 1: model kept
    msgs = list(s.configure_train(2, _global(), ConfigRecord(), grid=None))
    assert s.aggregate_train(2, [_reply(msgs[0], _global())])[0] is not None  # resets
    for rnd in (3, 4):
        msgs = list(s.configure_train(rnd, _global(), ConfigRecord(), grid=None))
        if rnd == 3:
            assert s.aggregate_train(rnd, [_reply(msgs[0], bad)]) == (None, None)
        else:  # the second empty round in a row (here: nobody answered) stops the run
            with pytest.raises(ClientsFailed, match="2 consecutive rounds.*max-empty-rounds"):
                s.aggregate_train(rnd, [])


def test_failed_and_silent_clients_are_named_with_one_line_reasons(tmp_path):
    """An error reply that the SuperLink makes comes from its own node id (1): the row must
    still name the node and partition the message went to; a Ray traceback becomes its last
    line; a node that never answered gets a row."""
    from flwr.app import Error

    s, rec = _strategy(tmp_path, n=3)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    for k, m in enumerate(msgs):
        m.metadata.__dict__["_message_id"] = f"id{k}"
    trace = (
        '\x1b[31mTraceback (most recent call last):\n  File "x.py", line 3, in f\n'
        "    raise ValueError('house 7 has no data')\n"
        "ValueError: house 7 has no data\x1b[0m\n"
    )
    err = Message(Error(code=0, reason=trace), reply_to=msgs[1])
    err.metadata.__dict__["_src_node_id"] = 1  # from the SuperLink
    arrays, _ = s.aggregate_train(1, [err, _reply(msgs[0], _global())])
    assert arrays is not None
    rec.end_round(arrays)
    rows = pd.read_csv(tmp_path / "clients.csv").set_index("partition")
    assert rows.loc[1, "node"] == 1001
    assert rows.loc[1, "status"] == "failed: ValueError: house 7 has no data"
    assert rows.loc[2, "node"] == 1002 and "no reply" in rows.loc[2, "status"]
    assert rows.loc[0, "status"] == "ok"


def test_rounds_where_every_client_failed_stop_the_run_after_max_empty_rounds(tmp_path):
    """One round in which every sampled client failed (with few clients per round, 20% faults
    make that common) keeps the model; max-empty-rounds of them in a row stop the run, naming
    the failure."""
    from flwr.app import Error

    from strategies.screened_fedavg import ClientsFailed

    s, _ = _strategy(tmp_path, n=2)
    s.max_empty_rounds = 2
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    errors = [
        Message(Error(code=0, reason="DataError: x.jpg not readable"), reply_to=m) for m in msgs
    ]
    assert s.aggregate_train(1, errors) == (None, None)
    with pytest.raises(ClientsFailed, match="x.jpg not readable"):
        s.aggregate_train(2, errors)
    # one failure among good replies is only recorded
    good = _reply(msgs[0], _global())
    arrays, _ = s.aggregate_train(1, [good, errors[1]])
    assert arrays is not None


def test_weighted_average_and_bytes_counted_from_sent_arrays(tmp_path):
    s, rec = _strategy(tmp_path, n=2)
    glob = _global()
    msgs = list(s.configure_train(1, glob, ConfigRecord(), grid=None))
    ups = [
        ArrayRecord(
            {"w": Array(np.full((2, 3), v, np.float32)), "b": Array(np.full(3, v, np.float32))}
        )
        for v in (1.0, 4.0)
    ]
    replies = [_reply(msgs[0], ups[0], n=20, loss=1.0), _reply(msgs[1], ups[1], n=10, loss=4.0)]
    arrays, metrics = s.aggregate_train(1, replies)
    assert np.allclose(arrays["w"].numpy(), 2.0)  # (20*1 + 10*4) / 30
    assert math.isclose(metrics["train_loss"], 2.0)
    row = rec.end_round(arrays)
    assert row["bytes_down"] == 2 * glob.count_bytes() == sum(message_bytes(m) for m in msgs)
    assert row["bytes_up"] == sum(u.count_bytes() for u in ups)
    assert row["n_clients"] == 2


def test_sampling_is_seeded_by_partition(tmp_path):
    s, _ = _strategy(tmp_path, n=10, fraction=0.3)
    parts = [[s.partitions[n] for n in s.sample(None, r, 0.3)] for r in (1, 2, 1)]
    assert len(parts[0]) == 3 and parts[0] == parts[2] and parts[0] != parts[1]
    assert parts[0] == sorted(parts[0])


def test_fedprox_sends_mu_and_evaluation_pools_by_examples(tmp_path):
    s, rec = _strategy(tmp_path, cls=ScreenedFedProx, n=2, proximal_mu=0.25)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    assert msgs[0].content["config"]["proximal-mu"] == 0.25
    evals = list(s.configure_evaluate(1, _global(), ConfigRecord(), grid=None))
    replies = [
        Message(
            RecordDict({"metrics": MetricRecord({"num-examples": n, "mse": mse, "mae": mae})}),
            reply_to=m,
        )
        for m, n, mse, mae in zip(evals, (10, 30), (0.04, 0.16), (0.1, 0.3))
    ]
    m = s.aggregate_evaluate(1, replies)
    assert math.isclose(m["rmse"], math.sqrt((10 * 0.04 + 30 * 0.16) / 40))
    assert math.isclose(m["mae"], (10 * 0.1 + 30 * 0.3) / 40)
    assert math.isclose(m["silo_rmse_mean"], (0.2 + 0.4) / 2)
    assert math.isclose(m["silo_mae_mean"], 0.2)


def test_recorder_writes_contract_and_checkpoint(tmp_path):
    import torch

    s, rec = _strategy(tmp_path, n=1)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    arrays, _ = s.aggregate_train(1, [_reply(msgs[0], _global())])
    rec.end_round(arrays)
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    assert list(rounds.columns[:7]) == [
        "round",
        "stage",
        "wall_s",
        "n_clients",
        "bytes_up",
        "bytes_down",
        "eval_bytes_down",
    ]
    assert list(pd.read_csv(tmp_path / "clients.csv").columns) == [
        "round",
        "stage",
        "node",
        "partition",
        "num_examples",
        "train_loss",
        "fit_s",
        "bytes_up",
        "status",
    ]
    state = torch.load(tmp_path / "checkpoints" / "round_0001.pt")
    assert set(state) == {"w", "b"}
    assert (tmp_path / "config.json").read_text().startswith("{")


def test_missing_nodes_fail_instead_of_hanging():
    from strategies.nodes import FederationError, wait_for_nodes

    class Grid:
        def get_node_ids(self):
            return [1, 2]

    with pytest.raises(FederationError, match=r"only 2 of the 4.*num-supernodes=4"):
        wait_for_nodes(Grid(), 4, timeout_s=0.1)


def test_an_unavailable_node_is_waited_for_and_an_erring_one_named(monkeypatch):
    """A SuperNode restarted with its key after a SuperLink restart is 'Node Unavailable' for
    a while (issue 43): the identity query waits for it, bounded, instead of failing at once."""
    import uuid

    from flwr.app import Error

    from strategies import nodes

    monkeypatch.setattr(nodes.time, "sleep", lambda s: None)

    class Grid:
        def __init__(self, away: int, reason: str = "Error: Node Unavailable - heartbeats"):
            self.away, self.reason, self.calls = away, reason, 0

        def send_and_receive(self, msgs, timeout=None):
            self.calls += 1
            out = []
            for m in msgs:
                m.metadata.__dict__["_message_id"] = str(uuid.uuid4())
                if m.metadata.dst_node_id == 2 and self.calls <= self.away:
                    rep = Message(Error(code=0, reason=self.reason), reply_to=m)
                else:
                    ident = {"partition-id": m.metadata.dst_node_id - 1, "num-partitions": 2}
                    rep = Message(RecordDict({"identity": ConfigRecord(ident)}), reply_to=m)
                rep.metadata.__dict__["_src_node_id"] = m.metadata.dst_node_id
                out.append(rep)
            return out

    grid = Grid(away=3)
    assert nodes.query_partitions(grid, [1, 2], timeout_s=60) == {1: 0, 2: 1}
    assert grid.calls == 4
    with pytest.raises(nodes.FederationError, match=r"1 nodes did not answer .* 0.0001 s"):
        nodes.query_identities(Grid(away=10**6), [1, 2], timeout_s=0.0001)
    with pytest.raises(nodes.FederationError, match=r"node 2 failed the identity query: boom"):
        nodes.query_identities(Grid(away=1, reason="boom"), [1, 2], timeout_s=60)


def test_a_run_sized_for_10_follows_a_federation_of_2():
    """Plain `flwr run .` starts 2 SuperNodes while the run config says num-clients = 10: the
    server asks one node the federation's size and runs that many silos."""
    from clients.app import app
    from config.schema import merged
    from strategies.nodes import fit_to_federation
    from tests.conftest import InProcessGrid

    cfg = merged({"method": "fedavg", "num-clients": 10})
    assert fit_to_federation(InProcessGrid(app, cfg, 2), 10, timeout_s=1) == 2
    assert fit_to_federation(InProcessGrid(app, cfg, 10), 10, timeout_s=1) == 10


def test_evaluation_every_k_rounds_and_in_the_last(tmp_path):
    rec = Recorder(tmp_path, {"method": "test"})
    s = ScreenedFedAvg(recorder=rec, num_clients=2, seed=0, eval_every=3, num_rounds=7)
    s.partitions = {1000: 0, 1001: 1}
    sent = [
        len(list(s.configure_evaluate(r, _global(), ConfigRecord(), grid=None)))
        for r in range(1, 8)
    ]
    assert sent == [0, 0, 2, 0, 0, 2, 2]


def test_a_second_array_record_or_a_forged_count_is_rejected(tmp_path):
    s, rec = _strategy(tmp_path, n=3)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    nan = ArrayRecord(
        {"w": Array(np.full((2, 3), np.nan, np.float32)), "b": Array(np.zeros(3, np.float32))}
    )
    smuggled = _reply(msgs[0], _global())
    smuggled.content["more"] = nan  # Flower would average it in unscreened
    forged = _reply(
        msgs[1],
        ArrayRecord(
            {"w": Array(np.full((2, 3), 9, np.float32)), "b": Array(np.zeros(3, np.float32))}
        ),
        n=1e30,
    )
    honest = _reply(
        msgs[2],
        ArrayRecord({"w": Array(np.ones((2, 3), np.float32)), "b": Array(np.ones(3, np.float32))}),
        n=10,
    )
    arrays, metrics = s.aggregate_train(1, [smuggled, forged, honest])
    assert metrics["n_accepted"] == 1 and np.array_equal(arrays["w"].numpy(), np.ones((2, 3)))
    rec.end_round(arrays)
    status = pd.read_csv(tmp_path / "clients.csv")["status"].tolist()
    assert "unexpected records ['more']" in status[0] and "1e+30" in status[1]


def test_malformed_or_forged_evaluation_replies_neither_crash_nor_move_the_pool(tmp_path):
    s, _ = _strategy(tmp_path, n=4)
    msgs = s._messages(_global(), ConfigRecord(), [1000, 1001, 1002, 1003], "evaluate")
    rows = [
        {"num-examples": 10, "mse": 0.04, "mae": 0.1},
        {"num-examples": 1e30, "mse": 0.0, "mae": 0.0},  # forged weight
        {"mse": 0.0},  # missing fields
        {"num-examples": 10, "mse": -1.0, "mae": 0.1},
    ]  # impossible error
    replies = [
        Message(RecordDict({"metrics": MetricRecord(r)}), reply_to=m) for r, m in zip(rows, msgs)
    ]
    metrics = s.aggregate_evaluate(1, replies)
    assert math.isclose(metrics["rmse"], 0.2) and metrics["n_eval_silos"] == 1


def test_a_restarted_node_is_used_again_and_the_newest_claim_to_a_partition_wins(tmp_path):
    """A SuperNode restarted without authentication comes back with a new node id: the next
    round asks it who it is and sends it work; the dead id gets nothing."""
    from clients.app import app
    from tests.conftest import InProcessGrid

    rc = {
        "method": "fedavg",
        "num-clients": 3,
        "driving.train-per-silo": 8,
        "driving.test-per-silo": 4,
        "driving.image-size": 16,
        "driving.local-epochs": 1,
    }
    grid = InProcessGrid(app, rc, 3)
    s, _ = _strategy(tmp_path, n=3)
    s.partitions = None
    first = [m.metadata.dst_node_id for m in s.configure_train(1, _global(), ConfigRecord(), grid)]
    assert first == [5000, 5001, 5002]
    ctx = grid.contexts.pop(5001)  # node 5001 dies and restarts ...
    ctx.__dict__["node_id"] = 6001
    grid.contexts[6001] = ctx  # ... as node 6001, partition 1
    again = [m.metadata.dst_node_id for m in s.configure_train(2, _global(), ConfigRecord(), grid)]
    assert again == [5000, 6001, 5002] and s.partitions[6001] == 1 and 5001 not in s.partitions
    grid.contexts[7000] = type(ctx)(
        run_id=1,
        node_id=7000,
        state=ctx.state,
        run_config=rc,
        node_config={"partition-id": 0, "num-partitions": 3},
    )
    third = [m.metadata.dst_node_id for m in s.configure_train(3, _global(), ConfigRecord(), grid)]
    assert third == [7000, 6001, 5002]  # newest claim to partition 0 wins
    del grid.contexts[6001]  # partition 1's node is gone for good
    s.recorder.clients.clear()
    fourth = [m.metadata.dst_node_id for m in s.configure_train(4, _global(), ConfigRecord(), grid)]
    assert fourth == [7000, 5002]
    assert [(r["partition"], r["status"]) for r in s.recorder.clients] == [
        (1, "failed: no node holds this silo")
    ]  # recorded, not silently skipped


def _poisoning(partition: int, factor: float):
    """The ClientApp, except that `partition` scales its model update by `factor` (finite, so
    screening for NaN/Inf lets it through)."""
    from flwr.app import Array, ArrayRecord

    from clients.app import app

    def poisoned(msg, ctx):
        rep = app(msg, ctx)
        if (
            msg.metadata.message_type == "train"
            and int(ctx.node_config["partition-id"]) == partition
        ):
            arrays = rep.content["arrays"]
            rep.content["arrays"] = ArrayRecord(
                {
                    k: Array(v.numpy() * factor if v.numpy().dtype.kind == "f" else v.numpy())
                    for k, v in arrays.items()
                }
            )
        return rep

    return poisoned


@pytest.mark.parametrize(
    "defence",
    [
        {},
        {"aggregator": "median"},
        {"aggregator": "trimmed-mean", "trim-fraction": 0.2},
        {"max-update-norm": 100.0},
    ],
)
def test_a_scaled_update_wrecks_the_mean_but_not_the_defences(tmp_path, defence):
    import pandas as pd

    from config.schema import merged
    from server import driving_run
    from tests.conftest import InProcessGrid

    cfg = merged(
        {
            "method": "fedavg",
            "num-clients": 5,
            "num-server-rounds": 1,
            "driving.image-size": 24,
            "driving.train-per-silo": 16,
            "driving.test-per-silo": 8,
            "driving.local-epochs": 1,
            "driving.batch-size": 8,
            "out-dir": str(tmp_path),
            **defence,
        }
    )
    driving_run.run(InProcessGrid(_poisoning(2, 30.0), cfg, 5), parse(cfg), "fedavg")
    rmse = pd.read_csv(tmp_path / "rounds.csv").rmse.iloc[-1]
    status = pd.read_csv(tmp_path / "clients.csv").set_index("partition").status
    if not defence:
        assert rmse > 5  # the mean follows the poisoned update
    else:
        assert rmse < 1
    if "max-update-norm" in defence:
        assert status[2].startswith("rejected: update norm") and (status.drop(2) == "ok").all()


def test_robust_aggregates_by_hand():
    from strategies.robust import aggregate

    recs = [{"w": np.array([v, -v], np.float32)} for v in (1, 2, 3, 100)]
    mean = aggregate(recs, [1, 1, 1, 1], "mean")["w"].numpy()
    assert np.allclose(mean, [26.5, -26.5])
    assert np.allclose(aggregate(recs, [1, 1, 1, 3], "mean")["w"].numpy(), [51.0, -51.0])
    assert np.allclose(aggregate(recs, [1, 1, 1, 1e9], "median")["w"].numpy(), [2.5, -2.5])
    assert np.allclose(aggregate(recs, [1] * 4, "trimmed-mean", 0.25)["w"].numpy(), [2.5, -2.5])


def test_fraction_and_cap_on_evaluation_hold_in_the_last_round_too(tmp_path):
    """fraction-evaluate / max-evaluate-clients: a seeded draw of its own in every evaluating
    round, the last included (1,000 silos need not all be scored)."""
    rec = Recorder(tmp_path, {"method": "test"})
    s = ScreenedFedAvg(
        recorder=rec,
        num_clients=100,
        seed=0,
        eval_every=2,
        num_rounds=5,
        fraction_evaluate=0.1,
        max_evaluate_nodes=7,
    )
    s.partitions = {1000 + p: p for p in range(100)}
    sent = [
        list(s.configure_evaluate(r, _global(), ConfigRecord(), grid=None)) for r in range(1, 6)
    ]
    assert [len(m) for m in sent] == [0, 7, 0, 7, 7]
    last = sorted(m.metadata.dst_node_id for m in sent[-1])
    assert last != sorted(m.metadata.dst_node_id for m in sent[1])  # drawn per round
    assert last != sorted(s.sample(None, 5, 0.07))  # not training's draw
    s.max_evaluate_nodes = 0
    assert len(list(s.configure_evaluate(5, _global(), ConfigRecord(), grid=None))) == 10


def test_decode_views_the_bytes_and_equals_flowers_numpy():
    """The server reads each update once, without np.load's copy, and gets the same values."""
    from strategies.screening import decode

    for arr in (
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array(7, np.int64),
        np.asfortranarray(np.ones((2, 3), np.float64)),
        np.zeros((0, 5), np.float32),
    ):
        a = Array(arr)
        got = decode(a)
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert np.array_equal(got, a.numpy())
    view = decode(Array(np.ones(4, np.float32)))
    assert not view.flags.writeable  # a view of the message's bytes, never changed in place


def test_every_round_is_in_tensorboard_beside_rounds_csv(tmp_path):
    """`tensorboard --logdir runs` reads what rounds.csv and clients.csv say, round by round
    (server/curves.py), per client as well."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from clients.app import app
    from config.methods import server_module
    from config.schema import merged
    from tests.conftest import InProcessGrid
    from tests.test_faults import DRIVING

    cfg = merged({**DRIVING, "method": "fedavg", "out-dir": str(tmp_path)})
    server_module("fedavg").run(InProcessGrid(app, cfg, 3), parse(cfg), "fedavg")
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    got = {e.step: e.value for e in events.Scalars("eval/rmse")}  # held-out scores: eval/
    assert got == pytest.approx(dict(zip(rounds["round"], rounds["rmse"])))
    clients = pd.read_csv(tmp_path / "clients.csv")
    for p in range(3):
        mine = clients[clients.partition == p]
        loss = {e.step: e.value for e in events.Scalars(f"client {p}/train_loss")}
        assert loss == pytest.approx(dict(zip(mine["round"], mine["train_loss"])))
    assert "train/wall_s" in tags and "train/round" not in tags and "train/rmse" not in tags


def test_clients_csv_keeps_64_bit_node_ids_when_a_row_has_no_node(tmp_path):
    """A row without a node made pandas write every id as a float (1.2575718379501738e+19,
    another id); a resumed run reads them back unchanged."""
    from server.recorder import Recorder

    big = 12575718379501738123  # > 2**63
    rec = Recorder(tmp_path, {})
    rec.start_round(1)
    rec.add_client(node=big, partition=0)
    rec.add_client(node=None, partition=1)
    rec.add_client(node="", partition="", status="run stopped: ...")  # FedRL's stop row
    rec.write_clients()
    text = (tmp_path / "clients.csv").read_text()
    assert f",{big}," in text and "e+" not in text
    rec.end_round()
    again = Recorder(tmp_path, {"resume": True})
    assert again.clients[0]["node"] == big


def test_a_round_whose_nodes_are_all_offline_waits_for_them_and_goes_on_when_they_return(
    tmp_path,
):
    """Issue 42: with every node offline (missed heartbeats) the server used to run its
    `max-empty-rounds` in milliseconds and fail, while the nodes came back a minute later. Now
    the round waits, bounded by node-return-timeout, and sends to the nodes that came back; a
    bound that runs out lets the round go on (and be counted empty) as before."""
    import threading
    import time

    from clients.app import app
    from tests.conftest import InProcessGrid

    rc = {
        "method": "fedavg",
        "num-clients": 2,
        "driving.train-per-silo": 8,
        "driving.test-per-silo": 4,
        "driving.image-size": 16,
        "driving.local-epochs": 1,
    }
    grid = InProcessGrid(app, rc, 2)
    s, _ = _strategy(tmp_path, n=2, node_return_s=20.0)
    s.partitions = None
    first = [m.metadata.dst_node_id for m in s.configure_train(1, _global(), ConfigRecord(), grid)]
    away = dict(grid.contexts)
    grid.contexts.clear()  # every node drops out ...

    def come_back():
        time.sleep(1.5)
        grid.contexts.update(away)  # ... and is back 1.5 s later

    threading.Thread(target=come_back).start()
    t0 = time.monotonic()
    again = [m.metadata.dst_node_id for m in s.configure_train(2, _global(), ConfigRecord(), grid)]
    waited = time.monotonic() - t0
    assert again == first and 1.0 < waited < 15.0
    grid.contexts.clear()  # gone for good: the bound runs out and the round is empty
    s.node_return_s = 0.5
    assert list(s.configure_train(3, _global(), ConfigRecord(), grid)) == []
    assert [r["status"] for r in s.recorder.clients[-2:]] == ["failed: no node holds this silo"] * 2


def test_a_second_run_with_the_same_out_dir_is_refused_naming_the_first(tmp_path):
    """Two runs given one out-dir both completed and the last writer replaced the other's
    rounds.csv (issue 42); the lock goes with the run, so a later run (a resume) may go on."""
    from config.schema import ConfigError
    from server import run_lock

    with run_lock.holding(tmp_path, run_id=111):
        with pytest.raises(ConfigError, match=r"'out-dir' .* is in use by run 111 \(pid \d+"):
            with run_lock.holding(tmp_path, run_id=222):
                pass
    with run_lock.holding(tmp_path, run_id=333):  # the first ended: free again
        assert "run 333" in (tmp_path / run_lock.LOCK).read_text()


@pytest.mark.parametrize(
    "content, says",
    [
        (b"junk", "not a checkpoint that loads without running code"),
        ("pickle", "not a checkpoint that loads without running code"),
        ({"w": "strings"}, "'w' is not an array"),
        ({"w": float("nan")}, "'w' holds NaN"),
        ({}, "no arrays"),
    ],
)
def test_a_resumed_run_refuses_a_checkpoint_that_is_not_this_runs_naming_it(
    tmp_path, content, says
):
    """A junk zip, a code-running pickle, a checkpoint of strings or of NaN were a traceback
    or accepted nonsense when a run resumed (issue 42); each is refused naming the file."""
    import pickle

    import torch

    from config.schema import ConfigError
    from server.recorder import Recorder, load_round

    rec = Recorder(tmp_path, {})
    path = tmp_path / "checkpoints" / "round_0001.pt"
    if content == "pickle":

        class Evil:
            def __reduce__(self):
                return (print, ("code ran",))

        torch.save({"w": Evil()}, path, pickle_module=pickle)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        value = {k: torch.tensor([v]) if isinstance(v, float) else v for k, v in content.items()}
        torch.save(value, path)
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*" + re.escape(says)):
        load_round(rec, 1)


def test_a_federation_still_starting_is_waited_for_and_a_silent_node_after_it_is_not(monkeypatch):
    """Issue 65: Ray starting its actors and each ClientApp importing torch counted as silence,
    so `node-wait-timeout=5` failed a small run on a quiet machine and the default 120 s failed
    runs on a busy one. Until the first node answers the wait is 'node-start-timeout'; after
    it, a node silent for 'node-wait-timeout' since the last answer fails the run, named."""
    from strategies import nodes

    clock = [0.0]
    monkeypatch.setattr(nodes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(nodes.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))

    class Grid:
        """Node k answers at `when[k]` seconds (None: never)."""

        def __init__(self, when):
            self.when, self.sent = when, {}

        def push_messages(self, msgs):
            for i, m in enumerate(msgs):
                m.metadata.__dict__["_message_id"] = f"q{m.metadata.dst_node_id}-{i}"
                self.sent[m.metadata.message_id] = m
            return list(self.sent)

        def pull_messages(self, ids):
            out = []
            for mid in ids:
                m = self.sent[mid]
                at = self.when[m.metadata.dst_node_id]
                if at is not None and clock[0] >= at:
                    ident = {"partition-id": m.metadata.dst_node_id, "num-partitions": 3}
                    rep = Message(RecordDict({"identity": ConfigRecord(ident)}), reply_to=m)
                    rep.metadata.__dict__["_src_node_id"] = m.metadata.dst_node_id
                    out.append(rep)
            return out

    # a slow start (300 s before anyone answers) with a 5-s node-wait-timeout: waited for
    got = nodes.query_partitions(Grid({0: 300.0, 1: 301.0, 2: 303.0}), [0, 1, 2], 5.0, 1800.0)
    assert got == {0: 0, 1: 1, 2: 2} and clock[0] < 310
    # one node silent after the others answered: fails 5 s after the last answer, named
    clock[0] = 0.0
    with pytest.raises(
        nodes.FederationError,
        match=r"within 5 s of the last answer.*node-wait-timeout.*node\(s\) 2$",
    ) as e:
        nodes.query_partitions(Grid({0: 300.0, 1: 302.0, 2: None}), [0, 1, 2], 5.0, 1800.0)
    assert 307 <= clock[0] <= 308, e.value
    # nothing ever answers: the start-up wait is bounded too
    clock[0] = 0.0
    with pytest.raises(nodes.FederationError, match="no node has answered yet.*node-start-timeout"):
        nodes.query_partitions(Grid({0: None, 1: None, 2: None}), [0, 1, 2], 5.0, 600.0)
    assert 600 <= clock[0] <= 601


def test_a_large_federation_asks_no_node_and_learns_partitions_from_the_replies(tmp_path):
    """Issue 65/66: above `partition-sampling-max` clients the server does not ask every node its
    partition at the start (N pending messages cost N x N in Flower's simulation engine), nor
    the nodes it draws (a wait on the whole federation before training and before scoring):
    each round draws over the connected nodes and every reply says which partition its node
    holds, so a round is two waits, and the rows still name the partition of each drawn node.
    At or below it, every node is asked once (the repeatable draw by partition id)."""
    from clients.app import app
    from config.methods import server_module
    from config.schema import merged
    from tests.conftest import InProcessGrid
    from tests.test_faults import DRIVING

    def run(out, limit):
        cfg = merged(
            {
                **DRIVING,
                "method": "fedavg",
                "num-clients": 12,
                "fraction-train": 0.25,
                "fraction-evaluate": 0.25,
                "partition-sampling-max": limit,
                "out-dir": str(out),
            }
        )
        grid = InProcessGrid(app, cfg, 12)
        server_module("fedavg").run(grid, parse(cfg), "fedavg")
        kinds = [m.metadata.message_type for m in grid.sent]
        asked = [m.metadata.dst_node_id for m in grid.sent if m.metadata.message_type == "query"]
        return kinds, asked, pd.read_csv(out / "clients.csv")

    kinds, asked, clients = run(tmp_path / "large", 5)
    assert not asked and set(kinds) == {MessageType.TRAIN, MessageType.EVALUATE}
    assert len(set(clients.node)) < 12  # 2 rounds x 3 trained of 12: some never messaged
    assert (clients.partition == clients.node - 5000).all() and len(clients) == 2 * 3
    kinds, asked, _ = run(tmp_path / "small", 1000)
    assert sorted(asked) == list(range(5000, 5012))  # everyone, once, before round 1


def _claims(node_claims: dict[int, object]) -> list:
    """(node, a train reply whose metrics claim `holds-partition`), None: no claim at all."""
    out = []
    for node, claim in node_claims.items():
        metrics = {"num-examples": 1} | ({} if claim is None else {"holds-partition": claim})
        ask = Message(RecordDict(), dst_node_id=node, message_type=MessageType.TRAIN)
        out.append((node, Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=ask)))
    return out


def test_a_nodes_partition_claim_is_held_to_what_an_identity_answer_was(tmp_path):
    """Issue 66: a large federation learns who holds which partition from the replies. A
    claim is kept as an identity answer was (strategies.nodes.adopt), and no more: one out of
    range, of the wrong type or missing leaves the node unknown; a known node's later claim
    does not move it; a claim on a partition that another node answering in the same batch
    holds or claims is not taken (two live nodes, not a restart); a partition whose node is
    gone goes to the newcomer, and the old node is retired (never drawn again)."""
    s, _ = _strategy(tmp_path, n=2000, partition_sampling_max=1000)
    s.partitions = {}
    s._learn_partitions(_claims({1: 7, 2: 2000, 3: -1, 4: 1.0, 5: [3], 6: None, 7: 8}))
    assert s.partitions == {1: 7, 7: 8}
    s._learn_partitions(_claims({1: 9}))
    assert s.partitions == {1: 7, 7: 8}
    s._learn_partitions(_claims({1: 7, 9: 7, 10: 11, 11: 11}))  # node 1 answers beside 9
    assert s.partitions == {1: 7, 7: 8} and not s.retired
    s._learn_partitions(_claims({8: 7}))  # node 1 is silent now: a restart under a new id
    assert s.partitions == {7: 8, 8: 7} and s.retired == {1}
    small, _ = _strategy(tmp_path, n=3)  # every node asked: replies are not read
    small.partitions = {1: 0}
    small._learn_partitions(_claims({2: 1}))
    assert small.partitions == {1: 0}


def test_a_large_federations_update_from_a_node_of_no_known_partition_is_not_used(tmp_path):
    """Issue 66: in a large federation an update whose node names no partition it may hold is
    recorded as rejected, is not averaged, and counts for no party's local-DP releases."""
    from config.schema import merged
    from strategies.dp import LocalDPLedger
    from tests.test_faults import DRIVING

    s, rec = _strategy(tmp_path, n=2000, fraction=0.001, partition_sampling_max=1000)
    msgs = list(s.configure_train(1, _global(), ConfigRecord(), grid=None))
    assert len(msgs) == 2
    s.partitions = {}  # as a large federation starts: nobody known
    c = parse(merged({**DRIVING, "dp.mode": "local", "dp.clip": 0.5, "dp.local-epsilon": 50.0}))
    s.dp_local = LocalDPLedger(c)
    ones = ArrayRecord({k: Array(v.numpy() + 1) for k, v in _global().items()})
    honest, silent = _reply(msgs[0], ones), _reply(msgs[1], _global())
    honest.content["metrics"]["holds-partition"] = 5
    arrays, metrics = s.aggregate_train(1, [honest, silent])
    assert metrics["n_accepted"] == 1 and np.allclose(arrays["w"].numpy(), 1)
    rows = pd.DataFrame(rec.clients)
    assert rows.partition.tolist() == [-1, 5]
    assert rows.status.iloc[0].startswith("rejected: no partition")
    assert s.dp_local.count == {5: 1}


@pytest.mark.parametrize("method", ["fedavg", "gossip"])
def test_a_driving_run_records_its_floor_and_its_rmse_plot_draws_it(tmp_path, method):
    """Issue 66: every run plot carries its floor. `floor-<score>` is the best constant
    output's RMSE on the same test sets as the score (the pooled test labels' sd: FedAvg's
    global model, `rmse`, and, cross-evaluated, gossip's silos' own models on the pooled set,
    `silo_rmse_pooled_mean`), computed here from the silos' data directly; the score's plot
    draws it, and no plot of its own."""
    import matplotlib.pyplot as plt

    from clients.app import app
    from clients.driving_client import silo_data
    from config.methods import server_module
    from config.schema import merged
    from server.plots import _draw, load_rounds, plot_runs
    from strategies.floors import headline_rmse
    from tests.conftest import InProcessGrid

    cfg = merged(
        {
            "method": method,
            "driving.image-size": 16,
            "driving.train-per-silo": 8,
            "driving.test-per-silo": 6,
            "driving.local-epochs": 1,
            "num-server-rounds": 2,
            "num-clients": 3,
            "out-dir": str(tmp_path / "run"),
        }
    )
    grid = InProcessGrid(app, cfg, 3)
    server_module(method).run(grid, parse(cfg), method)
    rounds = load_rounds(tmp_path / "run")
    score = {"fedavg": "rmse", "gossip": "silo_rmse_pooled_mean"}[method]  # one name a meaning
    assert headline_rmse(rounds.columns) == score
    y = np.concatenate([np.asarray(silo_data(c).y_test, float) for c in grid.contexts.values()])
    floor = rounds[f"floor-{score}"].dropna()
    assert len(floor) >= 1 and np.allclose(floor, y.std(), rtol=1e-9)
    assert not np.allclose(rounds[score].dropna(), y.std())  # a score, not the floor again
    names = [p.name for p in plot_runs([tmp_path / "run"], tmp_path / "plots")]
    assert f"{score}.png" in names and f"floor-{score}.png" not in names
    fig, ax = plt.subplots()
    _draw(ax, [("run", rounds, method)], score)
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(label.startswith("floor: the best constant") for label in labels)
    plt.close(fig)


def test_forged_label_moments_give_no_floor(tmp_path):
    """A mean square below the squared mean is no set of labels: the round gets no floor
    rather than a made-up one."""
    s, _ = _strategy(tmp_path, n=2)
    msgs = s._messages(_global(), ConfigRecord(), [1000, 1001], "evaluate")
    rows = [
        {"num-examples": 10, "mse": 0.04, "mae": 0.1, "label-mean": 0.5, "label-sq-mean": 0.5},
        {"num-examples": 10, "mse": 0.04, "mae": 0.1, "label-mean": 0.5, "label-sq-mean": 0.1},
    ]
    replies = [
        Message(RecordDict({"metrics": MetricRecord(r)}), reply_to=m) for r, m in zip(rows, msgs)
    ]
    assert "floor-rmse" not in s.aggregate_evaluate(1, replies)
    replies[1].content["metrics"]["label-sq-mean"] = 0.25  # labels all 0.5: sd 0 there
    m = s.aggregate_evaluate(1, replies)
    assert math.isclose(m["floor-rmse"], math.sqrt(0.375 - 0.25))


def test_a_reply_whose_bytes_disagree_with_its_array_metadata_is_rejected():
    """Screening decodes every array: bytes holding another dtype or shape than the array's
    own metadata says are refused (a relayed model, FedVLN's chained round, must never carry a
    house's bytes to another house), as is a float32 array that is honest throughout kept."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

    from strategies.screening import screen_update

    ref = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
    honest = Array(np.ones(3, np.float32))
    lying = Array(dtype="float32", shape=(3,), stype=honest.stype,
                  data=Array(np.ones(1, np.float64)).data)  # fmt: skip

    def reply(a):
        rd = RecordDict({"arrays": ArrayRecord({"w": a}),
                         "metrics": MetricRecord({"num-examples": 4})})  # fmt: skip
        return Message(rd, dst_node_id=1, message_type="train")

    assert screen_update(reply(honest), ref)[0] is None
    problem, update = screen_update(reply(lying), ref)
    assert update is None and "holds float64[1]" in problem
