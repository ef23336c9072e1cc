"""Finding the federation's nodes and who they are.

The server cannot read a node's node_config, so it asks each node once with a `query` message
for its partition id. Waiting is bounded: with fewer nodes than expected the run fails with a
clear message instead of waiting forever (FedAvg's own sampler would loop endlessly).
"""

from __future__ import annotations

import time
from logging import INFO, WARNING

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from contracts.errors import FederationError  # noqa: F401 (raised here, imported from here)
from strategies.timeouts import arrivals

START_S = 1800.0  # run config 'node-start-timeout': how long a federation may take to start
SAY_EVERY_S = 30.0


def wait_for_nodes(grid: Grid, expected: int, timeout_s: float) -> list[int]:
    """Node ids once `expected` nodes are connected; FederationError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= expected:
            return ids
        if time.monotonic() > deadline:
            raise FederationError(
                f"only {len(ids)} of the {expected} expected nodes connected within "
                f"{timeout_s:.0f} s: start {expected} SuperNodes (`flwr run`: --federation-config "
                f"\"num-supernodes={expected}\"), or ask for fewer (run config 'num-clients')"
            )
        time.sleep(0.5)


def fit_to_federation(grid: Grid, expected: int, timeout_s: float, start_s: float = START_S) -> int:
    """The number of silos to run: run config `num-clients`, unless the nodes say otherwise.

    Every node knows the federation's size (`num-partitions`: simulation.py's --num-clients,
    `flwr run`'s num-supernodes, a SuperNode's --node-config). When the first node to connect
    reports another size than `expected`, the run follows the nodes and the log says how to
    choose: plain `flwr run .` (2 SuperNodes) then trains 2 silos instead of waiting for 10."""
    first = wait_for_nodes(grid, 1, timeout_s)[:1]
    size = int(query_identities(grid, first, timeout_s, start_s)[first[0]]["num-partitions"])
    if size != expected:
        log(
            WARNING,
            "[fedembodied] the nodes report a federation of %d (num-partitions), the "
            "run config num-clients=%d: running %d silos. For %d, start that many nodes "
            '(`flwr run . --federation-config "num-supernodes=%d"`)',
            size,
            expected,
            size,
            expected,
            expected,
        )
    return size


UNAVAILABLE = "Node Unavailable"  # Flower's error reply for a node that missed its heartbeats


class Patience:
    """The two waits of a query to the nodes (issue 65). Until the first node answers, the
    federation may still be starting: Ray starting its actors, each ClientApp importing torch
    and the app, or a deployed node's first `flwr-clientapp` (on a busy machine, minutes). That
    is waited for up to `start_s` (run config 'node-start-timeout'), with a line every 30 s
    saying so. Once any node has answered the machine is up, and a node silent for `silence_s`
    (run config 'node-wait-timeout') since the last answer from any node is taken for dead."""

    def __init__(self, silence_s: float, start_s: float):
        self.silence_s, self.start_s = silence_s, max(start_s, silence_s)
        self.t0 = self.last = self.said = time.monotonic()
        self.started = False

    def heard(self) -> None:
        self.started, self.last = True, time.monotonic()

    def left(self) -> float:
        """Seconds before the wait in force runs out (<= 0: out)."""
        if self.started:
            return self.silence_s - (time.monotonic() - self.last)
        return self.start_s - (time.monotonic() - self.t0)

    def say(self, what: str) -> None:
        now = time.monotonic()
        if not self.started and now - self.said >= SAY_EVERY_S:
            self.said = now
            log(INFO, "[fedembodied] waiting for the nodes to start (%s): %.0f s so far, up to "
                "%.0f s (run config 'node-start-timeout')", what, now - self.t0, self.start_s)  # fmt: skip

    def waiting(self) -> bool:
        """Still within the wait in force (and, while starting, a line every 30 s)."""
        self.say("a reply to the identity query")
        return self.left() > 0

    def why(self) -> str:
        if self.started:
            return (
                f"within {self.silence_s:g} s of the last answer (run config 'node-wait-timeout')"
            )
        return (
            f"within {self.start_s:g} s, and no node has answered yet (run config "
            "'node-start-timeout'; a node's first answer waits for Ray's actors and the app's imports)"
        )


def query_identities(
    grid: Grid, node_ids: list[int], timeout_s: float, start_s: float = START_S
) -> dict[int, dict]:
    """node id -> the identity the node reports (partition-id, num-partitions, role).

    Waits as `Patience` says: a federation still starting is waited for up to `start_s`, a
    node silent for `timeout_s` after the others answered fails the run, named. A node that
    Flower reports unavailable (it missed its heartbeats: restarting, cut off) is asked again
    every few seconds meanwhile, with a log line naming it (issue 43: a SuperNode restarted
    with its key after a SuperLink restart is refused activation until its old session
    expires); any other error reply fails the run, naming the node."""
    patience = Patience(timeout_s, start_s)
    out: dict[int, dict] = {}
    pending = list(node_ids)
    while True:
        msgs = [
            Message(
                RecordDict({"config": ConfigRecord({"ask": "identity"})}),
                dst_node_id=n,
                message_type=MessageType.QUERY,
            )
            for n in pending
        ]
        away = {}
        for rep in arrivals(grid, msgs, patience.waiting, max(1.0, patience.left())):
            src = rep.metadata.src_node_id
            if rep.has_error() and UNAVAILABLE in rep.error.reason:
                away[src] = rep.error.reason
            elif rep.has_error():
                raise FederationError(f"node {src} failed the identity query: {rep.error.reason}")
            else:
                out[src] = dict(rep.content["identity"])
                patience.heard()
        pending = [n for n in pending if n not in out]
        if not pending:
            return out
        left = patience.left()
        if left <= 0 or not away:
            why = f": {next(iter(away.values()))}" if away else ""
            raise FederationError(
                f"{len(pending)} nodes did not answer the identity query "
                f"{patience.why()}: node(s) {', '.join(map(str, pending[:5]))}"
                f"{' ...' if len(pending) > 5 else ''}{why}"
            )
        log(
            INFO,
            "[fedembodied] waiting for node(s) %s (unavailable), up to %d s more",
            ", ".join(map(str, pending)),
            left,
        )
        time.sleep(min(5.0, left))


def query_partitions(
    grid: Grid, node_ids: list[int], timeout_s: float, start_s: float = START_S
) -> dict[int, int]:
    """node id -> partition id, asked of every node once (waits: `Patience`)."""
    return partitions_of(query_identities(grid, node_ids, timeout_s, start_s))


def partitions_of(identities: dict[int, dict]) -> dict[int, int]:
    """node id -> partition id from the nodes' identities; no two nodes may share one."""
    out = {n: int(ident["partition-id"]) for n, ident in identities.items()}
    dup = len(set(out.values())) != len(out)
    if dup:
        raise FederationError(
            f"two nodes claim the same partition-id: {sorted(out.values())}; "
            "give each SuperNode its own --node-config partition-id"
        )
    return out


def answered(messages: list[Message], replies) -> list[tuple[int, Message]]:
    """(index of the message it answers, reply), in message order. Matched by
    `reply_to_message_id`, which Flower's grids set on every reply: an error reply that the
    SuperLink makes for an unavailable node comes from the SuperLink's own node id, not from
    the node it was sent to, so `src_node_id` cannot tell which silo it is about."""
    index = {m.metadata.message_id: i for i, m in enumerate(messages) if m.metadata.message_id}
    dst = {m.metadata.dst_node_id: i for i, m in enumerate(messages)}
    out = []
    for rep in replies:
        i = index.get(rep.metadata.reply_to_message_id, dst.get(rep.metadata.src_node_id))
        if i is not None:
            out.append((i, rep))
    return sorted(out, key=lambda x: x[0])


def refresh_partitions(
    grid: Grid, partitions: dict[int, int], wait_s: float, retired: set[int], ask_new: bool = True
) -> dict[int, int]:
    """node id -> partition, checked against the connected nodes (call it every round): a node
    that left is dropped, and (`ask_new`) a new one is asked who it is (`identify`: a restarted
    SuperNode comes back with a new id). A federation too large to ask everyone passes
    `ask_new=False` and asks the nodes it samples instead. Updates `partitions` in place."""
    online = set(grid.get_node_ids()) - retired
    for gone in set(partitions) - online:
        log(
            WARNING,
            "[fedembodied] node %d (partition %d) left the federation",
            gone,
            partitions.pop(gone),
        )
    new = sorted(online - set(partitions))
    if new and ask_new:
        identify(grid, new, partitions, wait_s, retired)
    return partitions


def identify(
    grid: Grid,
    nodes: list[int],
    partitions: dict[int, int],
    wait_s: float,
    retired: set[int],
    start_s: float = START_S,
) -> dict[int, int]:
    """Ask `nodes` (not yet in `partitions`) their partition and add them (`adopt`). A node
    that does not answer is left out (logged), not fatal. Updates both in place."""
    try:
        found = query_partitions(grid, nodes, wait_s, start_s)
    except FederationError as e:
        log(WARNING, "[fedembodied] new nodes %s not used: %s", nodes, e)
        found = {}
    return adopt(found, partitions, retired)


def adopt(found: dict[int, int], partitions: dict[int, int], retired: set[int]) -> dict[int, int]:
    """Add what nodes said they hold (node id -> partition) to `partitions`. When two nodes
    claim one partition the newest wins and the log says which node to stop; the node it
    replaced goes into `retired` and is not used again (else the two would take turns).
    Updates both in place."""
    for node, part in found.items():
        for old in [n for n, q in partitions.items() if q == part and n != node]:
            log(
                WARNING,
                "[fedembodied] node %d now holds partition %d; node %d, which "
                "held it, is no longer used (stop it)",
                node,
                part,
                old,
            )
            del partitions[old]
            retired.add(old)
        partitions[node] = part
    return partitions


def wait_for_return(
    grid: Grid,
    partitions: dict[int, int],
    wanted: set[int],
    wait_s: float,
    retired: set[int],
    poll_s: float = 2.0,
) -> dict[int, int]:
    """When no online node holds any of the `wanted` partitions (every node of a round is
    offline: a missed heartbeat, a restart, a network cut), wait up to `wait_s` for them to come
    back, refreshing who holds what, with a log line naming whom it waits for. Without this a
    run whose nodes vanished spent its `max-empty-rounds` in milliseconds and failed, while the
    nodes were back a minute later (issue 42). Returns `partitions` (updated in place)."""
    if not wanted or set(partitions.values()) & wanted:
        return partitions
    deadline = time.monotonic() + wait_s
    log(
        WARNING,
        "[fedembodied] no online node holds partition(s) %s: waiting up to %.0f s for them "
        "(run config 'node-return-timeout')",
        sorted(wanted),
        wait_s,
    )
    while time.monotonic() < deadline:
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        refresh_partitions(grid, partitions, min(wait_s, 30.0), retired)
        back = sorted(set(partitions.values()) & wanted)
        if back:
            log(INFO, "[fedembodied] partition(s) %s back online; the round goes on", back)
            return partitions
    log(
        WARNING,
        "[fedembodied] partition(s) %s still offline after %.0f s; the round goes on without them",
        sorted(wanted),
        wait_s,
    )
    return partitions
