"""A warm parent that forks each message's ClientApp process (issue 63 item 3).

Why: deployed, Flower's SuperExec starts one `flwr-clientapp` process per message, and each
pays Python's start and the imports of Flower, torch and numpy again (~1.4 s of a FedRL
message's 2.8 s process start on 2 cores, docs/performance.md). Here one parent per node
imports those once and forks a child per message: the child is still a process of its own,
started for that one message, and runs exactly the code a cold one runs, the operator's gate
(deploy/app_gate.py `clientapp`: the FAB's hash checked before Flower unpacks or imports it),
then Flower's own ClientApp process. The app's own code is never imported by the parent: each
child imports it from the FAB Flower installed, so a run cannot find code of another FAB
already loaded. The party's policy, audit log and state are the child's, as before.

How: deploy/gate/flwr-clientapp (what the SuperExec starts) calls `run_warm`, which connects
to this node's parent over a unix socket in a directory only the node's user can open
(`FEDEMBODIED_WARM_DIR`, set by deploy/supernode.sh; the socket is named by a digest of the
whole environment, so a node restarted with other settings, e.g. other approved FABs or another
state folder, gets a parent of its own), passes its argv, working directory
and its stdin/stdout/stderr (SCM_RIGHTS), and waits for the child's exit status, which it
exits with. When the gate is killed, its connection closes and the parent kills the child
(SIGTERM, then SIGKILL after KILL_GRACE_S).
With no parent answering, the gate starts one in the background and runs this message cold;
a parent exits with the node: when the SuperExec that starts the node's ClientApps (the
`--parent-pid` Flower passes each of them) is gone, or after `IDLE_EXIT_S` without a message. `FEDEMBODIED_WARM_START=0` turns it off.
What a child runs with comes from the parent's environment (the node's, set when the node
started), never from the request: a local process that reaches the socket can ask for a
ClientApp process, not choose which FABs are approved.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

ENV = "FEDEMBODIED_WARM_DIR"
IDLE_EXIT_S = 1800.0
# a child whose gate was killed gets SIGTERM, and SIGKILL this long after if it is still
# there (a ClientApp stuck in a C call, or one whose handler waits, must not hold the node)
KILL_GRACE_S = 10.0
PRELOAD = (
    "numpy",
    "torch",
    "dp_accounting",  # the party's own epsilon, every FedRL message (0.9 s to import)
    # a torch optimizer's first construction imports it: 1.0 s of every FedRL message that
    # updates (measured on a 200-round deployed run: 1.3 s of `work`, 0.3 s of it updating)
    "torch._dynamo",
    # the app's own third-party imports (0.11 s of every message's start, `python -X importtime`
    # of clients.app after the rest: networkx for the Grid-World maps, tabulate for its tables)
    "networkx",
    "tabulate",
    "flwr.supernode.cli.flwr_clientapp",
    "flwr.supernode.runtime.run_clientapp",
)


def socket_path(folder: str) -> Path:
    """This environment's parent's socket in `folder`: named by the whole environment, this
    file and the interpreter's installed packages (their folder changes with every install), so
    a parent never serves a node whose settings or code it did not start with."""
    import hashlib
    import sysconfig

    what = [
        sorted(os.environ.items()),
        sys.executable,
        Path(__file__).read_text(),
        os.stat(sysconfig.get_paths()["purelib"]).st_mtime_ns,
    ]
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:20]
    return Path(folder) / f"warm-{digest}.sock"


def private_dir(path: Path) -> bool:
    """The socket's directory exists, is ours and only ours (mode 0700), or is made so."""
    d = path.parent
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700, parents=True)
    st = d.lstat()
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def run_warm(path: Path, argv: list[str]) -> int | None:
    """The exit status of `argv` run by the warm parent at `path`; None when no parent
    answers (the caller runs the message cold) or the directory is not private."""
    if not private_dir(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    with conn:
        try:
            conn.settimeout(5.0)  # a parent that does not take the request in time: run cold
            request = json.dumps({"argv": argv, "cwd": os.getcwd()}).encode()
            socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
            if conn.recv(1) != b"S":  # the parent forked the child (else: it died first)
                return None
        except OSError:
            return None
        conn.settimeout(None)
        answer = b""
        while len(answer) < 4:
            chunk = conn.recv(4 - len(answer))
            if not chunk:  # the parent died while the child ran
                return 1
            answer += chunk
    return int.from_bytes(answer, "big", signed=True)


def start_parent(path: Path, superexec: int | None = None) -> None:
    """Start this node's warm parent in the background (its own session), once. It is told
    the node's SuperExec (`superexec`) from the start, so that a parent whose node stops before
    it has served a message exits with it too, instead of idling for IDLE_EXIT_S (found after a
    SuperNode was killed and restarted in tests/test_deployment.py)."""
    here = Path(__file__).resolve()
    node = [str(superexec)] if superexec else []
    subprocess.Popen(  # noqa: S603 (our own script, our own interpreter)
        [sys.executable, str(here), "serve", str(path), *node],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 4 + 65536, 3)
    size = int.from_bytes(head[:4], "big")
    body = head[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            break
        body += chunk
    return json.loads(body), fds


def _superexec(argv: list[str]) -> int | None:
    """The pid Flower passes a ClientApp as `--parent-pid` (its SuperExec), if any."""
    for flag, value in zip(argv, argv[1:]):
        if flag == "--parent-pid" and value.isdigit():
            return int(value)
    return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child(request: dict, fds: list[int], lock_fd: int) -> None:
    """In the forked child: become the gate's process (its stdio, cwd, argv) and run the
    gate's ClientApp; never returns into the parent's loop. The random state numpy and Python
    seeded when the parent imported them is drawn afresh, as in a cold process (else every
    message would draw the same unseeded numbers)."""
    code = 1
    try:
        os.close(lock_fd)
        import random

        import numpy as np

        random.seed()
        np.random.seed()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        sys.argv = ["flwr-clientapp", *request["argv"]]
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import app_gate

        app_gate.clientapp()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 (reported on the gate's stderr, as a cold start would)
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: Path, node: int | None = None) -> int:
    """The warm parent: import the heavy modules once, then fork a child per request, until
    the node's SuperExec (`node`, else the first request's `--parent-pid`) is gone."""
    if not private_dir(path):
        print(f"warm_start: {path.parent} is not a private directory of this user", file=sys.stderr)
        return 2
    lock = open(f"{path}.lock", "w")  # noqa: SIM115 (held for the parent's life)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another parent serves this node
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o600)
    server.listen(64)
    children: dict[int, socket.socket] = {}  # child pid -> the gate's connection
    killed: dict[int, float] = {}  # child pid -> when it gets SIGKILL (its gate went away)
    try:
        _loop(server, lock, children, killed, node)
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return 0


def terminate(pid: int, killed: dict[int, float], now: float) -> None:
    """SIGTERM a child now, and SIGKILL it after KILL_GRACE_S (`escalate`)."""
    killed[pid] = now + KILL_GRACE_S
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def escalate(killed: dict[int, float], now: float) -> None:
    """SIGKILL every child in `killed` whose grace after SIGTERM is over (once each)."""
    for pid, due in list(killed.items()):
        if now >= due:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed[pid] = math.inf


def stop_orphans(children: dict, killed: dict, node: int | None, now: float) -> None:
    """The messages still running once the node's SuperExec is gone serve nothing: each gets
    SIGTERM, and SIGKILL after KILL_GRACE_S (`escalate`). Flower's own watch of `--parent-pid`
    raises SIGINT in the ClientApp, which Python handles only between bytecodes: a child
    blocked in a call to the dead SuperExec's API never saw it, and this parent, waiting for
    its children, outlived the node with it (a SuperNode killed mid-message, 2026-12-05)."""
    if _alive(node):
        return
    for pid in children:
        if pid not in killed:
            terminate(pid, killed, now)


def _loop(server, lock, children: dict, killed: dict, node: int | None) -> None:
    """Fork a child per request, report each child's exit status to its gate, kill a child
    whose gate went away; until the node's SuperExec is gone or IDLE_EXIT_S without a message."""
    idle_since = time.monotonic()
    while children or (time.monotonic() - idle_since < IDLE_EXIT_S and _alive(node)):
        watched = [c for p, c in children.items() if p not in killed]
        ready, _, _ = select.select([server, *watched], [], [], 0.05)
        for r in ready:
            if r is server:
                conn, _ = server.accept()
                fds: list[int] = []
                try:  # a request that is late, empty or malformed is dropped, not fatal
                    conn.settimeout(2.0)
                    request, fds = _recv_request(conn)
                    argv, cwd = list(map(str, request["argv"])), str(request["cwd"])
                    if len(fds) != 3:
                        raise ValueError("expected the caller's stdin, stdout and stderr")
                except (OSError, ValueError, KeyError, TypeError):
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                node = _superexec(argv) or node
                pid = os.fork()
                if pid == 0:
                    server.close()
                    for c in children.values():
                        c.close()
                    conn.close()
                    _child({"argv": argv, "cwd": cwd}, fds, lock.fileno())
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.sendall(b"S")
                children[pid] = conn
            else:  # a gate's connection closed before its child ended: the gate was killed
                terminate(next(p for p, c in children.items() if c is r), killed, time.monotonic())
        stop_orphans(children, killed, node, time.monotonic())
        escalate(killed, time.monotonic())
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            killed.pop(pid, None)
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(os.waitstatus_to_exitcode(status).to_bytes(4, "big", signed=True))
                conn.close()
            idle_since = time.monotonic()


def gate_main(argv: list[str]) -> int:
    """deploy/gate/flwr-clientapp: the message's ClientApp, forked warm when it can be."""
    folder = os.environ.get(ENV, "")
    where = socket_path(folder) if folder else None
    # a unix socket's path is at most 107 bytes: a deeper folder runs every message cold
    if (
        where
        and len(os.fsencode(where)) < 100
        and os.environ.get("FEDEMBODIED_WARM_START", "1") != "0"
    ):
        code = run_warm(where, argv)
        if code is not None:
            return code
        with contextlib.suppress(OSError):
            if private_dir(where):
                start_parent(where, _superexec(argv))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import app_gate

    return app_gate.main(["clientapp", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        node = sys.argv[3:4]
        sys.exit(serve(Path(sys.argv[2]), int(node[0]) if node else None))
    sys.exit(gate_main(sys.argv[1:]))
