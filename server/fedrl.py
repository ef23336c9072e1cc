"""Server side of FedRL: the ServerApp orchestrates the two parties and relays what they send.

It holds no data and no private network: per round it sends beta and alpha S acting messages
each (B environments per message), draws K x batch transition ids, and relays beta's noised Q
outputs to alpha, alpha's targets Y, C_alpha and theta_g to beta, and beta's theta_g back to alpha
(see `clients/fedrl_party.py` for the protocol and `clients/fedrl.py` for what a party may send).
Evaluation (every `eval-every` rounds and the last) plays one greedy episode per map of the valid
split (and of the test split in the last round), twice: test_noise=on and test_noise=off. Each
step of it costs two messages, so on 32x32 (T_m = 178) one evaluation is ~700 messages: choose
`eval-every` accordingly.
"""
from __future__ import annotations

import time
from logging import INFO

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common import log

from clients.fedrl import array_record
from clients.fedrl_party import Settings, sample_ids
from envs.errors import DataError
from server.config import ConfigError, positive
from server.recorder import Recorder, out_dir
from strategies.nodes import FederationError, query_identities, wait_for_nodes
from strategies.screening import message_bytes


def check_config(cfg: dict) -> Settings:
    for key in ("num-server-rounds", "eval-every"):
        positive(cfg, key)
    try:
        s = Settings.from_config(cfg)
        s.check_maps()
    except (ValueError, DataError) as e:
        raise ConfigError(f"run config: {e}") from None
    return s


def query_roles(grid, node_ids: list[int], timeout: float) -> dict[str, int]:
    """role -> node id: each node's `role` from its identity (or partition 0 alpha, 1 beta)."""
    roles: dict[str, int] = {}
    for node, ident in query_identities(grid, node_ids, timeout).items():
        role = str(ident.get("role", "")) or (
            "alpha" if int(ident["partition-id"]) == 0 else "beta")
        if role in roles:
            raise FederationError(f"two nodes claim role {role!r}; give each SuperNode "
                                  "--node-config role=alpha or role=beta")
        roles[role] = node
    if set(roles) != {"alpha", "beta"}:
        raise FederationError(f"FedRL needs one alpha and one beta node, got {sorted(roles)}")
    return roles


class Exchange:
    """Sends one message to one party and returns its reply, counting the bytes."""

    def __init__(self, grid, roles: dict[str, int], recorder: Recorder, timeout: float):
        self.grid, self.roles, self.rec, self.timeout = grid, roles, recorder, timeout
        self.messages = 0

    def __call__(self, role: str, step: str, data: dict | None = None, theta_g=None,
                 evaluation: bool = False, **conf):
        content = RecordDict({"config": ConfigRecord({"step": step, **conf})})
        if data:
            content["data"] = array_record(data)
        if theta_g is not None:
            content["theta-g"] = theta_g
        kind = MessageType.EVALUATE if evaluation else MessageType.TRAIN
        msg = Message(content, dst_node_id=self.roles[role], message_type=kind)
        replies = list(self.grid.send_and_receive([msg], timeout=self.timeout))
        self.messages += 1
        if not replies:
            raise FederationError(f"{role} did not answer {step!r} within {self.timeout:.0f} s")
        rep = replies[0]
        if rep.has_error():
            raise FederationError(f"{role} failed in {step!r}: {rep.error.reason}")
        self.rec.add_bytes(up=message_bytes(rep), down=message_bytes(msg), evaluation=evaluation)
        out = {k: v.numpy() for k, v in rep.content["data"].items()}
        theta = rep.content.get("theta-g")
        sent = {**out, **({f"theta-g/{k}": v.numpy() for k, v in theta.items()} if theta else {})}
        bad = [k for k, v in sent.items() if v.dtype.kind == "f" and not np.isfinite(v).all()]
        if bad:  # relaying NaN/inf would poison the other party's network
            raise FederationError(f"{role} sent non-finite values in {step!r}: {', '.join(bad)}")
        metrics = dict(rep.content["metrics"]) if "metrics" in rep.content else {}
        return out, theta, metrics


def evaluate(send: Exchange, split: str, test_noise: bool) -> dict:
    prev, first = None, True
    while True:
        b, _, _ = send("beta", "eval-act", {"prev-alpha": prev}, evaluation=True,
                       split=split, start=first)
        a, _, m = send("alpha", "eval-act", {"c-beta": b["c-beta"], "a-beta": b["a-beta"]},
                       evaluation=True, split=split, start=first, **{"test-noise": test_noise})
        prev, first = a["a-alpha"], False
        if not m["active"]:
            tag = "on" if test_noise else "off"
            return {f"{split}-{k}-test_noise={tag}": m[k] for k in ("succ-rate", "avg-reward")}


def run(grid, cfg: dict, name: str) -> None:
    s = check_config(cfg)
    rounds, eval_every = int(cfg["num-server-rounds"]), int(cfg["eval-every"])
    recorder = Recorder(out_dir(cfg, name), cfg)
    nodes = wait_for_nodes(grid, 2, float(cfg["node-wait-timeout"]))
    roles = query_roles(grid, nodes, float(cfg["node-wait-timeout"]))
    send = Exchange(grid, roles, recorder, float(cfg["round-timeout"]))
    rng = np.random.default_rng([s.seed, 99])  # the same id stream as experiments/fedrl_local
    theta_g, prev, transitions, train_steps = None, None, 0, 0
    splits = ["valid"] + (["test"] if len(s.test) else [])
    privacy: dict = {}
    log(INFO, "[fedembodied] FedRL %s mode, %dx%d, B=%d envs x %d steps, K=%d updates/round",
        s.mode, s.size, s.size, s.envs, s.act_steps, s.updates)
    t_start = time.perf_counter()
    for rnd in range(1, rounds + 1):
        recorder.start_round(rnd)
        metrics: dict = {}
        for step in range(s.act_steps):
            b, _, _ = send("beta", "act", {"prev-alpha": prev})
            a, _, m = send("alpha", "act", {"c-beta": b["c-beta"], "a-beta": b["a-beta"]},
                           theta_g=theta_g if step == 0 else None,
                           report=step == s.act_steps - 1)
            prev = a["a-alpha"]
            metrics.update(m)
        transitions += s.envs * s.act_steps
        ids = sample_ids(rng, transitions, s)
        if ids is not None:
            q, _, _ = send("beta", "q-outputs", {"ids": ids, "prev-alpha": prev})
            prev = None
            u, theta_alpha, ma = send("alpha", "update", {"ids": ids, "c-beta": q["c-beta"],
                                                          "c-beta-next": q["c-beta-next"]})
            _, theta_g, mb = send("beta", "update", {"ids": ids, "y": u["y"],
                                                     "c-alpha": u["c-alpha"]},
                                  theta_g=theta_alpha)
            train_steps += ids.size
            metrics.update(ma)
            metrics.update(mb)
            privacy = {k: v for k, v in {**ma, **mb}.items() if "epsilon" in k or "releases" in k}
        metrics.update({"env-steps": transitions, "train-steps": train_steps,
                        "messages": send.messages})
        if rnd == rounds or rnd % eval_every == 0:
            for split in splits if rnd == rounds else ["valid"]:
                for noise in (True, False):
                    metrics.update(evaluate(send, split, noise))
        recorder.add_metrics(metrics)
        recorder.add_client(node=roles["alpha"], partition="alpha", status="ok")
        recorder.add_client(node=roles["beta"], partition="beta", status="ok")
        row = recorder.end_round(theta_g)
        log(INFO, "[fedembodied] round %d/%d  valid succ %s  eps_alpha=%s  wall=%.2fs", rnd,
            rounds, row.get("valid-succ-rate-test_noise=on", "-"),
            row.get("alpha-epsilon", "-"), row["wall_s"])
    recorder.write_config(privacy={**privacy, "delta": s.delta, "sigma": s.sigma,
                                   "clip": s.clip},
                          wall_s=round(time.perf_counter() - t_start, 2))
    log(INFO, "[fedembodied] privacy at delta=%g: %s", s.delta, privacy)
