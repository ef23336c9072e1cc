"""Client side of FedRL: one ClientApp per party, alpha or beta, each step of the exchange a message.

The role comes from node config `role=alpha|beta` (deployment: `--node-config "role=alpha"`), or,
when absent (the simulation engine sets only partition ids), partition 0 is alpha and 1 is beta.
A party's whole private state (Q-network, target, Adam, replay, world replica, release ledger)
lives in `context.state` between messages and never in a reply. What a reply may carry is fixed
in `SENDS` and checked on every reply, so a change that leaks something fails loudly.
"""
from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from clients.fedrl_party import Alpha, Beta, Settings
from server.config import merged

STATE = "fedrl-party"
# array names each party may send, per step (theta_g travels in its own "theta-g" record)
SENDS = {
    ("beta", "act"): {"c-beta", "a-beta"},
    ("alpha", "act"): {"a-alpha"},
    ("beta", "q-outputs"): {"c-beta", "c-beta-next"},
    ("alpha", "update"): {"y", "c-alpha"},
    ("beta", "update"): set(),
    ("beta", "eval-act"): {"c-beta", "a-beta"},
    ("alpha", "eval-act"): {"a-alpha"},
}


def role_of(node_config) -> str:
    role = str(node_config.get("role", "")).strip()
    if role:
        if role not in ("alpha", "beta"):
            raise ValueError(f"node config 'role' must be alpha or beta, got {role!r}")
        return role
    return "alpha" if int(node_config["partition-id"]) == 0 else "beta"


def _arrays(record: ArrayRecord | None) -> dict[str, np.ndarray]:
    return {} if record is None else {k: v.numpy() for k, v in record.items()}


def _load(context: Context, s: Settings):
    cls = Alpha if role_of(context.node_config) == "alpha" else Beta
    if STATE not in context.state:
        return cls(s)
    party = cls(s, restoring=True)
    party.load_arrays(_arrays(context.state[STATE]))
    return party


def array_record(arrays: dict) -> ArrayRecord:
    """numpy arrays -> ArrayRecord (None values are left out)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()
                        if v is not None})


def _save(context: Context, party) -> None:
    context.state[STATE] = array_record(party.state_arrays())


def _reply(msg: Message, role: str, step: str, data: dict, theta_g=None, metrics=None) -> Message:
    allowed = SENDS[(role, step)]
    if set(data) - allowed:
        raise RuntimeError(f"{role} tried to send {sorted(set(data) - allowed)} in {step}")
    content = RecordDict({"data": array_record(data)})
    if theta_g is not None:
        content["theta-g"] = array_record(theta_g)
    if metrics:
        content["metrics"] = MetricRecord({k: float(v) for k, v in metrics.items()})
    return Message(content, reply_to=msg)


def handle(msg: Message, context: Context) -> Message:
    cfg = merged(dict(context.run_config))
    torch.set_num_threads(max(1, int(cfg["client-threads"])))
    s = Settings.from_config(cfg)
    conf = msg.content["config"]
    step = str(conf["step"])
    role = role_of(context.node_config)
    party = _load(context, s)
    data = _arrays(msg.content.get("data"))
    theta_in = _arrays(msg.content.get("theta-g")) or None
    prev = data.get("prev-alpha")
    if step == "act" and role == "beta":
        c, a = party.act(prev)
        out = _reply(msg, role, step, {"c-beta": c, "a-beta": a})
    elif step == "act":
        party.set_theta_g(theta_in)
        a = party.act(data["c-beta"], data["a-beta"])
        out = _reply(msg, role, step, {"a-alpha": a}, metrics=party.take_stats()
                     if bool(conf.get("report", False)) else None)
    elif step == "q-outputs":
        c, c2 = party.q_outputs(data["ids"], prev)
        out = _reply(msg, role, step, {"c-beta": c, "c-beta-next": c2})
    elif step == "update" and role == "alpha":
        y, c_alpha, theta_g, loss = party.update(data["ids"], data["c-beta"],
                                                 data["c-beta-next"], theta_in)
        out = _reply(msg, role, step, {"y": y, "c-alpha": c_alpha}, theta_g,
                     {"loss-alpha": loss, **party.privacy()})
    elif step == "update":
        theta_g, loss = party.update(data["ids"], data["y"], data["c-alpha"], theta_in)
        out = _reply(msg, role, step, {}, theta_g, {"loss-beta": loss, **party.privacy()})
    elif step == "eval-act":
        if bool(conf.get("start", False)):
            party.start_evaluation(str(conf["split"]))
        if role == "beta":
            c, a = party.eval_act(prev)
            out = _reply(msg, role, step, {"c-beta": c, "a-beta": a})
        else:
            a, active = party.eval_act(data["c-beta"], data["a-beta"],
                                       bool(conf["test-noise"]))
            metrics = {"active": float(active)}
            if not active:
                metrics.update(party.eval_result())
            out = _reply(msg, role, step, {"a-alpha": a}, metrics=metrics)
        if bool(conf.get("last", False)) or (role == "alpha" and not active):
            party.end_evaluation()
    else:
        raise ValueError(f"unknown FedRL step {step!r} for {role}")
    _save(context, party)
    return out


train = handle
evaluate = handle
