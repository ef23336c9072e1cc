"""deploy/supervise.py with stand-in nodes (small shell scripts): restarts a node that exits or
prints a give-up line, leaves alone a node with a configuration error, and on SIGTERM stops
the node and the children it started."""

import os
import signal
import subprocess
import sys
import time

from tests.conftest import ROOT

SUPERVISE = [sys.executable, str(ROOT / "deploy/supervise.py")]


def supervise(tmp_path, script: str, *flags: str) -> subprocess.Popen:
    node = tmp_path / "node.sh"
    node.write_text(script)
    return subprocess.Popen(
        [*SUPERVISE, *flags, "--", "bash", str(node)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )


def starts(tmp_path) -> int:
    path = tmp_path / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_until(predicate, timeout=20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_node_that_exits_or_gives_up_is_started_again(tmp_path):
    # first start: prints Flower's give-up line and idles (alive, silent); then exits 1
    script = (
        "echo start >> starts\n"
        'if [ "$(wc -l < starts)" = 1 ]; then echo "ERROR: SSL/TLS handshake error detected."; '
        "sleep 60; fi\nexit 1\n"
    )
    p = supervise(tmp_path, script)
    try:
        wait_until(lambda: starts(tmp_path) >= 3)  # 1 s then 2 s back-off
    finally:
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=30)[0]
    assert "node.sh gave up on the SuperLink" in out
    assert "node.sh stopped (exit 1); starting it again in" in out
    assert p.returncode == 128 + signal.SIGTERM


def test_a_configuration_error_is_not_restarted(tmp_path):
    p = supervise(tmp_path, "echo start >> starts\nexit 302\n")
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 302 % 256 and starts(tmp_path) == 1  # Flower's code, as a status
    assert "configuration error: not restarting" in out


def test_sigterm_stops_the_node_and_its_children(tmp_path):
    # the node starts a child that ignores its parent's end, as flwr-clientapp could
    script = "sleep 300 &\necho $! > child\necho start >> starts\nwait\n"
    p = supervise(tmp_path, script)
    wait_until(lambda: (tmp_path / "child").exists() and (tmp_path / "child").read_text().strip())
    child = int((tmp_path / "child").read_text())
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=30)
    wait_until(lambda: not _alive(child), timeout=10)
    assert starts(tmp_path) == 1  # stopped, not restarted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for our purpose
        return f.read().split()[2] != "Z"
