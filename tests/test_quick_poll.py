"""deploy/quick_poll.py: what it relies on in Flower's SuperNode is still there, and it does
what it says (issue 63)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
import quick_poll  # noqa: E402


def test_flowers_supernode_loop_is_the_one_the_launcher_was_tested_against():
    """The pins: the idle sleep follows a None from `_pull_and_store_message` in
    `start_client_internal`, the reply wait is `time.sleep(0.5)` in `_push_messages`, and both
    look `time` up in the module (so the launcher's clock reaches them)."""
    import flwr
    from flwr.supernode import start_client_internal as sci

    assert flwr.__version__ in quick_poll.TESTED
    loop = inspect.getsource(sci.start_client_internal)
    assert "run_id = _pull_and_store_message(" in loop
    assert f"if run_id is None:\n                # If no message was received, wait for a while\n                time.sleep({quick_poll.IDLE_S})" in loop  # fmt: skip
    assert loop.count("time.sleep(") == 1
    push = inspect.getsource(sci._push_messages)
    assert f"time.sleep({quick_poll.REPLY_S})" in push
    assert "return None" in inspect.getsource(sci._pull_and_store_message)
    assert sci.time is time  # the module's own name, replaced by install()


def test_the_idle_poll_is_short_only_after_a_message_and_flowers_otherwise():
    clock = quick_poll.QuickClock(active_s=0.3, active_poll_s=0.2, reply_poll_s=0.05)
    assert clock.interval(3) == 3  # no message yet: Flower's idle poll
    assert clock.interval(0.5) == 0.05 and clock.interval(7) == 7
    clock.pulled()
    assert clock.interval(3) == 0.2
    time.sleep(0.35)
    assert clock.interval(3) == 3  # idle again
    assert clock.monotonic() > 0  # every other attribute is the time module's


def test_install_notes_a_pull_that_brought_a_message_and_not_an_empty_one():
    class Module:
        time = time
        answers = [None, 42]

        @staticmethod
        def _pull_and_store_message(**kw):
            return Module.answers.pop(0)

    clock = quick_poll.QuickClock(60, 0.2, 0.05)
    quick_poll.install(Module, clock)
    assert Module.time is clock
    assert Module._pull_and_store_message() is None and clock.interval(3) == 3
    assert Module._pull_and_store_message() == 42 and clock.interval(3) == 0.2


def test_an_untested_flower_version_is_refused_by_name(monkeypatch):
    code = (
        "import sys, flwr; flwr.__version__ = '9.9.9'; sys.path.insert(0, 'deploy'); "
        "import quick_poll; sys.exit(quick_poll.main())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (
        out.returncode == 2
        and "Flower 9.9.9 is not one this launcher was tested with" in out.stderr
    )


def test_flowers_object_pulls_are_the_ones_quick_object_pulls_was_tested_against():
    """The pins: a missing object is asked for again after `initial_backoff` (1 s in Flower
    1.41), a keyword default of both pull functions, and the three places that pull a message's
    objects (the ClientApp's task input, the SuperNode's pull from the SuperLink, the ServerApp's
    grid) leave it at its default, so changing the default reaches them."""
    from flwr.supercore.inflatable import inflatable_utils as iu
    from flwr.superlink.grid import http_grid
    from flwr.supernode import start_client_internal as sci
    from flwr.supernode.runtime import run_clientapp

    for f in (iu.pull_objects, iu.pull_and_inflate_object_from_tree):
        assert "initial_backoff" in inspect.signature(f).parameters
    assert "initial_backoff=initial_backoff" in inspect.getsource(
        iu.pull_and_inflate_object_from_tree
    )
    assert "pull_and_inflate_object_from_tree(" in inspect.getsource(run_clientapp.pull_task_input)
    for caller in (run_clientapp.pull_task_input, sci._pull_and_store_message, http_grid.HttpGrid):
        assert "initial_backoff" not in inspect.getsource(caller)
    assert "pull_objects(" in inspect.getsource(sci._pull_and_store_message)
    assert "pull_objects(" in inspect.getsource(http_grid)


def test_quick_object_pulls_asks_again_for_a_missing_object_within_a_tenth_of_a_second():
    """An object that is there on the second ask: Flower 1.41 waits ~1 s before asking again
    (the ClientApp's start in a deployed message, docs/performance.md); in a fresh process after
    `quick_object_pulls` it waits 0.02 s. Measured on Flower's own pull_objects."""
    script = """
import sys, time
sys.path.insert(0, "deploy")
import quick_poll
from flwr.supercore.inflatable import inflatable_utils as iu
if sys.argv[1] == "quick":
    assert quick_poll.quick_object_pulls()
asked = []
def pull(object_id):
    asked.append(object_id)
    if len(asked) == 1:
        raise iu.ObjectUnavailableError(object_id)
    return b"x"
t0 = time.monotonic()
assert iu.pull_objects(["a"], pull) == {"a": b"x"}
print(time.monotonic() - t0)
"""
    waited = {}
    for setting in ("flower", "quick"):
        out = subprocess.run(
            [sys.executable, "-c", script, setting],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "FEDEMBODIED_QUICK_POLL": "1"},
        )
        assert out.returncode == 0, out.stderr[-2000:]
        waited[setting] = float(out.stdout.split()[-1])
    assert waited["flower"] > 0.7 and waited["quick"] < 0.1, waited
