"""Client side of FedRL: one ClientApp per party, alpha or beta, each step of the exchange a message.

The role comes from node config `role=alpha|beta` (deployment: `--node-config "role=alpha"`), or,
when absent (the simulation engine sets only partition ids), partition 0 is alpha and 1 is beta.
A party's whole private state (Q-network, target, Adam, replay, world replica, release ledger)
lives in `context.state` between messages and never in a reply. What a reply may carry is fixed
in `SENDS` and checked on every reply, so a change that leaks something fails loudly.
"""

from __future__ import annotations

import uuid

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from clients import faults
from clients.fedrl_party import Alpha, Beta, Settings
from server.config import merged

STATE = "fedrl-party"
VERSION = "fedrl-party-version"
# (run, node) -> (state token, party): the party as this process last saved it. A message
# finding its context at that token skips rebuilding the party from its arrays (15-50 ms a
# message, measured); any other token (another worker saved since, a resumed run, another run
# with the same ids) rebuilds. Tokens are random, so two states never share one.
_LIVE: dict[tuple[int, int], tuple[str, object]] = {}


# array names each party may send, per step (theta_g travels in its own "theta-g" record);
# "c-alpha" is empty in joint-action mode, where beta does not act
SENDS = {
    ("alpha", "observe"): {"c-alpha"},
    # beta's act may also apply alpha's last targets (the round's deferred UpdateQ) and, in a
    # round's last step, release C_beta / C'_beta of the sampled transitions (ComputeQBeta(j))
    ("beta", "act"): {"c-beta", "a-beta", "c-beta-ids", "c-beta-next-ids"},
    # alpha's last act of a round also runs its K updates and returns Y and C_alpha(s_j)
    ("alpha", "act"): {"a-alpha", "c-alpha", "y", "c-alpha-ids"},
    ("beta", "update"): set(),  # the deferred update alone, before an evaluation
    ("alpha", "keep-best"): set(),
    ("beta", "keep-best"): set(),
    ("alpha", "checkpoint"): set(),  # the end of an evaluating round: write the party's state
    ("beta", "checkpoint"): set(),
    ("alpha", "eval-observe"): {"c-alpha"},
    ("beta", "eval-act"): {"c-beta", "a-beta"},
    ("alpha", "eval-act"): {"a-alpha", "c-alpha"},
}


def enforce_noise_floor(role: str, s: Settings, node_config) -> None:
    """The party protects itself: its operator's node config `min-sigma` is the least noise it
    releases Q outputs with, whatever the run config (set by whoever submits the run) asks."""
    floor = float(node_config.get("min-sigma", 0.0))
    if s.sigma < floor:
        raise PermissionError(
            f"party {role}: the run asks fedrl.sigma={s.sigma:g}; this node "
            f"releases Q outputs only with sigma >= {floor:g} (node config "
            f"min-sigma)"
        )


def role_of(node_config) -> str:
    role = str(node_config.get("role", "")).strip()
    if role:
        if role not in ("alpha", "beta"):
            raise ValueError(f"node config 'role' must be alpha or beta, got {role!r}")
        return role
    return "alpha" if int(node_config["partition-id"]) == 0 else "beta"


def _arrays(record: ArrayRecord | None) -> dict[str, np.ndarray]:
    return {} if record is None else {k: v.numpy() for k, v in record.items()}


def _token(context: Context) -> str:
    return str(context.state[VERSION]["token"]) if VERSION in context.state else ""


def _load(context: Context, s: Settings):
    # popped: a call that fails leaves no half-changed party behind (its retry rebuilds)
    live = _LIVE.pop((context.run_id, context.node_id), None)
    if live is not None and live[0] and live[0] == _token(context):
        return live[1]
    cls = Alpha if role_of(context.node_config) == "alpha" else Beta
    if STATE not in context.state:
        return cls(s)
    party = cls(s, restoring=True)
    party.load_arrays(_arrays(context.state[STATE]))
    return party


def array_record(arrays: dict) -> ArrayRecord:
    """numpy arrays -> ArrayRecord (None values are left out)."""
    return ArrayRecord(
        {k: Array(np.ascontiguousarray(v)) for k, v in arrays.items() if v is not None}
    )


def _save(context: Context, party) -> None:
    token = uuid.uuid4().hex
    context.state[STATE] = array_record(party.state_arrays())
    context.state[VERSION] = ConfigRecord({"token": token})
    _LIVE[(context.run_id, context.node_id)] = (token, party)


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


def dispatch(party, role: str, step: str, data: dict, theta_in, conf) -> tuple:
    """One step of the exchange on a party: (arrays to send, theta_g to send, metrics).
    The Flower handler and the one-process runner (experiments/fedrl_local.py) both call it."""
    prev, theta, metrics = data.get("prev-alpha"), None, None
    if (role, step) not in SENDS:
        raise ValueError(f"unknown FedRL step {step!r} for {role}")
    if step == "observe":
        out = {"c-alpha": party.observe()}
    elif step == "act" and role == "beta":
        if "update-ids" in data:  # alpha's targets from the last round: UpdateQ first
            theta, metrics = _beta_update(party, data, theta_in)
        c, a = party.act(prev, data.get("c-alpha"))
        out = {"c-beta": c, "a-beta": a}
        if "ids" in data:
            out["c-beta-ids"], out["c-beta-next-ids"] = party.q_outputs(data["ids"])
    elif step == "act":
        party.set_theta_g(theta_in)
        updating = "ids" in data
        a, c = party.act(data["c-beta"], data["a-beta"], observe=not updating)
        out = {"a-alpha": a, "c-alpha": c}
        metrics = party.take_stats() if bool(conf.get("report", False)) else {}
        if updating:  # C_alpha of the current observation is computed after the update
            y, c_ids, theta, loss, c_now = party.update(
                data["ids"], data["c-beta-ids"], data["c-beta-next-ids"], None
            )
            out.update({"y": y, "c-alpha-ids": c_ids, "c-alpha": c_now})
            metrics.update({"loss-alpha": loss, **party.privacy()})
    elif step == "update":
        theta, metrics = _beta_update(party, data, theta_in)
        out = {}
    elif step == "checkpoint":  # clients/app.py saves the context (clients/state_store.py)
        out = {}
    elif step == "keep-best":
        party.set_theta_g(theta_in)
        party.keep_best()
        out = {}
    else:  # evaluation
        if bool(conf.get("start", False)):
            party.set_theta_g(theta_in)
            party.start_evaluation(str(conf["split"]), str(conf.get("weights", "last")))
        noise = bool(conf.get("test-noise", True))
        if step == "eval-observe":
            out = {"c-alpha": party.observe(party.eval_world)}
        elif role == "beta":
            c, a = party.eval_act(prev, data.get("c-alpha"), noise)
            out = {"c-beta": c, "a-beta": a}
        else:
            a, active, c = party.eval_act(data["c-beta"], data["a-beta"], noise)
            out, metrics = {"a-alpha": a, "c-alpha": c}, {"active": float(active)}
            if not active:
                metrics.update(party.eval_result())
                party.end_evaluation()
    return out, theta, metrics


def _beta_update(party, data: dict, theta_in) -> tuple[dict, dict]:
    theta, loss = party.update(data["update-ids"], data["y"], data["c-alpha-ids"], theta_in)
    return theta, {"loss-beta": loss, **party.privacy()}


def handle(msg: Message, context: Context) -> Message:
    cfg = merged(dict(context.run_config))
    torch.set_num_threads(max(1, int(cfg["client-threads"])))
    s = Settings.from_config(cfg)
    conf = msg.content["config"]
    step = str(conf["step"])
    role = role_of(context.node_config)
    enforce_noise_floor(role, s, context.node_config)
    party = _load(context, s)
    fault = None
    if msg.metadata.message_type == "train":  # round and attempt: stamped by the server
        fault = faults.before_training(
            cfg,
            faults.partition(context.node_config),
            int(conf.get("server-round", 0)),
            f"{step!r}",
            int(conf.get("attempt", 0)),
        )
    out, theta, metrics = dispatch(
        party,
        role,
        step,
        _arrays(msg.content.get("data")),
        _arrays(msg.content.get("theta-g")) or None,
        conf,
    )
    out = faults.nan_state(dict(out), fault)  # NaN in what it releases (clients/faults.py)
    reply = _reply(msg, role, step, out, theta, metrics)
    _save(context, party)
    return reply


train = handle
evaluate = handle
