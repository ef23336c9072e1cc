"""torch's process-wide random generator, lent to one owner at a time.

Why: torch draws a module's initial weights and every dropout mask from one global generator
per process. One process may run several parties' or silos' code at once in threads (the
tests' in-process grid, a call that hung and wakes up after its test moved on, a Ray actor
shared by nodes). Interleaved draws made a run's numbers depend on timing: a resumed run
stopped matching the uninterrupted one whenever a woken thread trained beside it (issue 34).

`owned(seed)` lends the generator to one owner: it takes a process-wide lock, seeds the
generator, runs the owner's code, and puts back the state it found. The owner's draws are then
a pure function of its seed (exactly the draws `torch.manual_seed(seed)` gave before, so
results are unchanged), and nobody else's stream moves. Every module in models/ is built
holding the lock (`@builds_holding_the_generator` on its __init__): a server or a client that
builds a model whose weights it then loads over draws too, and those draws must never land in
the middle of another owner's stream.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

_LOCK = threading.RLock()  # re-entrant: an owner may build a module inside its own block


def stream_seed(run_seed: int, partition: int, server_round: int) -> int:
    """The seed of one client's torch stream in one round (silo, house or party): distinct per
    partition and round, the same in every process, so a retried or resumed call redraws it."""
    return run_seed * 7919 + partition * 31 + server_round


@contextmanager
def owned(seed: int | None = None) -> Iterator[None]:
    """Hold torch's global generator for the block; seeded (then restored) when `seed` given;
    without a seed, only held (draws that do not matter, e.g. weights loaded over next)."""
    with _LOCK:
        if seed is None:
            yield
            return
        # CPU state restored; torch.manual_seed also seeds CUDA's (not restored: GPU runs
        # here are one node per process, where nothing else draws)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield


def builds_holding_the_generator(init: Callable) -> Callable:
    """For a module's __init__: its weight draws happen holding the generator (see above)."""

    @functools.wraps(init)
    def wrapped(*args, **kwargs):
        with owned():
            init(*args, **kwargs)

    return wrapped
