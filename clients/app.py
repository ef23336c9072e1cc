"""The ClientApp (one per node): dispatch on run config `method` to that method's handler.

A node learns who it is from its node config: `partition-id` and `num-partitions` (set by the
simulation engine, or by `--node-config` on a deployed SuperNode), and optionally `data-dir`.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients import state_store
from config import methods, parse

app = ClientApp()


def _handler(context: Context):
    return methods.client_handler(parse(context.run_config).run.method)


def _handle(kind: str, msg: Message, context: Context) -> Message:
    """The method's handler, with the node's state read back in a resumed run and written to
    the node's disk after a message whose config says `save-state` (the server marks the
    message that ends a node's round: a training call, FedRL's checkpoint step)."""
    c = parse(context.run_config)
    state_store.restore(context, c)
    reply = getattr(_handler(context), kind)(msg, context)
    conf = msg.content.config_records.get("config", {})
    if not reply.has_error() and bool(conf.get("save-state", False)):  # the server says when
        state_store.save(context, c, int(conf.get("server-round", 0)))
    return reply


@app.train()
def train(msg: Message, context: Context) -> Message:
    return _handle("train", msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return _handle("evaluate", msg, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
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
