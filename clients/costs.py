"""Where a message's time goes on the node (issue 43), recorded with each reply in the node's
audit log: how old the process was when the handler was called (in deployment, a fresh
`flwr-clientapp` process per message: its start and imports), the handler's time, and the
phases a handler names inside it (`rebuild`: what it re-creates from the run config and the
message's context; `work`: the method's own step). `experiments/bench/message_cost.py` reads them."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

_PHASES: dict[str, float] = {}


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where that cannot be read."""
    try:
        stat = open("/proc/self/stat").read()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


@contextmanager
def phase(name: str):
    """Time a named part of the message being handled (summed if entered twice)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _PHASES[name] = _PHASES.get(name, 0.0) + time.perf_counter() - start


@contextmanager
def message():
    """Around one message's handling: yields the dict that, on exit, holds its costs (s)."""
    _PHASES.clear()
    age, start, out = process_age_s(), time.perf_counter(), {}
    try:
        yield out
    finally:
        out.update(
            {"process_age_s": None if age is None else round(age, 3)}
            | {"handler_s": round(time.perf_counter() - start, 4)}
            | {f"{k}_s": round(v, 4) for k, v in _PHASES.items()}
        )
