"""One run per results folder: a second run with the same out-dir is refused, naming the first.

Why (issue 42): two runs given one out-dir both completed, the last writer silently replaced
the other's rounds.csv and clients.csv, and both used one state folder on every node (a node's
state folder is named after the out-dir, clients/state_store.py). The ServerApp holds an
exclusive `flock` on `<out-dir>/.run.lock` for the whole run; the kernel drops it when the
process ends, crashed or not, so a stale lock never blocks a resume.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

from config.schema import ConfigError
from contracts.safe_files import open_lock, unsafe_folder

LOCK = ".run.lock"


@contextlib.contextmanager
def holding(out: Path, run_id: int = 0):
    """Hold out-dir's lock while the body runs; ConfigError naming the holder if another run
    has it."""
    problem = unsafe_folder(out)
    if problem:
        raise ConfigError(f"run config 'out-dir' {out}: {problem}")
    out.mkdir(parents=True, exist_ok=True)
    try:
        f = open_lock(out / LOCK)
    except OSError as e:  # ELOOP: a link planted where the lock goes (never followed)
        raise ConfigError(
            f"run config 'out-dir' {out}: cannot open its lock {LOCK} ({e.strerror}); a "
            "symbolic link there is refused, never followed"
        ) from None
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            who = f.read().strip() or "another run"
            raise ConfigError(
                f"run config 'out-dir' {out} is in use by {who}: give this run another "
                "out-dir, or wait for that one to end"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(
            f"run {run_id} (pid {os.getpid()} on {socket.gethostname()}, since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n"
        )
        f.flush()
        yield
    finally:
        f.close()  # releases the lock
