"""A study's training processes end with the study (a killed study left its runs going). A
study launches each run as a child process (experiments.simulate.run_child); if the study is
killed by a signal it cannot catch (SIGKILL, an out-of-memory kill, a scheduler's SIGTERM to
it alone), nothing told the child: it trained on, orphaned, with its SuperLink and Ray, on a
shared machine's cores, and the study's rerun was refused by the run's folder lock
(server/run_lock.py) until it ended, hours later for a FedVLN stage; a centralized run, which
has no lock, wrote beside the rerun.

So the study names itself in the child's environment, and the child asks Linux to send it
SIGTERM when that parent dies (prctl PR_SET_PDEATHSIG); simulation.py turns SIGTERM into its
clean-up of the SuperLink and Ray, which no second signal cuts short. Only a child started so:
a run typed in a shell, or `nohup`ed by the user, must outlive the shell. Processes that are
not ours (a benchmark's SuperLink and SuperNodes) are tied with `tie_to_me` before their exec.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading

PARENT = "FEDEMBODIED_STOP_WITH_PARENT"  # the pid of the study that launched this run
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CLEAN_UP_S = 120.0  # how long a run may take to stop its SuperLink and Ray when told to


def child_env() -> dict[str, str]:
    """The environment of a run launched by this process, which stops when this process dies."""
    return {**os.environ, PARENT: str(os.getpid())}


def stop_with_parent() -> None:
    """Called first thing in a run's main: SIGTERM to this process when the study that launched
    it dies (at once if it already has). Not inherited by what this run starts in turn."""
    parent = os.environ.pop(PARENT, "")
    if parent:
        die_with(int(parent))


def die_with(parent: int, sig: int = signal.SIGTERM) -> None:
    """`sig` to this process when `parent`, the process that started it, dies; at once if it
    already has. SIGKILL for a study's worker processes (experiments.simulate.in_parallel): a
    worker catches what its cell raises, SystemExit included, and would go on to the next
    cell; what it started is tied to it in turn."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, sig) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), sig)


def tie_to_me():
    """A `preexec_fn` for a process that is not ours and cannot call `stop_with_parent` (a
    benchmark's Flower SuperLink or SuperNode): SIGTERM to it when this process dies."""
    return functools.partial(die_with, os.getpid())


def wait_stopping(proc: subprocess.Popen) -> int:
    """Wait for a run; if this process is interrupted meanwhile (Ctrl-C, which the run got too
    when it shares the terminal), tell the run to stop and give it CLEAN_UP_S to do so before
    the interrupt goes on (subprocess.run gives it 0.25 s, then SIGKILLs it mid clean-up,
    leaving its SuperLink and Ray)."""
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=CLEAN_UP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise


@contextlib.contextmanager
def undisturbed():
    """A clean-up that runs to its end: a second signal (a process group's SIGTERM, then the
    dying study's; a second Ctrl-C) cut simulation.py's and left the SuperLink and Ray running.
    The signals are ignored meanwhile, in the main thread only (where Python handles them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: a handler set outside Python, which we cannot restore
                signal.signal(sig, handler)
