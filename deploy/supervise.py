"""Keep one SuperNode (or one of the SuperLink host's processes: deploy/superlink.sh runs each
under this) running: restart it when it exits or stops talking to the SuperLink, and stop it
with all its children on SIGTERM.

Why: a Flower 1.41 SuperNode retries connection errors and 502/503/504 by itself, but gives up
for good on any error whose text mentions certificate, ssl or tls (a TLS handshake that timed
out during an overload included; flwr/supercore/retry/http_retry.py, `_should_giveup`) and on
other HTTP statuses; after that it may stay alive, offline and silent. It also exits when it
cannot connect at start (exit code 305). Neither should need an operator. So this relays the
node's output line by line, and when the node exits or prints a line matching `--restart-on`,
stops the node's whole process group (it and the flwr-clientapp / flower-superexec it started)
and starts it again after a back-off (1 s doubling to 30 s; reset after a minute of health).
Exit codes of configuration errors a restart cannot fix (`--fatal-codes`, Flower's exit codes:
302 bad key, 303 node auth without TLS, 304 bad trusted entities, 600-605 bad address or TLS
files) end the supervisor with that code.

    python deploy/supervise.py -- flower-supernode --superlink ... (deploy/supernode.sh uses it)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial

# Flower 1.41's lines after which the node no longer reaches the SuperLink by itself
GAVE_UP = r"SSL/TLS handshake error detected|Giving up reconnection|Heartbeat failed unexpectedly"
FATAL = "302,303,304,600,602,603,604,605"
HEALTHY_S, MAX_BACKOFF_S, GRACE_S = 60.0, 30.0, 15.0


def _die_with_parent() -> None:
    """In the child before exec: Linux kills it when the supervisor dies, however it dies
    (a SIGKILL to the supervisor's group must not leave the node running in its own)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def say(text: str) -> None:
    print(f"supervise: {text}", flush=True)


class Supervisor:
    def __init__(
        self, command: list[str], restart_on: str, fatal: set[int], same_group: bool = False
    ):
        self.command, self.restart_on, self.fatal = command, re.compile(restart_on), fatal
        self.same_group = same_group
        self.child: subprocess.Popen | None = None
        name = os.path.basename(command[0])
        script = name.startswith(("python", "bash", "sh")) and len(command) > 1
        self.name = os.path.basename(command[1]) if script else name  # what the log names
        self.stopping = 0  # the signal that asked us to stop

    def stop_child(self) -> None:
        """SIGTERM to the node's process group (with --same-group: to the child alone),
        SIGKILL after a grace period."""
        if self.child is None:
            return
        send = self.child.send_signal if self.same_group else partial(os.killpg, self.child.pid)
        for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
            try:
                send(sig)
            except ProcessLookupError:
                return
            try:
                self.child.wait(timeout=wait)
                if sig == signal.SIGTERM:
                    time.sleep(0.5)  # the node's children stop after it
                break
            except subprocess.TimeoutExpired:
                continue
        if self.same_group:
            return  # what it started stays: the caller's process group is theirs to stop
        try:  # children the node left behind in its group
            os.killpg(self.child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def on_signal(self, signum, _frame) -> None:
        self.stopping = signum  # run_once sees it within 0.2 s and stops the node

    def run_once(self) -> int:
        """Run the node until it exits or gives up; its exit code. The output is relayed by a
        thread: the node's children hold the pipe open after the node itself has exited."""
        self.child = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=not self.same_group,  # its own process group: we stop all it starts
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            text=True,
            errors="replace",
        )
        gave_up = threading.Event()

        def relay(stream) -> None:
            for line in stream:
                sys.stdout.write(line)
                sys.stdout.flush()
                if not gave_up.is_set() and self.restart_on.search(line):
                    say(
                        f"{self.name} gave up on the SuperLink ({line.strip()[:120]}); restarting it"
                    )
                    gave_up.set()

        reader = threading.Thread(target=relay, args=(self.child.stdout,), daemon=True)
        reader.start()
        while self.child.poll() is None and not gave_up.is_set() and not self.stopping:
            time.sleep(0.2)
        self.stop_child()  # the whole group: the node, or what it left behind
        reader.join(timeout=5)
        return self.child.wait()

    def run(self) -> int:
        backoff = 1.0
        while True:
            started = time.monotonic()
            code = self.run_once()
            if self.stopping:
                return 128 + self.stopping
            if code in self.fatal:  # a process's exit status is Flower's code modulo 256
                say(f"{self.name} exited with {code}, a configuration error: not restarting")
                return code
            if time.monotonic() - started >= HEALTHY_S:
                backoff = 1.0
            say(f"{self.name} stopped (exit {code}); starting it again in {backoff:.0f} s")
            deadline = time.monotonic() + backoff
            while time.monotonic() < deadline and not self.stopping:
                time.sleep(0.2)
            if self.stopping:
                return 128 + self.stopping
            backoff = min(2 * backoff, MAX_BACKOFF_S)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--restart-on", default=GAVE_UP, help="regex of output lines that mean stuck")
    p.add_argument("--fatal-codes", default=FATAL, help="exit codes not worth a restart")
    p.add_argument(
        "--same-group",
        action="store_true",
        help="keep the process in this one's process group (deploy/superlink.sh): a signal to "
        "the group reaches all it started, ServerApps included; a restart stops it alone",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command to supervise after --")
    try:
        fatal = {int(c) % 256 for c in args.fatal_codes.split(",") if c.strip()}
    except ValueError:
        p.error(f"--fatal-codes {args.fatal_codes!r}: comma-separated integers")
    sup = Supervisor(command, args.restart_on, fatal, args.same_group)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, sup.on_signal)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
