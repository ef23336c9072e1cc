"""Round timeouts that fit the work: a hung client costs a few normal rounds, not an hour.

`AdaptiveTimeout` wraps the ServerApp's Grid. Every send_and_receive is timed; once a kind of
exchange (message type, plus the FedRL/FedVLN `step` it carries) has completed with every reply
in time, later exchanges of that kind wait at most `factor` x the slowest such complete exchange
seen, but never less than `floor_s` and never more than the timeout the caller asked for (the
run config's `round-timeout`, the ceiling and the first round's limit). An exchange that lost
replies to the timeout does not feed the estimate, so a hung client cannot stretch it.
Set `timeout-factor = 0` to keep the fixed `round-timeout`.
"""

from __future__ import annotations

import time
from logging import INFO

from flwr.common import log


def _kind(messages) -> str:
    msg = messages[0]
    config = msg.content.config_records.get("config")
    step = config.get("step", "") if config is not None else ""
    return f"{msg.metadata.message_type}/{step}"


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
        replies = list(self.grid.send_and_receive(messages, timeout=limit))
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
