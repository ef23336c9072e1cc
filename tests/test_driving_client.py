"""The driving ClientApp called directly (no Ray): what it trains on and what it sends back."""

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from clients.app import app
from config.schema import merged
from models.resnet8 import ResNet8
from models.state import shared_state

SMALL = {
    "driving.image-size": 24,
    "driving.train-per-silo": 24,
    "driving.test-per-silo": 8,
    "driving.local-epochs": 1,
    "driving.batch-size": 8,
}


def _ctx(pid=0, **cfg):
    return Context(
        run_id=1,
        node_id=100 + pid,
        node_config={"partition-id": pid, "num-partitions": 3},
        state=RecordDict(),
        run_config=merged({**SMALL, **cfg}),
    )


def _msg(kind, arrays, **config):
    return Message(
        RecordDict({"arrays": arrays, "config": ConfigRecord({"server-round": 1, **config})}),
        dst_node_id=100,
        message_type=kind,
    )


def _global():
    torch.manual_seed(0)
    return ArrayRecord(shared_state(ResNet8(24)))


def _distance(a: ArrayRecord, b: ArrayRecord) -> float:
    """Squared distance of the trainable weights (BN running stats move regardless of mu)."""
    return float(
        sum(np.sum((a[k].numpy() - b[k].numpy()) ** 2) for k in a.keys() if "running_" not in k)
    )


def test_train_reply_has_global_arrays_and_metrics():
    g = _global()
    rep = app(_msg("train", g), _ctx(pid=1))
    arrays = rep.content["arrays"]
    assert set(arrays.keys()) == set(g.keys())
    assert all(arrays[k].shape == g[k].shape for k in g.keys())
    m = rep.content["metrics"]
    assert m["num-examples"] == 24 and np.isfinite(m["train-loss"]) and m["fit-s"] > 0
    assert _distance(arrays, g) > 0
    # nothing but the model's arrays and four numbers leave the silo; the fourth, the partition
    # it holds, is what the identity query tells the server anyway (strategies/nodes.py)
    assert set(rep.content.keys()) == {"arrays", "metrics"}
    assert set(m.keys()) == {"num-examples", "train-loss", "fit-s", "holds-partition"}
    assert m["holds-partition"] == 1


def test_proximal_term_keeps_update_closer_to_global():
    g = _global()
    free = app(_msg("train", g, **{"proximal-mu": 0.0}), _ctx(**{"driving.lr": 0.05}))
    prox = app(_msg("train", g, **{"proximal-mu": 50.0}), _ctx(**{"driving.lr": 0.05}))
    assert _distance(prox.content["arrays"], g) < 0.5 * _distance(free.content["arrays"], g)


def test_evaluate_and_identity_query():
    rep = app(_msg("evaluate", _global()), _ctx(pid=2))
    m = rep.content["metrics"]
    assert m["num-examples"] == 8 and m["mse"] > 0 and m["mae"] > 0
    q = Message(
        RecordDict({"config": ConfigRecord({"ask": "identity"})}),
        dst_node_id=102,
        message_type="query",
    )
    ident = app(q, _ctx(pid=2)).content["identity"]
    assert ident["partition-id"] == 2 and ident["num-partitions"] == 3


def test_fault_injection_sends_nan_from_that_partition_only():
    g = _global()
    bad = app(_msg("train", g), _ctx(pid=1, **{"faults.nan-partitions": "1"})).content["arrays"]
    ok = app(_msg("train", g), _ctx(pid=0, **{"faults.nan-partitions": "1"})).content["arrays"]
    assert any(np.isnan(bad[k].numpy()).any() for k in bad.keys())
    assert not any(np.isnan(ok[k].numpy()).any() for k in ok.keys())


def test_node_with_its_own_data_dir(udacity_dir):
    ctx = Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 4, "num-partitions": 5, "data-dir": str(udacity_dir)},
        state=RecordDict(),
        run_config=merged(SMALL),
    )
    rep = app(_msg("evaluate", _global()), ctx)
    assert rep.content["metrics"]["num-examples"] == round(613 * 0.2)


def test_minibatches_count_steps_or_epochs():
    from training.steering import minibatches

    dev = torch.device("cpu")
    by_steps = list(minibatches(10, 4, epochs=5, seed=0, device=dev, max_steps=7))
    assert len(by_steps) == 7  # across passes: 3 batches (4, 4, 2) per pass
    assert [first for first, _ in by_steps] == [True, False, False, True, False, False, True]
    by_epochs = list(minibatches(9, 4, epochs=2, seed=0, device=dev))
    assert len(by_epochs) == 4  # the single leftover sample of each pass is skipped
    assert list(minibatches(1, 4, epochs=3, seed=0, device=dev, max_steps=5)) == []


def test_local_steps_override_epochs():
    g = _global()
    one = app(_msg("train", g), _ctx(**{"driving.local-steps": 1, "driving.local-epochs": 9}))
    assert one.content["metrics"]["fit-s"] < 5
