"""A party's side of differential privacy for the weight-sharing methods (config/dp.py).

- The party's policy decides first (`check`): a policy with `dp.local-epsilon > 0` releases
  model updates only under local DP at that epsilon or less per release, so a run asking
  `none`, `central` or a larger epsilon is refused naming the key; a policy with
  `dp.max-epsilon` refuses the release that would take the party's total above it.
- `central`: Flower's `fixedclipping_mod` clips the update to L2 norm C before it leaves (the
  server adds the noise: strategies/dp.py); with `dp.clipping = "adaptive"` Flower's
  `adaptiveclipping_mod` does, with the C the server sent this round, and adds the clip bit.
- `local`: Flower's `LocalDpMod` clips it and adds Gaussian noise on this machine, with
  sensitivity 2C: the protected unit is the party's whole data in the round, and two updates
  in the C-ball differ by at most 2C (the same choice as FedRL's Q outputs,
  training/fedrl_privacy.py). Its std is 2C sqrt(2 ln(1.25/delta)) / epsilon, a Gaussian
  mechanism of noise multiplier z = sqrt(2 ln(1.25/delta)) / epsilon; the party's total over
  its k releases is the RDP composition of k of them at the run's delta (Google's
  dp-accounting), recorded in its audit log and sent as the metric `dp-epsilon`. That total
  is what we report, not the label: LocalDpMod's calibration is the classic Gaussian bound,
  which holds only for epsilon < 1; at `local-epsilon = 50` one release is epsilon ~101 by RDP.

Both mods clip against the arrays the message brought and refuse a message that carries more
than one array record, so they need a reply that carries the same arrays: FedVLN's stages with
a setup round (augment, pre-exploration) fail under DP with Flower's mod error, safely.

What the ledger does not cover: it is kept in the node's state for the run (its out-dir), so a
new run, another stage or a resume from an earlier round starts its count again; and the
metrics beside the weights (num-examples, losses, evaluation scores) leave un-noised.
"""

from __future__ import annotations

import math

from flwr.app import ConfigRecord, Context, Message, MetricRecord
from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod
from flwr.supercore.differential_privacy import KEY_CLIPPING_NORM

from clients.policy import Policy
from config import Config
from contracts.messages import DP_EPSILON
from training.fedrl_privacy import epsilon

LEDGER = "dp-ledger"  # ConfigRecord in context.state: this party's local-DP releases so far
EPSILON = DP_EPSILON  # reply metric: the party's total epsilon after this release
CLIPPED_TO = "dp-clip"  # ConfigRecord in context.state: the C of this party's last update


def sent_clip(msg: Message) -> float:
    """The C the server sent with this round's model (central DP; adaptive: it changes)."""
    for record in msg.content.config_records.values():
        if KEY_CLIPPING_NORM in record:
            return float(record[KEY_CLIPPING_NORM])
    return float("nan")  # Flower's mod then refuses the message, naming the missing key


def check(p: Policy, c: Config) -> None:
    """Refuse a run that asks less privacy than this party's policy requires."""
    need = p.dp.local_epsilon
    if need > 0 and c.dp.mode != "local":
        raise p.refuse(
            "dp.local-epsilon",
            f"the run asks dp.mode={c.dp.mode!r}; this node sends model updates only under "
            f"local DP with epsilon <= {need:g} per release",
        )
    if need > 0 and multiplier(c.dp.local_epsilon, c.dp.delta) < multiplier(need, POLICY_DELTA):
        raise p.refuse(
            "dp.local-epsilon",
            f"the run asks dp.local-epsilon={c.dp.local_epsilon:g} at dp.delta={c.dp.delta:g}: "
            f"noise multiplier {multiplier(c.dp.local_epsilon, c.dp.delta):.3g}, less than the "
            f"{multiplier(need, POLICY_DELTA):.3g} this node requires (epsilon {need:g} per "
            f"update at delta {POLICY_DELTA:g})",
        )


POLICY_DELTA = 1e-5  # a policy's local-epsilon is read at this delta, whatever the run's


def multiplier(eps: float, delta: float) -> float:
    """LocalDpMod's noise in units of the sensitivity: sqrt(2 ln(1.25/delta)) / epsilon. The
    policy compares this, the noise actually added, so a run cannot buy a smaller noise with
    a larger delta under the same epsilon label."""
    return math.sqrt(2 * math.log(1.25 / delta)) / eps


def releases(context: Context) -> int:
    return int(context.state[LEDGER]["releases"]) if LEDGER in context.state else 0


def spent(c: Config, k: int) -> float:
    """This party's own claim after k releases (the server computes its own:
    strategies/dp.LocalDPLedger)."""
    return epsilon(k, c.dp.local_std, c.dp.clip, c.dp.delta)


def train(call, msg: Message, context: Context, c: Config, p: Policy) -> Message:
    """The method's training handler behind the mod the run's DP mode needs."""
    if c.dp.mode == "central":
        mod = adaptiveclipping_mod if c.dp.clipping == "adaptive" else fixedclipping_mod
        reply = mod(msg, context, call)
        if not reply.has_error():
            context.state[CLIPPED_TO] = ConfigRecord({"clip": sent_clip(msg)})
        return reply
    if c.dp.mode != "local":
        return call(msg, context)
    k = releases(context) + 1
    total = spent(c, k)
    if p.dp.max_epsilon and total > p.dp.max_epsilon:
        raise p.refuse(
            "dp.max-epsilon",
            f"release {k} would take this party's epsilon to {total:.4g} at delta "
            f"{c.dp.delta:g}, above its budget {p.dp.max_epsilon:g}",
        )
    mod = LocalDpMod(c.dp.clip, 2 * c.dp.clip, c.dp.local_epsilon, c.dp.delta)
    reply = mod(msg, context, call)
    if reply.has_error():
        return reply
    context.state[LEDGER] = ConfigRecord({"releases": k})
    for name in list(reply.content.metric_records):
        record = dict(reply.content.metric_records[name])
        reply.content[name] = MetricRecord({**record, EPSILON: total})
    return reply


def privacy(context: Context, c: Config) -> dict | None:
    """For the audit log: the mechanism every update of this party carries, and its total."""
    if c.dp.mode == "central":
        clip = context.state[CLIPPED_TO]["clip"] if CLIPPED_TO in context.state else c.dp.clip
        how = "adaptive clip, clip bit sent" if c.dp.clipping == "adaptive" else "clip"
        return {"mechanism": f"{how} (central DP: the server adds the noise)", "clip": clip}
    if c.dp.mode != "local":
        return None
    k = releases(context)
    return {
        "mechanism": "gaussian (local DP, Flower LocalDpMod)",
        "sigma": c.dp.local_std,
        "clip": c.dp.clip,
        "sensitivity": 2 * c.dp.clip,
        "releases": k,
        "epsilon": spent(c, k),
    }
