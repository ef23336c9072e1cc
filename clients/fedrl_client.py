"""Client side of FedRL: one ClientApp per party, alpha or beta, each step of the exchange a message.

The role comes from node config `role=alpha|beta` (deployment: `--node-config "role=alpha"`), or,
when absent (the simulation engine sets only partition ids), partition 0 is alpha and 1 is beta.
A party's whole private state (Q-network, target, Adam, replay, world replica, release ledger,
secret noise key) lives in a file on its node's own disk between messages
(clients/state_store.put_arrays; 13-15 MB for beta by round 200 of Table 1, which Flower would
otherwise carry to and from every message's process in `context.state`, issue 63), only its
token in `context.state`, and never in a reply. What a reply may carry is fixed
in `SENDS` and checked on every reply, so a change that leaks something fails loudly.
"""

from __future__ import annotations

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict

from clients import costs, faults, policy, state_store
from config import parse
from contracts.fedrl import not_allowed, role_of
from contracts.messages import SERVER_ROUND
from contracts.records import array_record, arrays_of
from training import numerics
from training.fedrl_party import Alpha, Beta
from training.fedrl_protocol import dispatch
from training.fedrl_setup import DEFAULT_CLIP, Settings

STATE = "fedrl-party"  # the party's arrays on the node's disk (clients/state_store.py)
# (run, node) -> (state token, party): the party as this process last saved it. A message
# finding its context at that token skips rebuilding the party from its arrays (15-50 ms a
# message, measured); any other token (another worker saved since, a resumed run, another run
# with the same ids) rebuilds. Tokens are random, so two states never share one.
_LIVE: dict[tuple[int, int], tuple[str, object]] = {}


def enforce_policy(role: str, s: Settings, node_config) -> None:
    """The party protects itself: its operator's policy (clients/policy.py) bounds the noise
    and the clip it releases Q outputs with, whatever the run config (set by whoever submits
    the run) asks. Un-noised release needs `allow-no-noise`; otherwise sigma >= min-sigma."""
    p = policy.of_node(node_config)
    if s.sigma == 0 and not p.fedrl.allow_no_noise:
        raise p.refuse(
            "fedrl.allow-no-noise",
            f"party {role}: the run asks fedrl.sigma=0 (Q outputs un-noised); this node never "
            "releases them so",
        )
    if 0 < s.sigma < p.fedrl.min_sigma:
        raise p.refuse(
            "fedrl.min-sigma",
            f"party {role}: the run asks fedrl.sigma={s.sigma:g}; this node releases Q outputs "
            f"only with sigma >= {p.fedrl.min_sigma:g}",
        )
    if s.reproducible_noise and not p.fedrl.allow_reproducible_noise:
        raise p.refuse(
            "fedrl.allow-reproducible-noise",
            f"party {role}: the run asks fedrl.reproducible-noise=true (noise drawn from the run "
            "seed, which anyone with the run config can remove); this node draws its noise "
            "only from its own secret key",
        )
    most = p.fedrl.max_clip or DEFAULT_CLIP[s.domain]
    if s.clip_bound > most:
        raise p.refuse(
            "fedrl.max-clip",
            f"party {role}: the run asks fedrl.clip={s.clip_bound:g}; this node bounds each released "
            f"Q output by C <= {most:g}",
        )


def _load(context: Context, c, s: Settings):
    # popped: a call that fails leaves no half-changed party behind (its retry rebuilds)
    live = _LIVE.pop((context.run_id, context.node_id), None)
    if live is not None and live[0] and live[0] == state_store.arrays_token(context, STATE):
        return live[1]
    cls = Alpha if role_of(context.node_config) == "alpha" else Beta
    arrays = state_store.get_arrays(context, c, STATE)
    if arrays is None and STATE in context.state:  # a snapshot from before the file: moved
        arrays = arrays_of(context.state[STATE])
        del context.state[STATE]
    if arrays is None:
        return cls(s)
    party = cls(s, restoring=True)
    party.load_arrays(arrays)
    return party


def _save(context: Context, c, party) -> None:
    token = state_store.put_arrays(context, c, STATE, party.state_arrays())
    _LIVE[(context.run_id, context.node_id)] = (token, party)


def _reply(msg: Message, role: str, step: str, data: dict, theta_g=None, metrics=None) -> Message:
    if not_allowed(role, step, data):
        raise RuntimeError(f"{role} tried to send {not_allowed(role, step, data)} in {step}")
    content = RecordDict({"data": array_record(data)})
    if theta_g is not None:
        content["theta-g"] = array_record(theta_g)
    if metrics:
        content["metrics"] = MetricRecord({k: float(v) for k, v in metrics.items()})
    return Message(content, reply_to=msg)


_SETTINGS: dict[tuple, tuple] = {}


def _settings(context: Context):
    """(the parsed run config, the party's Settings) of this run, computed once per process:
    `Settings.of` reads the map file and builds the splits (about a second), and each message
    needs it twice (the handler, then `privacy` for the audit log)."""
    key = (context.run_id, tuple(sorted(context.run_config.items())))
    if key not in _SETTINGS:
        _SETTINGS.clear()  # one run at a time per process
        c = parse(context.run_config)
        _SETTINGS[key] = (c, Settings.of(c))
    return _SETTINGS[key]


def handle(msg: Message, context: Context) -> Message:
    numerics.pin()  # before anything computes: the same kernels on every engine and host
    with costs.phase("rebuild"):
        c, s = _settings(context)
        torch.set_num_threads(c.run.client_threads)
        conf = msg.content["config"]
        step = str(conf["step"])
        role = role_of(context.node_config)
        enforce_policy(role, s, context.node_config)
        party = _load(context, c, s)
    fault = None
    if msg.metadata.message_type == "train":  # round and attempt: stamped by the server
        fault = faults.before_training(
            c,
            faults.partition(context.node_config),
            int(conf.get(SERVER_ROUND, 0)),
            f"{step!r}",
            int(conf.get("attempt", 0)),
        )
    with costs.phase("work"):
        out, theta, metrics = dispatch(
            party,
            role,
            step,
            arrays_of(msg.content.get("data")),
            arrays_of(msg.content.get("theta-g")) or None,
            conf,
        )
    out = faults.nan_state(dict(out), fault)  # NaN in what it releases (clients/faults.py)
    reply = _reply(msg, role, step, out, theta, metrics)
    with costs.phase("save"):
        _save(context, c, party)
    return reply


def privacy(context: Context) -> dict:
    """For its audit log: the noise and bound every Q output this party releases carries, and
    the privacy it has spent so far (its own release ledger, as the party just left it)."""
    _, s = _settings(context)
    out = {"sigma": s.sigma, "clip": s.clip_bound}
    live = _LIVE.get((context.run_id, context.node_id))
    if live is not None and live[0] == state_store.arrays_token(context, STATE):
        spent = live[1].privacy()
        out["epsilon"] = spent[f"{live[1].role}-claimed-epsilon"]
        out["eval_epsilon"] = spent[f"{live[1].role}-claimed-eval-epsilon"]
    return out


train = handle
evaluate = handle
