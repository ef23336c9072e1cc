"""Round timeouts that fit the work: a hung client costs a few normal rounds, not an hour.

`AdaptiveTimeout` wraps the ServerApp's Grid. Every send_and_receive is timed; once a kind of
exchange (message type, plus the FedRL/FedVLN `step` it carries) has completed with every reply
in time, later exchanges of that kind wait at most `factor` x the slowest such complete exchange
seen, but never less than `floor_s` and never more than the timeout the caller asked for (the
run config's `round-timeout`, the ceiling and the first round's limit). An exchange that lost
replies to the timeout does not feed the estimate, so a hung client cannot stretch it.
Set `timeout-factor = 0` to keep the fixed `round-timeout`.

It also waits for replies itself (`exchange`): push, then pull every `REPLY_POLL_S`. Flower
1.41's grid in the deployment engine sleeps 3 s between pulls (`flwr/superlink/grid/
http_grid.py`, `send_and_receive`), which a chain of messages (FedRL) pays at every step; its
in-memory grid (simulation) pulls every 0.1 s, as we do, so simulated runs wait as before.
"""

from __future__ import annotations

import time
from logging import INFO

from flwr.common import log

from contracts.messages import CHAIN_ROUND

REPLY_POLL_S = 0.1  # the simulation engine's InMemoryGrid pull_interval


def arrivals(grid, messages: list, still_waiting, timeout: float | None):
    """The replies to `messages`, each as it arrives, while `still_waiting()`: pushed through
    the grid's own push_messages, pulled every REPLY_POLL_S (a grid without them, such as
    launch/in_process.py's, answers through its own send_and_receive within `timeout`)."""
    if not (hasattr(grid, "push_messages") and hasattr(grid, "pull_messages")):
        yield from grid.send_and_receive(messages, timeout=timeout)
        return
    waiting = set(grid.push_messages(messages))
    while waiting and still_waiting():
        for rep in grid.pull_messages(waiting):
            waiting.discard(rep.metadata.reply_to_message_id)
            yield rep
        if waiting:
            time.sleep(REPLY_POLL_S)


def exchange(grid, messages: list, timeout: float | None) -> list:
    """Flower's send_and_receive, pulling every REPLY_POLL_S (`arrivals`) until every reply
    came or `timeout` passed."""
    end = time.monotonic() + (timeout or 0.0)
    return list(
        arrivals(grid, messages, lambda: timeout is None or time.monotonic() < end, timeout)
    )


def _kind(messages) -> str:
    """What an exchange is timed as: its message type and step; a chained round's exchange
    (FedVLN's speaker-round = "chain": one house at a time) also by its house, since houses
    differ in how long they train and one house's time says nothing of another's."""
    msg = messages[0]
    config = msg.content.config_records.get("config")
    step = config.get("step", "") if config is not None else ""
    chained = config is not None and CHAIN_ROUND in config and len(messages) == 1
    house = f"/node{msg.metadata.dst_node_id}" if chained else ""
    return f"{msg.metadata.message_type}/{step}{house}"


class AdaptiveTimeout:
    """A Grid whose send_and_receive shortens the caller's timeout to what the work needs."""

    def __init__(self, grid, factor: float, floor_s: float):
        self.grid, self.factor, self.floor_s = grid, factor, floor_s
        self.slowest: dict[str, float] = {}  # kind -> slowest complete exchange (s)

    def __getattr__(self, name):  # every other Grid method goes straight through
        return getattr(self.grid, name)

    def limit(self, kind: str, asked: float | None) -> float | None:
        if self.factor <= 0 or kind not in self.slowest:
            return asked
        fit = max(self.floor_s, self.factor * self.slowest[kind])
        return fit if asked is None else min(asked, fit)

    def send_and_receive(self, messages, *, timeout: float | None = None):
        messages = list(messages)
        if not messages:
            return []
        kind = _kind(messages)
        limit = self.limit(kind, timeout)
        t0 = time.monotonic()
        replies = exchange(self.grid, messages, limit)
        took = time.monotonic() - t0
        if len(replies) >= len(messages):
            self.slowest[kind] = max(self.slowest.get(kind, 0.0), took)
        else:
            log(
                INFO,
                "[fedembodied] %d of %d %s replies missing after %.1f s (timeout %.1f s)",
                len(messages) - len(replies),
                len(messages),
                kind,
                took,
                limit or -1,
            )
        return replies
