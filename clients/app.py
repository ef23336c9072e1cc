"""The ClientApp (one per node): dispatch on run config `method` to that method's handler.

A node learns who it is from its node config: `partition-id` and `num-partitions` (set by the
simulation engine, or by `--node-config` on a deployed SuperNode), and optionally `data-dir`.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients import audit, costs, dp, policy, state_store
from config import methods, parse
from contracts.messages import round_of, saves_state

app = ClientApp()


def _handler(context: Context):
    return methods.client_handler(parse(context.run_config).run.method)


def _handle(kind: str, msg: Message, context: Context) -> Message:
    """The method's handler, under the node's own policy (clients/policy.py: which methods it
    serves, what it may send), with the node's state read back in a resumed run and written to
    the node's disk after a message whose config says `save-state` (the server marks the
    message that ends a node's round: a training call, FedRL's checkpoint step). Every reply,
    and every refusal, goes to the node's audit log (clients/audit.py) before it leaves."""
    c = parse(context.run_config)
    p = policy.of_node(context.node_config)
    handler = _handler(context)
    log = audit_log(p, context)
    what = {"partition": int(context.node_config.get("partition-id", 0)), "method": c.run.method}
    with costs.message() as cost:  # where this message's time went (clients/costs.py)
        try:
            p.serves(c.run.method)
            weights = methods.get(c.run.method).releases
            if weights != "q":  # model weights leave: the party's DP policy decides
                dp.check(p, c)
            with costs.phase("state"):
                state_store.claim(context, c)  # one run per node folder
                state_store.restore(context, c)
            if kind == "query":
                reply = _identity(msg, context)
            elif kind == "train" and weights in ("weights", "peer-weights"):
                reply = dp.train(handler.train, msg, context, c, p)
            else:
                reply = getattr(handler, kind)(msg, context)
        except Exception as e:  # refused (policy) or failed: what leaves is Flower's error reply
            audit.record_reply(
                log,
                msg,
                None,
                **what,
                policy_source=p.source,
                policy_digest=p.digest,
                reason=f"{type(e).__name__}: {e}",
                status="refused" if isinstance(e, policy.Refused) else "failed",
            )
            raise
        if not reply.has_error() and saves_state(msg):  # the server says when
            with costs.phase("state"):
                state_store.save(context, c, round_of(msg))
    privacy = getattr(handler, "privacy", None) or (lambda ctx: dp.privacy(ctx, c))
    audit.record_reply(
        log,
        msg,
        reply,
        **what,
        policy_source=p.source,
        policy_digest=p.digest,
        privacy=privacy and privacy(context),
        cost=cost,
    )
    return reply


def audit_log(p: policy.Policy, context: Context) -> Path:
    """This node's audit log: `<state-dir>/audit/partition-<k>.jsonl` on its own disk."""
    return (
        p.state_root()
        / "audit"
        / f"partition-{int(context.node_config.get('partition-id', 0))}.jsonl"
    )


@app.train()
def train(msg: Message, context: Context) -> Message:
    return _handle("train", msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _handle("evaluate", msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    return _handle("query", msg, context)


def _identity(msg: Message, context: Context) -> Message:
    """Who am I: the server asks once per run to map node ids to partitions (a method's
    handler may add what else its server needs to know, e.g. FedVLN's house and role)."""
    nc = context.node_config
    identity = ConfigRecord(
        {
            "partition-id": int(nc["partition-id"]),
            "num-partitions": int(nc["num-partitions"]),
            "role": str(nc.get("role", "")),
        }
    )
    extra = getattr(_handler(context), "identity", None)
    if extra is not None:
        identity.update(extra(context))
    return Message(RecordDict({"identity": identity}), reply_to=msg)
