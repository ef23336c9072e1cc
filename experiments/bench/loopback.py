"""A federation of the real deploy/ scripts (SuperLink + edge + Fleet gateway, SuperNodes, the
flwr CLI) on one machine, on loopback or inside network namespaces: for the deployment tests
and for the experiments that time deployed runs (experiments/bench/message_cost.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from launch.lifetime import tie_to_me

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
# the venv these tests run in, wherever it is (the deploy scripts default to the repo's .venv)
ENV = {**os.environ, "VENV": str(BIN.parent)}


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports, each socket held until all are picked: two free_port() calls
    in a row returned one port twice (the lane's netns test, 2026-12-05: superlink.sh refused
    a --control-port equal to --port)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def wait_listening(host: str, port: int, timeout: float = 60, prefix=()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = subprocess.run(
            [
                *prefix,
                str(PYTHON),
                "-c",
                f"import socket; socket.create_connection(('{host}', {port}), 1)",
            ],
            capture_output=True,
        )
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on {host}:{port}")


def unwind_on_sigterm() -> None:
    """A script stopped with SIGTERM (`timeout`, `kill`) unwinds instead of dying at once, so the
    `close()` in its `finally` runs: its SuperLink and SuperNodes do not live on after it."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


class Federation:
    """Processes started in their own sessions under `tmp`, all killed by `close()`."""

    def __init__(self, tmp: Path, prefix: dict[str, list[str]] | None = None):
        self.tmp, self.procs, self.prefix = tmp, {}, prefix or {}

    def start(
        self, name: str, args: list[str], where: str = "", env: dict | None = None
    ) -> subprocess.Popen:
        """`env`: more environment for this process (e.g. a node's own XDG_STATE_HOME)."""
        log = open(self.tmp / f"{name}.log", "a")
        p = subprocess.Popen(
            [*self.prefix.get(where, []), *args],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=tie_to_me(),  # ends with the script or study (launch/lifetime.py)
            env={**ENV, "FLWR_HOME": str(self.tmp / name.split("#")[0]), **(env or {})},
        )
        self.procs[name] = p
        return p

    def kill(self, name: str, sig=signal.SIGKILL) -> None:
        p = self.procs.pop(name)
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)

    def cli(self, *args: str, where: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.prefix.get(where, []), str(BIN / "flwr"), *args],
            cwd=ROOT,
            env={**ENV, "FLWR_HOME": str(self.tmp / "cli")},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def connect(self, name: str, address: str, ca: str = "") -> None:
        subprocess.run(
            [str(ROOT / "deploy/connection.sh"), name, address, *([ca] if ca else [])],
            env={**ENV, "FLWR_HOME": str(self.tmp / "cli")},
            check=True,
            capture_output=True,
        )

    def status(self, connection: str, run_id: int, where: str = "") -> str:
        """The run's status, or "" while the SuperLink does not answer."""
        ls = self.cli("ls", connection, "--run-id", str(run_id), "--format", "json", where=where)
        try:
            return json.loads(ls.stdout)["runs"][0]["status"]
        except (ValueError, KeyError, IndexError):
            return ""

    def wait_finished(
        self,
        connection: str,
        run_id: int,
        timeout: float,
        what: str = "the run",
        where: str = "",
        progress=None,
    ) -> str:
        """Wait for the run to finish and return its status. Each poll is a `flwr ls` process
        (about 1 s of CPU): polled every 2 s, a 2-minute run cost a core a minute of the 2 the
        run itself needs, so the interval grows by half each poll, to at most 10 s.

        With `progress` (e.g. `self.progress(out)`), `timeout` is how long the run may go
        without progress, not its whole time: a run slowed by a busy host still finishes, a
        stalled one fails (CI, stop 84: a 6-round run under attack, 40-88 s a round, ran past a
        fixed 400 s)."""
        every, stall = 2.0, _Stall(timeout, progress)
        while not stall.over():
            status = self.status(connection, run_id, where=where)
            if status.startswith("finished"):
                return status
            time.sleep(min(every, stall.left()))
            every = min(every * 1.5, 10.0)
        raise TimeoutError(f"waited {stall.describe()} for {what}")

    def progress(self, out: Path):
        """What a live run moves: its finished rounds (out/rounds.csv) and the replies its
        nodes have sent ("Sent successfully" in the SuperNodes' logs under `tmp`). A node's
        supervisor restarting it in a loop, or a server logging that it still waits, moves
        neither; a run has finitely many replies, so a wait on this ends."""

        def moved() -> tuple[int, int]:
            logs = self.tmp.glob("*.log")
            return rounds_done(out), sum(p.read_text().count("Sent successfully") for p in logs)

        return moved

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()[-3000:]

    def close(self) -> None:
        for name in list(self.procs):
            try:
                self.kill(name, signal.SIGTERM)
            except subprocess.TimeoutExpired:
                self.kill(name, signal.SIGKILL)


class _Stall:
    """A deadline that moves each time `progress()` returns something new (never, without it)."""

    def __init__(self, timeout: float, progress=None):
        self.timeout, self.progress = timeout, progress
        self.seen = progress() if progress else None
        self.deadline = time.monotonic() + timeout

    def over(self) -> bool:
        if self.progress is not None:
            now = self.progress()
            if now != self.seen:
                self.seen, self.deadline = now, time.monotonic() + self.timeout
        return time.monotonic() >= self.deadline

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def describe(self) -> str:
        if self.progress is None:
            return f"{self.timeout:.0f} s"
        return f"{self.timeout:.0f} s with no progress (last: {self.seen})"


def wait_for(predicate, timeout: float, every: float = 2.0, what: str = "", progress=None) -> None:
    """Wait until `predicate()`; with `progress`, `timeout` counts from its last change."""
    stall = _Stall(timeout, progress)
    while not stall.over():
        if predicate():
            return
        time.sleep(min(every, stall.left()))
    raise TimeoutError(f"waited {stall.describe()} for {what}")


def rounds_done(out: Path) -> int:
    path = out / "rounds.csv"
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0
