"""CDL without Ray: the loss, the Siamese training, and whole decentralized runs through an
in-process grid that records every message."""

import numpy as np
import pandas as pd
import pytest
import torch

from clients.app import app
from config import parse
from config.schema import merged
from envs.driving_silos import make_silo
from models.resnet8 import ResNet8
from models.state import shared_state
from tests.conftest import RESEARCH, InProcessGrid, assert_logged_as_sent
from training.cdl import kl_softmax, train_cdl
from training.steering import LocalOptimizer, train_steering

SMALL = {
    "driving.image-size": 24,
    "driving.train-per-silo": 16,
    "driving.test-per-silo": 8,
    "driving.local-epochs": 1,
    "driving.batch-size": 8,
    "num-server-rounds": 2,
}


def test_kl_is_zero_only_for_equal_distributions():
    a = torch.randn(4, 10)
    assert kl_softmax(a, a).abs() < 1e-6
    assert kl_softmax(a, torch.randn(4, 10)) > 0


def _pair(seed=0):
    torch.manual_seed(seed)
    b = ResNet8(24)
    s = ResNet8(24)
    s.load_state_dict(b.state_dict())
    return b, s


@pytest.mark.slow
def test_beta_one_leaves_sub_network_alone_and_beta_zero_is_plain_regression():
    data = make_silo(0, 0, 16, 4, 24)
    b, s = _pair()
    before = {k: v.clone() for k, v in s.state_dict().items() if "running" not in k}
    with torch.no_grad():  # make the pair differ so the KL terms are not zero
        for p in b.parameters():
            p.add_(0.01 * torch.randn_like(p))
    stats = train_cdl(
        b,
        s,
        data.x_train,
        data.y_train,
        epochs=1,
        optim=LocalOptimizer(lr=0.01),
        batch_size=8,
        seed=1,
        beta=1.0,
    )
    assert stats["cd"] > 0
    after = {k: v for k, v in s.state_dict().items() if "running" not in k}
    assert all(torch.equal(before[k], after[k]) for k in before if "num_batches" not in k)

    b1, s1 = _pair(3)
    b2, _ = _pair(3)
    torch.manual_seed(9)
    train_cdl(
        b1,
        s1,
        data.x_train,
        data.y_train,
        epochs=1,
        optim=LocalOptimizer(lr=0.01),
        batch_size=8,
        seed=1,
        beta=0.0,
    )
    torch.manual_seed(9)
    train_steering(
        b2,
        data.x_train,
        data.y_train,
        epochs=1,
        optim=LocalOptimizer(lr=0.01),
        batch_size=8,
        seed=1,
    )
    for k, v in b1.state_dict().items():
        assert torch.allclose(v, b2.state_dict()[k]), k


def _run(tmp_path, method, n=3, node_config=None, **cfg):
    from config.methods import server_module

    run_cfg = merged({**SMALL, "method": method, "num-clients": n, "out-dir": str(tmp_path), **cfg})
    grid = InProcessGrid(app, run_cfg, n, node_config_extra=node_config)
    server_module(method).run(grid, parse(run_cfg), method)
    return grid


def _sent_by_clients(grid, kind="train"):
    return [r for r in grid.replies if r.metadata.message_type == kind]


def test_cdl_sends_only_the_backbone_and_keeps_the_sub_network(tmp_path):
    grid = _run(tmp_path, "cdl", topology="ring")
    assert assert_logged_as_sent(grid) == len(grid.replies)  # each silo's own log agrees
    backbone_keys = set(shared_state(ResNet8(24)))
    replies = [r for r in grid.replies if r.metadata.message_type in ("train", "evaluate", "query")]
    assert len(_sent_by_clients(grid)) == 3 * 2
    for rep in replies:  # everything any silo ever sent
        for name, record in rep.content.array_records.items():
            assert set(record.keys()) == backbone_keys, name
        assert set(rep.content.keys()) <= {"arrays", "metrics", "identity"}
        for rec in rep.content.metric_records.values():
            # scalars only: the round's losses and the CDL signal (gradient-norm ratio, entropy);
            # the test labels' mean and mean square (the run's constant floor, issue 66)
            assert set(rec.keys()) <= {
                "label-mean",
                "label-sq-mean",
                "num-examples",
                "train-loss",
                "cd-loss",
                "fit-s",
                "holds-partition",
                "mse",
                "mae",
                "cd-grad-ratio",
                "pb-entropy",
            }
    for ctx in grid.contexts.values():  # the sub-network exists, on the silo only
        sub = ctx.state["cdl-sub-network"]
        assert set(sub.keys()) == backbone_keys
    last = {r.metadata.src_node_id: r for r in _sent_by_clients(grid)[-3:]}
    for node, rep in last.items():
        sub = grid.contexts[node].state["cdl-sub-network"]
        sent = rep.content["arrays"]
        assert any(not np.array_equal(sub[k].numpy(), sent[k].numpy()) for k in sent.keys())
        assert rep.content["metrics"]["cd-loss"] > 0  # round 2 used the contrastive loss
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    assert "rmse" not in rounds  # a global model's name (FedAvg's); a peer topology has none
    assert {
        "avg_rmse",
        "silo_rmse_own_mean",
        "silo_rmse_pooled_mean",
        "consensus",
        "cd_loss",
    } <= set(rounds.columns)
    silos = pd.read_csv(tmp_path / "silos.csv")
    assert len(silos) == 6 and silos.rmse_pooled.notna().all()


def test_relay_sends_each_silo_its_own_mix(tmp_path):
    grid = _run(tmp_path, "gossip", topology="ring")
    trains = [m for m in grid.sent if m.metadata.message_type == "train"]
    round1 = {m.metadata.dst_node_id: m for m in trains[:3]}
    round2 = {m.metadata.dst_node_id: m for m in trains[3:6]}
    replies1 = {r.metadata.src_node_id: r for r in _sent_by_clients(grid)[:3]}
    key = "head.weight"
    first = {n: m.content["arrays"][key].numpy() for n, m in round1.items()}
    assert all(np.array_equal(first[5000], v) for v in first.values())  # common start
    for p in range(3):  # ring: A = 0.5 (I + predecessor)
        own = replies1[5000 + p].content["arrays"][key].numpy()
        pred = replies1[5000 + (p - 1) % 3].content["arrays"][key].numpy()
        assert np.allclose(
            round2[5000 + p].content["arrays"][key].numpy(), 0.5 * (own + pred), atol=1e-6
        )
    payloads = [round2[5000 + p].content["arrays"][key].numpy() for p in range(3)]
    assert not np.array_equal(payloads[0], payloads[1])
    assert (pd.read_csv(tmp_path / "rounds.csv").consensus > 0).all()


def test_reference_variant_mixes_the_sub_network_too(tmp_path):
    """Only where the silos' operator allows it (deploy/policies/research.toml); a silo with
    no policy refuses the run (the papers' protection: the sub-network never leaves)."""
    ref = {"cdl.variant": "reference"}
    grid = _run(tmp_path / "ok", "cdl", topology="complete", node_config=RESEARCH, **ref)
    sent = _sent_by_clients(grid)[-1].content["arrays"]
    assert any(k.startswith("sub.") for k in sent.keys())
    assert all("cdl-sub-network" not in ctx.state for ctx in grid.contexts.values())
    grid = _run(tmp_path / "default", "cdl", topology="complete", **ref)
    assert not any(r for r in _sent_by_clients(grid) if not r.has_error())
    status = pd.read_csv(tmp_path / "default" / "clients.csv").status
    assert status.str.contains("Refused: .*policy key 'cdl.share-sub-network'").all(), status


def test_cdl_under_a_server_is_fedavg_of_backbones(tmp_path):
    grid = _run(tmp_path, "cdl-sfl")
    assert assert_logged_as_sent(grid) == len(grid.replies)
    trains = [m for m in grid.sent if m.metadata.message_type == "train"]
    heads = [m.content["arrays"]["head.weight"].numpy() for m in trains[3:6]]
    assert all(np.array_equal(heads[0], h) for h in heads)  # one global model
    for rep in _sent_by_clients(grid):
        assert not any(k.startswith("sub.") for k in rep.content["arrays"].keys())
        # as every driving reply: a large federation learns partitions from it (issue 66)
        src = grid.contexts[rep.metadata.src_node_id].node_config["partition-id"]
        assert rep.content["metrics"]["holds-partition"] == src


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"cdl.variant": "official"}, "cdl.variant"),
        ({"cdl.beta": 1.5}, "cdl.beta"),
        ({"topology": "torus"}, "unknown topology"),
        ({"cdl.temperature": 0.0}, "cdl.temperature"),
        ({"driving.non-iid": 1.5}, "driving.non-iid"),
        ({"driving.lr-decay": "cubic"}, "driving.lr-decay"),
        ({"driving.optimizer-state": "x"}, "driving.optimizer-state"),
        ({"driving.grad-clip": -1.0}, "driving.grad-clip"),
    ],
)
def test_bad_cdl_config_is_named(bad, match):
    from config.schema import ConfigError
    from server.decentralized_run import check_config

    with pytest.raises(ConfigError, match=match):
        check_config(parse(merged({**SMALL, **bad})))


class _OneSiloDown(InProcessGrid):
    """Silo `down` is unreachable from round 2 on: the SuperLink answers for it with an error
    reply from its own node id (1), as Flower does for an unavailable node."""

    def __init__(self, *args, down: int = 1, **kw):
        super().__init__(*args, **kw)
        self.down, self.trains = 5000 + down, 0

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import Error, Message

        out = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{len(self.sent)}"
            self.sent.append(msg)
            self.trains += msg.metadata.message_type == "train"
            if msg.metadata.dst_node_id == self.down and self.trains > 3:
                rep = Message(Error(code=0, reason="node unavailable"), reply_to=msg)
                rep.metadata.__dict__["_src_node_id"] = 1
            else:
                rep = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            out.append(rep)
        self.replies.extend(out)
        return out


@pytest.mark.parametrize("method", ["cdl", "gossip"])
def test_an_unavailable_silo_keeps_its_mix_and_is_named_in_clients_csv(tmp_path, method):
    from clients.app import app
    from config.methods import server_module

    run_cfg = merged(
        {**SMALL, "method": method, "num-clients": 3, "out-dir": str(tmp_path), "topology": "ring"}
    )
    server_module(method).run(_OneSiloDown(app, run_cfg, 3), parse(run_cfg), method)
    clients = pd.read_csv(tmp_path / "clients.csv")
    failed = clients[clients.status.str.startswith("failed")]
    assert len(failed) == 1 and failed.partition.iloc[0] == 1 and failed.node.iloc[0] == 5001
    rounds = pd.read_csv(tmp_path / "rounds.csv")
    assert rounds.n_accepted.tolist() == [3, 2]  # round 2 aggregated the two live silos only


class _Restarting(InProcessGrid):
    """After round `at`, silo 1's SuperNode restarts: it comes back under a new node id with an
    empty context (no authentication keeps its id). With `back=False` it never comes back."""

    def __init__(self, *args, at: int = 1, back: bool = True, **kw):
        super().__init__(*args, **kw)
        self.at, self.back, self.trains = at, back, 0

    def get_node_ids(self):
        if self.trains >= 3 * self.at and 5001 in self.contexts:
            from flwr.app import Context, RecordDict

            old = self.contexts.pop(5001)
            if self.back:
                self.contexts[6001] = Context(
                    run_id=1,
                    node_id=6001,
                    node_config=dict(old.node_config),
                    state=RecordDict(),
                    run_config=old.run_config,
                )
        return super().get_node_ids()

    def send_and_receive(self, messages, timeout=None):
        messages = list(messages)
        self.trains += sum(m.metadata.message_type == "train" for m in messages)
        return super().send_and_receive(messages, timeout)


@pytest.mark.parametrize("back", [True, False])
@pytest.mark.slow
def test_a_restarted_silo_is_found_again_and_a_lost_one_is_named(tmp_path, back):
    from clients.app import app
    from config.methods import server_module

    run_cfg = merged(
        {
            **SMALL,
            "method": "cdl",
            "num-clients": 3,
            "out-dir": str(tmp_path),
            "topology": "ring",
            "num-server-rounds": 3,
        }
    )
    grid = _Restarting(app, run_cfg, 3, back=back)
    server_module("cdl").run(grid, parse(run_cfg), "cdl")
    clients = pd.read_csv(tmp_path / "clients.csv")
    later = clients[(clients["round"] > 1) & (clients.partition == 1)]
    if back:  # the new node trains silo 1 from rounds 2 on
        assert (later.node == 6001).all() and (later.status == "ok").all() and len(later) == 2
        assert "cdl-sub-network" in grid.contexts[6001].state
    else:
        assert (later.status == "failed: no node holds this silo").all() and len(later) == 2
        assert pd.read_csv(tmp_path / "rounds.csv").n_accepted.tolist() == [3, 2, 2]


def test_temperature_sharpens_p_and_strengthens_the_measured_signal():
    data = make_silo(0, 0, 32, 4, 24)
    signal = {}
    for t in (1.0, 0.3):
        b, s = _pair()
        with torch.no_grad():
            for p in s.parameters():
                p.add_(0.05 * torch.randn_like(p))
        st = train_cdl(
            b, s, data.x_train, data.y_train, epochs=1, batch_size=8, seed=1, temperature=t
        )
        signal[t] = st
    log_dim = np.log(ResNet8(24).feature_dim)
    assert signal[0.3]["pb_entropy"] < signal[1.0]["pb_entropy"] <= log_dim + 1e-6
    assert signal[0.3]["cd_grad_ratio"] > signal[1.0]["cd_grad_ratio"] > 0
    b, _ = _pair()  # no sub-network yet: nothing to measure
    st = train_cdl(b, None, data.x_train, data.y_train, epochs=1, batch_size=8, seed=1)
    assert np.isnan(st["cd_grad_ratio"]) and st["cd"] == 0


def test_sqrt_decay_follows_the_silo_step_count():
    model = torch.nn.Linear(2, 1)
    optim = LocalOptimizer("adam", 1e-3, weight_decay=1e-5, decay="sqrt")
    opt = optim.build(model.parameters())
    assert opt.param_groups[0]["weight_decay"] == 1e-5
    for t, want in ((0, 1e-3), (1, 1e-3), (4, 5e-4), (100, 1e-4)):
        model(torch.ones(1, 2)).sum().backward()
        optim.step(opt, list(model.parameters()), t)
        assert np.isclose(opt.param_groups[0]["lr"], want)


@pytest.mark.parametrize("method", ["gossip", "cdl"])
@pytest.mark.slow
def test_optimizer_state_persists_in_the_silo_and_is_never_sent(tmp_path, method):
    """optimizer-state=silo: one Adam per silo across rounds, as the official code; its state
    stays in the node's context (the replies carry the model's arrays only)."""
    grid = _run(
        tmp_path,
        method,
        topology="ring",
        **{
            "driving.optimizer": "adam",
            "driving.lr": 0.001,
            "driving.optimizer-state": "silo",
            "driving.local-steps": 1,
            "num-server-rounds": 3,
        },
    )
    network = "model" if method == "gossip" else "backbone"
    for ctx in grid.contexts.values():
        assert int(ctx.state["driving-local-steps"]["n"]) == 3
        kept = ctx.state[f"driving-optimizer-{network}"].to_torch_state_dict()
        assert {float(v) for k, v in kept.items() if k.endswith("/step")} == {3.0}
        if method == "cdl":  # the sub-network's own Adam starts with it, in round 2
            sub = ctx.state["driving-optimizer-sub"].to_torch_state_dict()
            assert {float(v) for k, v in sub.items() if k.endswith("/step")} == {2.0}
    backbone_keys = set(shared_state(ResNet8(24)))
    for rep in _sent_by_clients(grid):
        assert set(rep.content["arrays"].keys()) == backbone_keys
    fresh = _run(tmp_path / "fresh", method, topology="ring", **{"num-server-rounds": 2})
    assert not any(
        k.startswith("driving-optimizer")
        for ctx in fresh.contexts.values()
        for k in ctx.state.keys()
    )


@pytest.mark.slow
def test_signal_reaches_rounds_csv_under_a_server_and_on_a_ring(tmp_path):
    for method in ("cdl-sfl", "cdl"):
        _run(tmp_path / method, method, topology="ring")
        rounds = pd.read_csv(tmp_path / method / "rounds.csv")
        assert np.isnan(rounds.cd_grad_ratio[0])  # round 1: no sub-network yet
        assert rounds.cd_grad_ratio.iloc[-1] > 0 and 0 < rounds.pb_entropy.iloc[-1] <= np.log(512)


def test_the_papers_two_cd_terms_each_train_only_their_own_network():
    """L_cd+ moves the backbone only, (1 - beta) L_cd- the sub-network only; both vanish when
    the two feature distributions agree."""
    import torch

    from training.cdl import paper_losses

    fb = torch.tensor([[1.0, 0.0, 2.0]], requires_grad=True)
    fs = torch.tensor([[0.0, 1.0, 0.5]], requires_grad=True)
    cd_plus, sub_loss = paper_losses(fb, fs, beta=0.25, temperature=1.0)
    assert cd_plus.item() > 0 and sub_loss.item() > 0
    cd_plus.backward(retain_graph=True)
    assert fs.grad is None and fb.grad.abs().sum() > 0
    fb.grad = None
    sub_loss.backward()
    assert fb.grad is None and fs.grad.abs().sum() > 0
    same = torch.tensor([[0.3, 0.1, 0.2]])
    assert all(t.item() == 0 for t in paper_losses(same, same.clone(), 0.5, 1.0))
