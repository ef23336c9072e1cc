"""Flower's own SuperNode, polling quickly while a run is active (issue 63).

    python deploy/quick_poll.py FLOWER-SUPERNODE-ARGS...     (deploy/supernode.sh runs it)
    python deploy/quick_poll.py serverapp FLWR-SERVERAPP-ARGS...   (deploy/serverapp/flwr-serverapp)

Why: Flower 1.41's SuperNode sleeps a fixed 3 s after a pull that found no message
(flwr/supernode/start_client_internal.py, `start_client_internal`'s loop) and checks for its
ClientApp's reply every 0.5 s (`_push_messages`). In FedRL's chain each node is idle for every
message of the other party, so it is nearly always in that 3-s sleep when its next message
arrives: ~1.5 s a message on average, for nothing. This runs the same SuperNode (Flower's
`flower_supernode` entry point, every flag as given) with the module's clock replaced so that:

* the idle sleep is `FEDEMBODIED_ACTIVE_POLL_S` (0.2 s) for `FEDEMBODIED_ACTIVE_S` (60 s) after
  the node last pulled a message, and Flower's 3 s after that (an idle node polls as before);
* the reply check is every 0.05 s instead of 0.5 s.

Nothing else in Flower changes: the node pulls, runs, pushes and authenticates as Flower does.
What it relies on is pinned by tests/test_quick_poll.py (the two sleeps, the pull function's
name and its None for "nothing pulled"), and it refuses to start on a Flower version it was not
tested with (`TESTED`); `FEDEMBODIED_QUICK_POLL=0` runs Flower's SuperNode unchanged.
Object pulls (`quick_object_pulls`): Flower asks again for a message's object that is not
there yet after 1 s, then 2, 4 ... s (flwr/supercore/inflatable/inflatable_utils.pull_objects,
`PULL_INITIAL_BACKOFF`). A SuperNode stores a pulled message before it has pulled the message's
objects (start_client_internal `_pull_and_store_message`), so the ClientApp its SuperExec starts
at once mostly found them missing and slept 1 s, or 1 + 2 s, for objects that came a few ms
later (measured in every deployed FedRL message's start: 0.07-0.26 s when they were there,
1.1-1.3 s or 3.1-3.5 s when not, mean 1.11 s; 0.14 s with a first wait of 0.02 s). The first
wait is 0.02 s (then doubling to Flower's cap) in the SuperNode, each ClientApp process
(deploy/app_gate.clientapp) and the ServerApp process (deploy/serverapp/flwr-serverapp, which
deploy/superlink.sh puts first on its SuperExec's PATH).
The SuperExec's own task poll is Flower's setting (`FLWR_SUPEREXEC_TASK_POLL_INTERVAL`), which
deploy/supernode.sh sets. Extra load on the edge: a node polling 5 times a second while active
makes ~50 requests per 10 s, against deploy/superlink.sh's default of 3,000 per address
(EDGE_REQ_PER_ADDR): ~60 active nodes behind one address before it answers 503 (docs/deployment.md).
"""

from __future__ import annotations

import os
import sys
import time as _time

TESTED = ("1.41.0",)  # Flower versions whose SuperNode loop this was tested against
IDLE_S, REPLY_S = 3, 0.5  # the sleeps Flower 1.41 hard-codes (tests/test_quick_poll.py)
PULL_BACKOFF_S, QUICK_PULL_S = 1, 0.02  # Flower 1.41's first wait for a missing object; ours


def flower_version() -> str:
    import flwr

    version = getattr(flwr, "__version__", "")
    if not version:
        from importlib.metadata import version as dist_version

        version = dist_version("flwr")
    return version


def quick_object_pulls(first_s: float = QUICK_PULL_S) -> bool:
    """In this process, Flower's object pulls wait `first_s` (not 1 s) before asking again for
    an object that is not there yet (module docstring). False, and nothing changed, on a Flower
    version not in TESTED or whose pull functions no longer default to Flower 1.41's wait."""
    if os.environ.get("FEDEMBODIED_QUICK_POLL", "1") == "0" or flower_version() not in TESTED:
        return False
    from flwr.supercore.inflatable import inflatable_utils as iu

    pulls = (iu.pull_objects, iu.pull_and_inflate_object_from_tree)
    waits = [(f.__kwdefaults__ or {}).get("initial_backoff") for f in pulls]
    if any(w not in (PULL_BACKOFF_S, first_s) for w in waits):
        return False
    for f in pulls:
        f.__kwdefaults__["initial_backoff"] = first_s
    return True


class QuickClock:
    """Stands in for the `time` module inside flwr.supernode.start_client_internal: every
    attribute is the real module's, except `sleep` of Flower's two poll intervals."""

    def __init__(self, active_s: float, active_poll_s: float, reply_poll_s: float):
        self.active_s, self.active_poll_s, self.reply_poll_s = active_s, active_poll_s, reply_poll_s
        self.last_pull = -float("inf")  # monotonic time of the last message pulled

    def __getattr__(self, name):
        return getattr(_time, name)

    def pulled(self) -> None:
        self.last_pull = _time.monotonic()

    def interval(self, seconds: float) -> float:
        """What Flower's `sleep(seconds)` becomes."""
        if seconds == IDLE_S and _time.monotonic() - self.last_pull < self.active_s:
            return self.active_poll_s
        if seconds == REPLY_S:
            return self.reply_poll_s
        return seconds

    def sleep(self, seconds: float) -> None:
        _time.sleep(self.interval(seconds))


def install(module, clock: QuickClock) -> None:
    """Put `clock` in `module` (flwr.supernode.start_client_internal) and note every pull
    that brought a message (Flower's `_pull_and_store_message` returns its run id, or None)."""
    pull = module._pull_and_store_message

    def pull_and_note(*args, **kwargs):
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            clock.pulled()
        return run_id

    module.time = clock
    module._pull_and_store_message = pull_and_note


def serverapp() -> int:
    """Flower's `flwr-serverapp`, its object pulls quick (the replies' objects)."""
    from flwr.superlink.cli import flwr_serverapp

    quick_object_pulls()
    sys.argv = ["flwr-serverapp", *sys.argv[2:]]
    flwr_serverapp()
    return 0


def main() -> int:
    if sys.argv[1:2] == ["serverapp"]:
        return serverapp()
    from flwr.supernode.cli.flower_supernode import flower_supernode

    if os.environ.get("FEDEMBODIED_QUICK_POLL", "1") != "0":
        version = flower_version()
        if version not in TESTED:
            print(
                f"quick_poll.py: Flower {version} is not one this launcher was tested with "
                f"({', '.join(TESTED)}); its SuperNode loop may differ. Run Flower's own "
                "SuperNode with FEDEMBODIED_QUICK_POLL=0, or test and add the version to TESTED",
                file=sys.stderr,
            )
            return 2
        from flwr.supernode import start_client_internal

        quick_object_pulls()

        install(
            start_client_internal,
            QuickClock(
                float(os.environ.get("FEDEMBODIED_ACTIVE_S", "60")),
                float(os.environ.get("FEDEMBODIED_ACTIVE_POLL_S", "0.2")),
                0.05,
            ),
        )
    sys.argv[0] = "flower-supernode"
    flower_supernode()
    return 0


if __name__ == "__main__":
    sys.exit(main())
