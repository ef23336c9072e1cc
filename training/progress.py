"""Progress lines from inside a long call: local training, evaluation, FedRL's episodes.

A FedVLN round trains each sampled house for minutes and scores every house after it; without
these lines the launcher shows nothing in between. They go to Flower's logger ("flwr", by
name: no flwr import, so training code may use them) with the `[fedembodied]` tag that
simulation.py shows (it turns on Ray's log-to-driver, so ClientApp output reaches `flwr log`),
and into a deployed SuperNode's or SuperLink's own log.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from logging import INFO

log = logging.getLogger("flwr").log


class StepLog:
    """A callback per step (training/vln_loop.train_steps' `progress`, FedRL's evaluation
    steps): one line at most every `every_s` seconds and one at the last step, with the step
    count (and the last loss, when given)."""

    def __init__(self, what: str, total: int, every_s: float = 10.0):
        self.what, self.total, self.every_s = what, total, every_s
        self.k, self.t0 = 0, time.perf_counter()
        self.last = self.t0

    def __call__(self, loss: float | None = None) -> None:
        self.k += 1
        now = time.perf_counter()
        if now - self.last >= self.every_s or self.k == self.total:
            self.last = now
            tail = "" if loss is None else f", loss {loss:.3f}"
            log(
                INFO,
                "[fedembodied] %s: step %d/%d%s, %.0f s",
                self.what,
                self.k,
                self.total,
                tail,
                now - self.t0,
            )


@contextmanager
def timed(what: str):
    """Log `what` at its start and, if it ends without an error, with its duration."""
    t0 = time.perf_counter()
    log(INFO, "[fedembodied] %s ...", what)
    yield
    log(INFO, "[fedembodied] %s: done in %.1f s", what, time.perf_counter() - t0)
