"""A study's training process ends with the study (a killed study left its runs going). A
study launches each run as a child process (experiments.simulate.run_child); if the study is
killed by a signal it cannot catch (SIGKILL, an out-of-memory kill, a scheduler's SIGTERM to
it alone), nothing told the child: it trained on, orphaned, with its SuperLink and Ray, on a
shared machine's cores, and the study's rerun was refused by the run's folder lock
(server/run_lock.py) until it ended, hours later for a FedVLN stage; a centralized run, which
has no lock, wrote beside the rerun.

So the study names itself in the child's environment, and the child asks Linux to send it
SIGTERM when that parent dies (prctl PR_SET_PDEATHSIG); simulation.py turns SIGTERM into its
clean-up of the SuperLink and Ray. Only a child started so: a run typed in a shell, or
`nohup`ed by the user, must outlive the shell.
"""

from __future__ import annotations

import os
import signal
import sys

PARENT = "FEDEMBODIED_STOP_WITH_PARENT"  # the pid of the study that launched this run


def child_env() -> dict[str, str]:
    """The environment of a run launched by this process, which stops when this process dies."""
    return {**os.environ, PARENT: str(os.getpid())}


def stop_with_parent() -> None:
    """Called first thing in a run's main: SIGTERM to this process when the study that launched
    it dies (at once if it already has). Not inherited by what this run starts in turn."""
    parent = os.environ.pop(PARENT, "")
    if parent:
        die_with(int(parent))


def die_with(parent: int) -> None:
    """SIGTERM to this process when `parent`, the process that started it, dies; at once if it
    already has. Also a study's worker processes' initializer (experiments.simulate.in_parallel),
    for what they train in-process."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)
