"""deploy/warm_start.py: a node's warm parent forks each message's ClientApp process (issue 63).
Driven through the node's real gate script (deploy/gate/flwr-clientapp) with Flower's own
`flwr-clientapp --help` and a bad flag, which exercise the whole path without a SuperNode."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
import warm_start  # noqa: E402

GATE = ROOT / "deploy" / "gate" / "flwr-clientapp"


def _gate(args, env):
    t0 = time.perf_counter()
    out = subprocess.run([str(GATE), *args], env=env, capture_output=True, text=True, timeout=120)
    return out, time.perf_counter() - t0


def _parents(sock):
    ps = subprocess.run(
        ["pgrep", "-f", f"warm_start.py serve {sock}"], capture_output=True, text=True
    )
    return [int(p) for p in ps.stdout.split()]


@pytest.fixture
def short_tmp():
    """A short folder: a unix socket's path is at most 107 bytes, and pytest's tmp_path under
    xdist is longer than that with the socket's name."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix="ws", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def warm_env(short_tmp):
    env = {
        **os.environ,
        "FEDEMBODIED_WARM_DIR": str(short_tmp / "warm"),
        "FEDEMBODIED_WARM_START": "1",
    }
    yield env
    for pid in _parents(short_tmp / "warm"):
        os.kill(pid, signal.SIGTERM)


def test_a_message_is_forked_by_the_warm_parent_with_its_output_and_exit_status(
    warm_env, short_tmp
):
    tmp_path = short_tmp
    cold, _ = _gate(["--help"], warm_env)  # no parent yet: run cold, start one
    assert cold.returncode == 0 and "usage: flwr-clientapp" in cold.stdout
    deadline = time.monotonic() + 60
    while not list((tmp_path / "warm").glob("warm-*.sock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (sock,) = (tmp_path / "warm").glob("warm-*.sock")
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "warm").stat().st_mode & 0o777) == "0o700"
    (parent,) = _parents(sock)
    warm, took = _gate(["--help"], warm_env)
    assert warm.returncode == 0 and "usage: flwr-clientapp" in warm.stdout  # the child's stdout
    for junk in (b"", b"\x00\x00\x00\x05{not", b"\xff" * 9):  # dropped, never fatal to the parent
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(sock))
            c.sendall(junk)
    bad, _ = _gate(["--no-such-flag"], warm_env)
    assert bad.returncode == 2 and "flwr-clientapp: error" in bad.stderr  # its exit, its stderr
    assert _parents(sock) == [parent]  # served by the one parent, still there
    assert took < 1.5, took  # no Flower or torch import in the message's own start


def test_another_environment_gets_another_parent(monkeypatch, tmp_path):
    """A node restarted with other approved FABs (or another state folder) must not be served
    by the parent of its old settings: the socket is named by the whole environment."""
    monkeypatch.setenv("FEDEMBODIED_APPROVED_FABS", "a" * 64)
    one = warm_start.socket_path(str(tmp_path))
    monkeypatch.setenv("FEDEMBODIED_APPROVED_FABS", "b" * 64)
    assert warm_start.socket_path(str(tmp_path)) != one


def test_a_directory_others_can_open_is_not_used(tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    assert warm_start.run_warm(d / "warm-x.sock", ["--help"]) is None  # the message runs cold
    assert not warm_start.private_dir(d / "warm-x.sock")


def test_the_parent_exits_with_the_superexec_it_serves(warm_env, short_tmp):
    tmp_path = short_tmp
    """A node stopped (its SuperExec gone) leaves no warm parent behind: the parent watches the
    `--parent-pid` Flower passes every ClientApp and exits once it is gone."""
    superexec = subprocess.Popen(["sleep", "3"])
    _gate(["--help"], warm_env)  # cold; starts the parent
    deadline = time.monotonic() + 60
    while not list((tmp_path / "warm").glob("warm-*.sock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (sock,) = (tmp_path / "warm").glob("warm-*.sock")
    out, _ = _gate(["--help", "--parent-pid", str(superexec.pid)], warm_env)
    assert out.returncode == 0 and _parents(sock)
    superexec.wait()
    deadline = time.monotonic() + 10
    while _parents(sock) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _parents(sock) and not sock.exists()


def test_a_parent_started_by_a_cold_message_exits_with_its_node_before_serving(warm_env, short_tmp):
    """The gate that finds no parent runs its message cold and starts one; that parent is
    told the node's SuperExec at once. A node stopped before the parent served anything (a
    SuperNode killed and restarted: tests/test_deployment.py left one idling 30 min) leaves
    no parent behind."""
    superexec = subprocess.Popen(["sleep", "120"])
    out, _ = _gate(["--help", "--parent-pid", str(superexec.pid)], warm_env)  # cold
    assert out.returncode == 0
    deadline = time.monotonic() + 60
    while not list((short_tmp / "warm").glob("warm-*.sock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (sock,) = (short_tmp / "warm").glob("warm-*.sock")
    assert _parents(sock)
    superexec.kill()  # the node stops
    superexec.wait()
    deadline = time.monotonic() + 10
    while _parents(sock) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _parents(sock) and not sock.exists()


def test_a_child_that_ignores_sigterm_gets_sigkill_after_its_grace():
    """A message's process whose gate was killed gets SIGTERM; one that ignores it (stuck in a
    C call, or a handler that waits) would hold the node forever. After KILL_GRACE_S the
    parent sends SIGKILL, once; a child still in its grace is left alone."""
    stubborn = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert stubborn.stdout.readline()  # its handler is set
    stubborn.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert stubborn.poll() is None  # SIGTERM alone does not end it
    now = time.monotonic()
    killed = {stubborn.pid: now + warm_start.KILL_GRACE_S}
    warm_start.escalate(killed, now)  # within its grace: left alone
    time.sleep(0.3)
    assert stubborn.poll() is None
    warm_start.escalate(killed, now + warm_start.KILL_GRACE_S)
    assert stubborn.wait(timeout=10) == -signal.SIGKILL
    assert killed[stubborn.pid] == float("inf")  # not signalled again


def test_a_message_still_running_when_its_node_is_gone_is_stopped():
    """A SuperNode killed mid-message left its ClientApp blocked in a call to the dead
    SuperExec (deaf to Flower's SIGINT), and the warm parent waiting for it, for good: the
    parent now stops its children once the node is gone (SIGTERM, SIGKILL after the grace),
    and leaves them alone while it is alive."""
    stuck = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert stuck.stdout.readline()
    node = subprocess.Popen(["sleep", "60"])
    children, killed, now = {stuck.pid: None}, {}, time.monotonic()
    warm_start.stop_orphans(children, killed, node.pid, now)  # the node is alive
    assert killed == {}
    node.kill()
    node.wait()
    warm_start.stop_orphans(children, killed, node.pid, now)
    assert killed == {stuck.pid: now + warm_start.KILL_GRACE_S}
    warm_start.escalate(killed, now + warm_start.KILL_GRACE_S)
    assert stuck.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.parametrize(
    "handler", ["fedrl_client", "driving_client", "cdl_client", "fedvln_client"]
)
def test_a_message_imports_no_analysis_library(handler):
    """Every deployed message is a fresh process that imports the app (the warm parent never
    imports the app's code): pandas alone was 0.36 s of each FedVLN message (for a type
    annotation), gensim seconds of each Text2Action one. Analysis libraries stay out of the
    handlers' imports."""
    code = (f"import sys, clients.app, clients.{handler}; "
            "print([m for m in ('pandas', 'matplotlib', 'gensim') if m in sys.modules])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"
