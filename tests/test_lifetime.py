"""A run a study launches ends with the study (launch/lifetime.py); a run launched any other
way outlives its parent (a user's `nohup` must keep working)."""

import os
import signal
import subprocess
import time

from tests.conftest import PYTHON, ROOT, run_tokens_alive

CHILD = (
    "import os, sys, time; from launch.lifetime import stop_with_parent; stop_with_parent(); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # an unreaped zombie is dead
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _child_of_killed_parent(tmp_path, launch: str) -> int:
    """A parent that starts CHILD `launch`'s way, SIGKILLed once the child runs: the child's
    pid, a few seconds after."""
    marker = tmp_path / "child.pid"
    code = f"import subprocess, sys; from experiments.simulate import run_child; {launch}"
    parent = subprocess.Popen([PYTHON, "-c", code, CHILD, str(marker)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (marker.is_file() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(marker.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    return pid


def test_a_run_a_study_launched_ends_when_the_study_is_killed(tmp_path):
    pid = _child_of_killed_parent(tmp_path, "run_child([sys.executable, '-c', *sys.argv[1:]])")
    assert not _alive(pid)


def test_a_run_launched_otherwise_outlives_its_parent(tmp_path):
    pid = _child_of_killed_parent(tmp_path, "subprocess.run([sys.executable, '-c', *sys.argv[1:]])")
    try:
        assert _alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_run_whose_study_died_before_it_started_stops_at_once(tmp_path):
    """The parent named in the environment is gone (it died between the launch and the run's
    first line): the run stops instead of training orphaned."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    env = {**os.environ, "FEDEMBODIED_STOP_WITH_PARENT": str(gone.pid)}
    code = "from launch.lifetime import stop_with_parent; stop_with_parent(); import time; time.sleep(60)"
    res = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, timeout=30)
    assert res.returncode == -signal.SIGTERM


def test_a_study_worker_that_trains_in_process_ends_when_the_study_is_killed(tmp_path):
    """A function study's cells run in worker processes (experiments.simulate.in_parallel) that
    may train for hours in-process (the pipeline's centralized stages, the oracle): they end
    with the study too, even a cell that turns SIGTERM into SystemExit (a review found such a
    worker went on to the next queued cell, orphaned). Four cells on two workers: none of the
    queued two starts."""
    code = (
        "import os, signal, sys, time\n"
        "from experiments.simulate import in_parallel\n"
        "def work(k):\n"
        "    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as loopback's cells do\n"
        "    open(os.path.join(sys.argv[1], f'w{k}'), 'w').write(str(os.getpid()))\n"
        "    time.sleep(120)\n"
        "in_parallel(work, [0, 1, 2, 3], 2, 'test', processes=True)\n"
    )
    study = subprocess.Popen([PYTHON, "-c", code, str(tmp_path)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while len([f for f in tmp_path.glob("w*") if f.read_text()]) < 2:
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.1)
    pids = [int(f.read_text()) for f in tmp_path.glob("w*")]
    study.send_signal(signal.SIGKILL)
    study.wait(timeout=10)
    for _ in range(50):
        if not any(_alive(p) for p in pids):
            break
        time.sleep(0.1)
    time.sleep(1)
    try:
        assert not any(_alive(p) for p in pids)
        assert sorted(f.name for f in tmp_path.glob("w*")) == ["w0", "w1"]
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_a_run_stopped_while_its_superlink_starts_leaves_no_superlink(monkeypatch):
    """SIGTERM (a study's end) or Ctrl-C in the seconds the SuperLink takes to listen: the
    SuperLink, in its own session, outlived the launcher, since nothing had it to stop yet."""
    import uuid

    import pytest

    from launch import superlink

    def interrupted(self):
        time.sleep(1)
        raise KeyboardInterrupt

    token = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv("FEDEMBODIED_RUN_TOKEN", token)
    monkeypatch.setattr(superlink.LocalSuperLink, "_wait_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        superlink.LocalSuperLink()
    assert run_tokens_alive(token) == []


def test_an_interrupted_study_lets_its_run_finish_its_clean_up(tmp_path):
    """Ctrl-C (or SIGINT/SIGTERM raised in the study while it waits): the run is told to stop
    and given time to stop its SuperLink and Ray; subprocess.run gave it 0.25 s and then
    SIGKILLed it in the middle of that."""
    marker = tmp_path / "cleaned"
    child = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(1.5)  # a clean-up that takes a while\n"
        f"    open({str(marker)!r}, 'w').write('done')\n"
        "    sys.exit(130)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(tmp_path / 'up')!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    study = subprocess.Popen(
        # SIGINT re-armed: a test run from a background job inherits it ignored
        [PYTHON, "-c", "import signal, sys; from experiments.simulate import run_child; "
         "signal.signal(signal.SIGINT, signal.default_int_handler); "
         "run_child([sys.executable, '-c', sys.argv[1]])", child],
        cwd=ROOT, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "up").exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    study.send_signal(signal.SIGINT)  # the study alone: it tells the run
    study.wait(timeout=30)
    assert marker.read_text() == "done"


def test_a_clean_up_is_not_cut_by_a_second_signal():
    """A process group's SIGTERM reaches simulation.py, then the dying study's (PR_SET_PDEATHSIG)
    a moment later; the second interrupted the clean-up and left the SuperLink running."""
    from launch.lifetime import STOP_SIGNALS, undisturbed

    before = [signal.getsignal(s) for s in STOP_SIGNALS]
    with undisturbed():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    assert [signal.getsignal(s) for s in STOP_SIGNALS] == before


def test_runs_side_by_side_under_one_callers_token_are_cleaned_up_apart(monkeypatch):
    """A study started with FEDEMBODIED_RUN_TOKEN set hands it to every run: each run's own
    token extends it, so one run's clean-up (`processes_with_token(its token)`) finds its own
    processes and not its sibling's, while the caller's token still finds both; a token that
    merely starts with the same letters is someone else's."""
    import uuid

    from launch.superlink import processes_with_token, run_token

    caller = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv("FEDEMBODIED_RUN_TOKEN", caller)
    first, second = run_token(), run_token()
    assert first != second and first.startswith(caller + ".")
    procs = {
        t: subprocess.Popen(["sleep", "60"], env={**os.environ, "FEDEMBODIED_RUN_TOKEN": t})
        for t in (first, second, caller + "x")
    }
    try:
        assert processes_with_token(first) == [procs[first].pid]
        assert sorted(processes_with_token(caller)) == sorted([procs[first].pid, procs[second].pid])
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
